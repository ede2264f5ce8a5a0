package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/internal/testserver"
)

// TestJobdStoreUnreachableAtStart (issue 33): jobd whose store cannot be
// reached within --store-timeout exits 1 at start, naming the address and
// the flag, instead of serving without its store.
func TestJobdStoreUnreachableAtStart(t *testing.T) {
	t.Parallel()
	port, err := testserver.FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for _, tc := range []struct {
		store string
		args  []string
	}{
		{"redis", []string{"--redis-addr", addr}},
		{"valkey", []string{"--valkey-addr", addr}},
		{"etcd", []string{"--etcd-endpoints", addr}},
		{"postgres", []string{"--pg-url", "postgres://jobkit@" + addr + "/jobkit"}},
	} {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"--store", tc.store, "--store-timeout", "1s", "--listen", "127.0.0.1:0"}, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, jobdBin(), args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			took := time.Since(start)
			var ee *exec.ExitError
			if ctx.Err() != nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("jobd %v: %v after %v (want exit status 1 within seconds); stderr:\n%s", args, err, took, stderr.String())
			}
			out := stderr.String()
			if !strings.Contains(out, addr) || !strings.Contains(out, "--store-timeout") || strings.Contains(out, "jobd listening") {
				t.Fatalf("jobd %v: stderr does not name %s and --store-timeout, or says it listens:\n%s", args, addr, out)
			}
			if took > 10*time.Second {
				t.Fatalf("jobd %v took %v to give up with --store-timeout 1s", args, took)
			}
		})
	}
}

// TestJobdStoreOutageLogs (issue 33): while jobd's Redis is down, jobd
// logs the outage once when it begins and once when it ends, through its
// structured log only (every line JSON), not a line per failed dial.
func TestJobdStoreOutageLogs(t *testing.T) {
	t.Parallel()
	rs := testserver.StartRedis(t)
	defer func() { rs.Stop() }() // the restarted one
	p := startJobd(t, jobdBin(), nil, "--store", "redis", "--redis-addr", rs.Addr, "--namespace", uniqueNS(t))
	before := len(logLines(p.logText()))

	rs.Kill()
	down := time.Now()
	waitFor(t, 20*time.Second, "jobd to log the store unreachable", func() (bool, string) {
		return strings.Contains(p.logText(), `"msg":"store unreachable"`), ""
	})
	// The outage lasts 3 s: time for a jobd that logs every failed dial or
	// call to write dozens of lines.
	waitFor(t, 10*time.Second, "3 s of outage", func() (bool, string) { return time.Since(down) > 3*time.Second, "" })
	code, body, _ := get(p.health + "/readyz")
	if code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during the outage: %d %q, want 503", code, body)
	}
	rs = testserver.RestartRedis(t, rs)
	waitFor(t, 20*time.Second, "jobd to log the store reachable again", func() (bool, string) {
		return strings.Contains(p.logText(), `"msg":"store reachable again"`), ""
	})
	p.waitReady()

	lines := logLines(p.logText())[before:]
	var downs, ups, warnsWhileDown int
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("a log line outside the structured log: %q", l)
			continue
		}
		switch rec["msg"] {
		case "store unreachable":
			downs++
		case "store reachable again":
			ups++
		default:
			if downs > ups && rec["level"] == "WARN" {
				warnsWhileDown++
			}
		}
	}
	if warnsWhileDown > 0 {
		t.Errorf("%d warnings between \"store unreachable\" and \"store reachable again\"; want that one line to stand for the outage", warnsWhileDown)
	}
	t.Logf("%d log lines over a %v outage:\n%s", len(lines), 3*time.Second, strings.Join(lines, "\n"))
	if downs != 1 || ups != 1 {
		t.Errorf("%d \"store unreachable\" and %d \"store reachable again\" lines, want 1 and 1", downs, ups)
	}
	if len(lines) > 8 {
		t.Errorf("%d log lines over a 3 s outage; want the outage logged once per change of state", len(lines))
	}
}

// logLines splits a log into its lines.
func logLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
