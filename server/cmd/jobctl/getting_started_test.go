package main

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startBlock is one ```sh block of doc/getting-started.md.
type startBlock struct {
	line       int
	cmd        string
	background bool   // <!-- background ... -->: a process that keeps running
	wait       string // wait="TEXT": go on once its output holds TEXT
	expect     string // expect="TEXT": its output holds TEXT by the page's end
}

var markerAttrRE = regexp.MustCompile(`(wait|expect)="([^"]*)"`)

func readStartBlocks(t *testing.T) []startBlock {
	t.Helper()
	b, err := os.ReadFile("../../../doc/getting-started.md")
	if err != nil {
		t.Fatal(err)
	}
	var (
		out     []startBlock
		cur     startBlock
		pending *startBlock
		inBlock bool
	)
	for n, line := range strings.Split(string(b), "\n") {
		switch {
		case inBlock && line == "```":
			inBlock = false
			cur.cmd = strings.TrimSpace(cur.cmd)
			out = append(out, cur)
		case inBlock:
			cur.cmd += line + "\n"
		case line == "```sh":
			inBlock = true
			cur = startBlock{line: n + 1}
			if pending != nil {
				cur = *pending
				cur.line = n + 1
				pending = nil
			}
		case strings.HasPrefix(line, "<!-- background"):
			pending = &startBlock{background: true}
			for _, m := range markerAttrRE.FindAllStringSubmatch(line, -1) {
				if m[1] == "wait" {
					pending.wait = m[2]
				} else {
					pending.expect = m[2]
				}
			}
		}
	}
	return out
}

// lockedBuffer is a background process's output, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestGettingStarted runs doc/getting-started.md from the repository's
// root as a reader would, block by block, in one session: each block runs
// with sh -e in the directory and with the exported variables the blocks
// before it left. A block marked background (jobd, the Go worker, a
// watch) is started and kept running until the end, as in a second
// terminal; the test waits for its wait= text before going on and checks
// its expect= text at the end. HOME is a temporary directory (the page
// writes its files there) and 127.0.0.1:8080 a free port.
func TestGettingStarted(t *testing.T) {
	blocks := readStartBlocks(t)
	if len(blocks) < 10 {
		t.Fatalf("doc/getting-started.md has %d sh blocks; the parser lost some", len(blocks))
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	home := t.TempDir()
	env := os.Environ()
	// The Go caches stay where they are, so the builds stay warm.
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		v, err := exec.Command("go", "env", k).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, k+"="+strings.TrimSpace(string(v)))
	}
	env = append(env, "HOME="+home, "GOWORK=off", "JOBCTL_ADDR=", "JOBCTL_TOKEN=")
	state, dir := filepath.Join(home, ".gs-env"), filepath.Join(home, ".gs-pwd")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte(root+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	type bg struct {
		block startBlock
		cmd   *exec.Cmd
		out   *lockedBuffer
		done  chan struct{}
	}
	var bgs []*bg
	t.Cleanup(func() {
		for _, p := range bgs {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.done
			}
		}
	})
	for _, b := range blocks {
		text := strings.ReplaceAll(b.cmd, "127.0.0.1:8080", addr)
		b.wait = strings.ReplaceAll(b.wait, "127.0.0.1:8080", addr)
		b.expect = strings.ReplaceAll(b.expect, "127.0.0.1:8080", addr)
		// The session so far: its exported variables and directory.
		prelude := `. "` + state + `"; cd "$(cat "` + dir + `")"` + "\n"
		if b.background {
			out := &lockedBuffer{}
			cmd := exec.Command("/bin/sh", "-ec", prelude+text)
			cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			p := &bg{block: b, cmd: cmd, out: out, done: make(chan struct{})}
			go func() { _ = cmd.Wait(); close(p.done) }()
			bgs = append(bgs, p)
			if b.wait != "" {
				waitOutput(t, b, out, p.done, b.wait, 2*time.Minute)
			}
			continue
		}
		script := prelude + text + "\nexport -p > \"" + state + "\"; pwd > \"" + dir + "\"\n"
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, "/bin/sh", "-ec", script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("doc/getting-started.md:%d: %v\n%s\n%s", b.line, err, b.cmd, out)
		}
		t.Logf("doc/getting-started.md:%d:\n%s\n%s", b.line, b.cmd, out)
	}
	for _, p := range bgs {
		if p.block.expect != "" {
			waitOutput(t, p.block, p.out, p.done, p.block.expect, 90*time.Second)
		}
	}
}

// waitOutput waits until out holds text, failing if the process ends
// first or the deadline passes.
func waitOutput(t *testing.T, b startBlock, out *lockedBuffer, done <-chan struct{}, text string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if strings.Contains(out.String(), text) {
			return
		}
		select {
		case <-done:
			if strings.Contains(out.String(), text) {
				return
			}
			t.Fatalf("doc/getting-started.md:%d: %q ended without printing %q:\n%s", b.line, b.cmd, text, lastLines(out.String()))
		case <-deadline:
			t.Fatalf("doc/getting-started.md:%d: %q printed no %q within %v:\n%s", b.line, b.cmd, text, within, lastLines(out.String()))
		case <-tick.C:
		}
	}
}

func lastLines(s string) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
