package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// EtcdEnv names the environment variable that points tests at running etcd
// servers: a comma-separated list of client endpoints
// ("127.0.0.1:2379,127.0.0.1:22379"). When it is unset, Etcd starts one
// server for the test binary.
const EtcdEnv = "JOBKIT_ETCD_ENDPOINTS"

// EtcdBinEnv names the environment variable that picks the etcd program
// the package starts (Etcd when $JOBKIT_ETCD_ENDPOINTS is unset, StartEtcd,
// RestartEtcd): a path, or a name looked up on PATH. Unset, it is "etcd",
// Debian's etcd-server (3.4, the oldest etcd the store supports). make test
// builds the current etcd from ../../tools/etcd and sets it to that
// program, and runs the etcd store's tests once more with it set to
// Debian's.
const EtcdBinEnv = "JOBKIT_ETCD_BIN"

// etcdStartTimeout bounds how long a fresh etcd may take to accept clients.
// A single-member cluster elects itself in about a second.
const etcdStartTimeout = 20 * time.Second

var (
	etcdOnce      sync.Once
	etcdEndpoints []string
	etcdErr       error
)

// Etcd returns the client endpoints of an etcd server for t: the ones in
// $JOBKIT_ETCD_ENDPOINTS when set, otherwise those of one server started on
// free loopback ports for the whole test binary (stopped by StopAll). Tests
// share the server and keep apart by key prefix. It fails t, never skips,
// when no server can be had.
func Etcd(t TB) []string {
	t.Helper()
	if v, ok := envOr(EtcdEnv); ok {
		var eps []string
		for _, ep := range strings.Split(v, ",") {
			if ep = strings.TrimSpace(ep); ep != "" {
				eps = append(eps, ep)
			}
		}
		if len(eps) == 0 {
			t.Fatalf("testserver: $%s=%q names no endpoint; want host:port[,host:port...]", EtcdEnv, v)
		}
		return eps
	}
	etcdOnce.Do(func() {
		var p *Process
		p, etcdErr = startEtcd(true)
		if etcdErr == nil {
			etcdEndpoints = []string{p.Addr}
		}
	})
	if etcdErr != nil {
		t.Fatalf("%v", etcdErr)
	}
	return etcdEndpoints
}

// StartEtcd starts a server of t's own, for tests that kill or restart it.
// The caller may Stop or Kill it; StopAll stops it if it still runs. Its
// client endpoint is the Process's Addr. RestartEtcd starts it again on the
// same ports and data. Extra flags (args) follow the package's own, so a
// flag given again takes the later value ("--quota-backend-bytes",
// "16777216").
func StartEtcd(t TB, args ...string) *Process {
	t.Helper()
	p, err := startEtcd(false, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// RestartEtcd starts a stopped or killed server again with the same ports
// and data directory, and returns the new process. It fails t if p still
// runs.
func RestartEtcd(t TB, p *Process) *Process {
	t.Helper()
	select {
	case <-p.Exited():
	default:
		t.Fatalf("testserver: restart %s: it is still running (pid %d); Stop or Kill it first", p.Name, p.PID())
	}
	np, err := start(p.Name, p.cmd.Path, p.cmd.Args[1:], p.Dir, p.Addr, etcdStartTimeout, nil)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return np
}

// etcdProgram returns the path of the etcd program to start: $JOBKIT_ETCD_BIN
// or etcd on PATH, with how to get it when it is missing.
func etcdProgram() (string, error) {
	bin, set := envOr(EtcdBinEnv)
	if !set {
		bin = "etcd"
	}
	path, err := exec.LookPath(bin)
	if err == nil {
		return path, nil
	}
	if set {
		return "", fmt.Errorf("testserver: $%s=%q: %w; build it with `go -C tools/etcd tool -n go.etcd.io/etcd/server/v3` (it prints the program's path), or unset it to use etcd on PATH", EtcdBinEnv, bin, err)
	}
	return "", fmt.Errorf("testserver: etcd not found on PATH (%w); on Debian run `apt-get install etcd-server`, run `make test`, which builds etcd, or set $%s to an etcd program", err, EtcdBinEnv)
}

// startEtcd starts a single-member etcd with client and peer ports picked
// free on 127.0.0.1 and a data directory of its own, removed when the server
// exits if removeDir is set (a server that may be restarted keeps it). A
// port taken between picking and binding is retried with fresh ports.
func startEtcd(removeDir bool, extra ...string) (*Process, error) {
	path, err := etcdProgram()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 3 {
		cport, err := FreePort()
		if err != nil {
			return nil, err
		}
		pport, err := FreePort()
		if err != nil {
			return nil, err
		}
		if pport == cport {
			continue
		}
		dir, err := os.MkdirTemp("", "jobkit-etcd-")
		if err != nil {
			return nil, fmt.Errorf("testserver: etcd data directory: %w", err)
		}
		client := "http://127.0.0.1:" + itoa(cport)
		peer := "http://127.0.0.1:" + itoa(pport)
		name := "jobkit-etcd-" + itoa(cport)
		args := []string{
			"--name", name,
			"--data-dir", dir + "/data",
			"--listen-client-urls", client,
			"--advertise-client-urls", client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", name + "=" + peer,
			"--initial-cluster-state", "new",
			"--initial-cluster-token", name,
			// As production clusters run: old revisions compacted every
			// minute, so deleted keys do not pile up in the index.
			"--auto-compaction-mode", "periodic",
			"--auto-compaction-retention", "1m",
			"--quota-backend-bytes", "8589934592",
			"--logger", "zap",
			"--log-outputs", "stderr",
			"--log-level", "warn",
		}
		args = append(args, extra...)
		p, err := start("etcd", path, args, dir, "127.0.0.1:"+itoa(cport), etcdStartTimeout, nil)
		if err == nil {
			if removeDir {
				go func() {
					<-p.Exited()
					os.RemoveAll(dir)
				}()
			}
			return p, nil
		}
		os.RemoveAll(dir)
		lastErr = err
	}
	return nil, fmt.Errorf("%w\n(etcd is the Debian package etcd-server: `apt-get install etcd-server`; or set $%s to running servers)", lastErr, EtcdEnv)
}
