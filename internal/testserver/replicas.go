package testserver

import (
	"strings"
	"time"
)

// WaitReplicaLinkUp waits, up to 20 s, until the redis-server at addr (a
// replica) reports its link to its primary up.
func WaitReplicaLinkUp(t TB, addr string) {
	t.Helper()
	var info map[string]string
	var err error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if info, err = redisInfo(addr, "INFO", "replication"); err == nil && info["master_link_status"] == "up" {
			return
		}
	}
	t.Fatalf("testserver: replica %s: link to its primary not up after 20s: %v %v", addr, err, info)
}

// OnlineReplicaIn returns the node of c that info (a primary's INFO
// replication section) lists as its first replica, once online; nil when
// it lists none online.
func (c *RedisCluster) OnlineReplicaIn(info string) *Process {
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "slave0:")
		if !ok || !strings.Contains(rest, "state=online") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if port, ok := strings.CutPrefix(f, "port="); ok {
				for _, n := range c.Nodes {
					if strings.HasSuffix(n.Addr, ":"+port) {
						return n
					}
				}
			}
		}
	}
	return nil
}
