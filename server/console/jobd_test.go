package console_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/server"
)

// jobdBuild builds server/cmd/jobd once per test binary run, into
// jobdDir (removed by TestMain).
var (
	jobdOnce sync.Once
	jobdDir  string
	jobdBin  string
	jobdErr  error
)

// jobdBinary returns the path of a jobd binary built from this tree.
func jobdBinary(t *testing.T) string {
	t.Helper()
	jobdOnce.Do(func() {
		if jobdDir, jobdErr = os.MkdirTemp("", "console-jobd-"); jobdErr != nil {
			return
		}
		jobdBin = filepath.Join(jobdDir, "jobd")
		if out, err := exec.Command("go", "build", "-o", jobdBin, "../cmd/jobd").CombinedOutput(); err != nil {
			jobdErr = fmt.Errorf("go build jobd: %v\n%s", err, out)
		}
	})
	if jobdErr != nil {
		t.Fatal(jobdErr)
	}
	return jobdBin
}

// testTokens are the tokens every console test server accepts.
func testTokens() []server.Token {
	return []server.Token{
		{Name: "admin", SHA256: server.HashToken(adminToken), Role: server.RoleAdmin, Namespaces: []string{"*"}},
		{Name: "operator", SHA256: server.HashToken(operatorToken), Role: server.RoleOperator, Namespaces: []string{"*"}},
		{Name: "viewer", SHA256: server.HashToken(viewerToken), Role: server.RoleViewer, Namespaces: []string{"*"}},
		{Name: "other", SHA256: server.HashToken(otherToken), Role: server.RoleAdmin, Namespaces: []string{"other"}},
		{Name: "odd", SHA256: server.HashToken(oddToken), Role: server.RoleOperator, Namespaces: []string{"*"}},
	}
}

// startJobd runs a jobd process on the Redis at redisAddr serving
// namespaces (the first is the default), accepting testTokens, running
// nothing itself (--workers 0), until the test ends; it returns jobd's
// base URL once jobd is ready.
func startJobd(t *testing.T, redisAddr string, namespaces ...string) string {
	t.Helper()
	bin := jobdBinary(t)
	dir := t.TempDir()
	var y strings.Builder
	for _, tk := range testTokens() {
		if ns := tk.Namespaces[0]; ns != "*" && !slices.Contains(namespaces, ns) {
			continue // jobd refuses a token of a namespace it does not serve
		}
		fmt.Fprintf(&y, "- name: %s\n  sha256: %s\n  role: %s\n  namespaces: [%q]\n", tk.Name, tk.SHA256, tk.Role, tk.Namespaces[0])
	}
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	args := []string{"--store", "redis", "--redis-addr", redisAddr, "--listen", listen, "--tokens-file", tokens,
		"--workers", "0", "--node-id", "jobd-console-test"}
	for _, ns := range namespaces {
		args = append(args, "--namespace", ns)
	}
	cmd := exec.Command(bin, args...)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("jobd's output:\n%s", logs.String())
		}
	})
	base := "http://" + listen
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := http.Get(base + "/readyz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobd not ready within 60 s (last: %v)", err)
		}
		select {
		case <-exited:
			t.Fatalf("jobd exited before it was ready: %v", cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// syncBuffer is a bytes buffer safe for a process's output and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf)
}
