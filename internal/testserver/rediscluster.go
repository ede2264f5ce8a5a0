package testserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// RedisClusterAddrsEnv names the environment variable that points the tests
// at a running Redis Cluster (comma-separated host:port of its nodes)
// instead of starting one.
const RedisClusterAddrsEnv = "JOBKIT_REDIS_CLUSTER_ADDRS"

// RedisCluster is a Redis Cluster this package started: redis-server
// processes with cluster-enabled, on free loopback ports, each in its own
// temporary directory, joined by `redis-cli --cluster create`.
type RedisCluster struct {
	// Nodes are the servers, in the order given to `--cluster create`:
	// the first Primaries were made primaries, the rest their replicas.
	Nodes     []*Process
	Primaries int
}

// Addrs returns every node's host:port, the seed list of a cluster client.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, p := range c.Nodes {
		addrs[i] = p.Addr
	}
	return addrs
}

var (
	clusterOnce  sync.Once
	clusterAddrs []string
	clusterErr   error
)

// RedisClusterAddrs returns the node addresses of a Redis Cluster for this
// test binary: those $JOBKIT_REDIS_CLUSTER_ADDRS names when it is set,
// otherwise a cluster of 3 primaries and 3 replicas started on first use
// and stopped by StopAll. Tests share it and keep apart by key namespace.
func RedisClusterAddrs(t TB) []string {
	t.Helper()
	if v, ok := envOr(RedisClusterAddrsEnv); ok {
		return strings.Split(v, ",")
	}
	clusterOnce.Do(func() {
		var c *RedisCluster
		c, clusterErr = startRedisCluster(3, 1)
		if clusterErr == nil {
			clusterAddrs = c.Addrs()
		}
	})
	if clusterErr != nil {
		t.Fatalf("%v", clusterErr)
	}
	return clusterAddrs
}

// StartRedisCluster starts a Redis Cluster of the test's own, for tests
// that kill, stop or reshard its nodes: primaries primaries with
// replicasPer replicas each (a primary needs at least 3 for the cluster to
// fail over). A node that stops answering for two seconds is marked failed
// and its replica promoted. The nodes are stopped by StopAll, or earlier by
// their Stop or Kill.
func StartRedisCluster(t TB, primaries, replicasPer int) *RedisCluster {
	t.Helper()
	c, err := startRedisCluster(primaries, replicasPer)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return c
}

func startRedisCluster(primaries, replicasPer int) (*RedisCluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("testserver: redis-cli not found on PATH (%w); on Debian run `apt-get install redis-tools`, or run `make test`, which installs it", err)
	}
	c := &RedisCluster{Primaries: primaries}
	for range primaries * (1 + replicasPer) {
		p, err := startClusterNode()
		if err != nil {
			c.stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, p)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", itoa(replicasPer), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("testserver: redis-cli --cluster create: %w; output:\n%s", err, out)
	}
	if err := c.WaitHealthy(30 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	if err := c.waitReplicas(primaries*replicasPer, 30*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// waitReplicas waits until n nodes are replicas whose initial sync is
// done: a replica still syncing holds none of its primary's data, and a
// failover to it would lose everything.
func (c *RedisCluster) waitReplicas(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		synced := 0
		var last string
		for _, p := range c.Nodes {
			repl, err := redisInfo(p.Addr, "INFO", "replication")
			if err != nil {
				last = fmt.Sprintf("%s: %v", p.Addr, err)
				continue
			}
			if repl["role"] == "slave" && repl["master_link_status"] == "up" && repl["master_sync_in_progress"] == "0" {
				synced++
			}
		}
		if synced >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: %d of %d redis cluster replicas synced within %v %s", synced, n, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitHealthy waits until every running node reports cluster_state:ok
// with all 16384 slots served, and every running replica's link to its
// primary is up.
func (c *RedisCluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var bad string
		for _, p := range c.Nodes {
			select {
			case <-p.Exited():
				continue
			default:
			}
			info, err := redisInfo(p.Addr, "CLUSTER", "INFO")
			if err != nil {
				bad = fmt.Sprintf("%s: %v", p.Addr, err)
				break
			}
			if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != "16384" {
				bad = fmt.Sprintf("%s: cluster_state %s, cluster_slots_ok %s", p.Addr, info["cluster_state"], info["cluster_slots_ok"])
				break
			}
			repl, err := redisInfo(p.Addr, "INFO", "replication")
			if err != nil {
				bad = fmt.Sprintf("%s: %v", p.Addr, err)
				break
			}
			if repl["role"] == "slave" && repl["master_link_status"] != "up" {
				bad = fmt.Sprintf("%s: replica link %s", p.Addr, repl["master_link_status"])
				break
			}
		}
		if bad == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: redis cluster not healthy within %v: %s", timeout, bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *RedisCluster) stop() {
	for _, p := range c.Nodes {
		p.Stop()
	}
}

// startClusterNode starts one cluster-enabled redis-server. Its cluster bus
// listens on its port + 10000, so the port is taken below 55536 and the
// bus port checked free too.
func startClusterNode() (*Process, error) {
	dir, err := os.MkdirTemp("", "jobkit-rediscluster-")
	if err != nil {
		return nil, fmt.Errorf("testserver: redis cluster temp dir: %w", err)
	}
	var lastErr error
	for range 20 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if port+10000 > 65535 || !portFree(port+10000) {
			continue
		}
		p, err := startRedisOn(port, dir, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		})
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("testserver: no free port pair (port and port+10000) for a redis cluster node")
	}
	return nil, lastErr
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// redisInfo sends one command in the inline protocol and parses a
// "key:value" bulk reply (INFO, CLUSTER INFO), with no client library.
func redisInfo(addr string, cmd ...string) (map[string]string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", strings.Join(cmd, " ")); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(head, "$") {
		return nil, fmt.Errorf("%s: %s", strings.Join(cmd, " "), strings.TrimSpace(head))
	}
	var n int
	if _, err := fmt.Sscanf(head, "$%d", &n); err != nil || n < 0 {
		return nil, fmt.Errorf("%s: reply %q", strings.Join(cmd, " "), strings.TrimSpace(head))
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(body[:n]), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			out[k] = v
		}
	}
	return out, nil
}

// PrimaryOf returns the running primary that serves key's slot: the node
// that answers EXISTS key instead of redirecting (replicas redirect too).
func (c *RedisCluster) PrimaryOf(key string) (*Process, error) {
	for _, p := range c.Nodes {
		select {
		case <-p.Exited():
			continue
		default:
		}
		line, err := redisLine(p.Addr, "EXISTS", key)
		if err == nil && strings.HasPrefix(line, ":") {
			return p, nil
		}
	}
	return nil, fmt.Errorf("testserver: no running node of the cluster serves %q", key)
}

// redisLine sends one inline command and returns the first line of its
// reply.
func redisLine(addr string, cmd ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s\r\n", strings.Join(cmd, " ")); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}
