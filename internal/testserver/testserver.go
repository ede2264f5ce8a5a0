// Package testserver starts real servers (redis-server, etcd) for tests, on
// free loopback ports in temporary directories, and stops them by PID.
//
// A test that needs a server calls the server's function (Redis, Etcd). When
// the matching environment variable names a running server (make test
// starts one of each and exports it), that server is used; otherwise one is
// started for the test binary and stopped when the binary's TestMain calls
// StopAll. A server that cannot start fails the test with a message that
// says how to get it: store tests never skip into a green run.
package testserver

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// TB is the part of testing.TB the package uses, so non-test programs (the
// benchmark and fault-test drivers) can start servers too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// Process is a server process this package started.
type Process struct {
	Name string
	Addr string // host:port clients connect to
	Dir  string // its data directory
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
	// group: Kill ends the server's whole process group.
	group bool
}

var (
	mu      sync.Mutex
	started []*Process
)

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testserver: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs bin with args in dir, waits until addr accepts TCP connections
// (or timeout passes) and registers the process so StopAll ends it. The
// process's output is kept for error messages.
func Start(name, bin string, args []string, dir, addr string, timeout time.Duration) (*Process, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("testserver: %s not found on PATH (%w); on Debian run `apt-get install %s`, or run `make test`, which installs it", bin, err, debianPackage(bin))
	}
	return start(name, path, args, dir, addr, timeout, nil)
}

// start is Start for the program at path, run with cred when not nil.
func start(name, path string, args []string, dir, addr string, timeout time.Duration, cred *syscall.Credential) (*Process, error) {
	p := &Process{Name: name, Addr: addr, Dir: dir, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	// Its own process group, so a Ctrl-C in the terminal does not race our
	// orderly stop, and the server never outlives us by inheriting a group.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("testserver: start %s: %w", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("testserver: %s exited before accepting connections (%v); output:\n%s", name, p.err, p.Output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("testserver: %s did not accept connections on %s within %v; output:\n%s", name, addr, timeout, p.Output())
		}
	}
	mu.Lock()
	started = append(started, p)
	mu.Unlock()
	return p, nil
}

// PID returns the server's process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Output returns what the server printed so far.
func (p *Process) Output() string {
	return p.out.String()
}

// syncBuffer is a bytes.Buffer safe for the process's writes and our reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Stop ends the server with SIGTERM and waits up to five seconds, then
// kills it.
func (p *Process) Stop() {
	sig := syscall.SIGTERM
	if p.group {
		sig = syscall.SIGINT // PostgreSQL's fast shutdown: it does not wait for clients
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.Kill()
	}
}

// Kill ends the server with SIGKILL at once, as a crash would, and waits
// for it to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if p.group {
		// A server of several processes (PostgreSQL) dies as a whole.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// StopAll stops every server this package started in this process. Call it
// from TestMain after m.Run.
func StopAll() {
	mu.Lock()
	ps := started
	started = nil
	mu.Unlock()
	for _, p := range ps {
		p.Stop()
	}
}

func debianPackage(bin string) string {
	switch bin {
	case "etcd":
		return "etcd-server"
	default:
		return bin
	}
}

// envOr returns the environment variable key when set.
func envOr(key string) (string, bool) {
	v, ok := os.LookupEnv(key)
	return v, ok && v != ""
}

func itoa(i int) string { return strconv.Itoa(i) }
