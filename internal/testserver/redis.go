package testserver

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// RedisAddrEnv names the environment variable that points the tests at a
// running redis-server (host:port) instead of starting one.
const RedisAddrEnv = "JOBKIT_REDIS_ADDR"

var (
	redisOnce sync.Once
	redisAddr string
	redisErr  error
)

// Redis returns the address of a redis-server for this test binary: the one
// $JOBKIT_REDIS_ADDR names when it is set, otherwise one started on first
// use (a free loopback port, a temporary directory, no persistence) and
// stopped by StopAll. Tests share it and keep apart by key namespace. When
// no server can be started the test fails and says how to install one.
func Redis(t TB) string {
	t.Helper()
	if addr, ok := envOr(RedisAddrEnv); ok {
		return addr
	}
	redisOnce.Do(func() {
		var p *Process
		p, redisErr = startRedis(nil)
		if redisErr == nil {
			redisAddr = p.Addr
		}
	})
	if redisErr != nil {
		t.Fatalf("%v", redisErr)
	}
	return redisAddr
}

// StartRedis starts a redis-server of the test's own, for tests that kill
// or restart it. extraArgs are appended to the command line and override
// the defaults (`--appendonly yes --appendfsync always` for a durable one).
// The server is stopped by StopAll, or earlier by its Stop or Kill.
func StartRedis(t TB, extraArgs ...string) *Process {
	t.Helper()
	p, err := startRedis(extraArgs)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// RestartRedis starts a new redis-server on old's port and data directory
// with old's arguments plus extraArgs, after old has exited (Stop or Kill
// it first). Use it to test a server that comes back.
func RestartRedis(t TB, old *Process, extraArgs ...string) *Process {
	t.Helper()
	select {
	case <-old.Exited():
	default:
		t.Fatalf("testserver: RestartRedis: %s (pid %d) is still running; Stop or Kill it first", old.Name, old.PID())
	}
	args := append(append([]string(nil), old.cmd.Args[1:]...), extraArgs...)
	p, err := Start(old.Name, "redis-server", args, old.Dir, old.Addr, 10*time.Second)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

func startRedis(extraArgs []string) (*Process, error) {
	dir, err := os.MkdirTemp("", "jobkit-redis-")
	if err != nil {
		return nil, fmt.Errorf("testserver: redis temp dir: %w", err)
	}
	var lastErr error
	// A free port can be taken between FreePort and the server's bind;
	// try a few.
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p, err := startRedisOn(port, dir, extraArgs)
		if err == nil {
			return p, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// StartRedisOn starts a redis-server of the test's own on 127.0.0.1:port,
// for tests of a client that was there before its server. The server is
// stopped by StopAll, or earlier by its Stop or Kill.
func StartRedisOn(t TB, port int, extraArgs ...string) *Process {
	t.Helper()
	dir, err := os.MkdirTemp("", "jobkit-redis-")
	if err != nil {
		t.Fatalf("testserver: redis temp dir: %v", err)
	}
	p, err := startRedisOn(port, dir, extraArgs)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

func startRedisOn(port int, dir string, extraArgs []string) (*Process, error) {
	args := []string{
		"--port", itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
	}
	args = append(args, extraArgs...)
	return Start("redis-server", "redis-server", args, dir, net.JoinHostPort("127.0.0.1", itoa(port)), 10*time.Second)
}
