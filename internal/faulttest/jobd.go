package faulttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

var (
	jobdOnce sync.Once
	jobdBin  string
	jobdErr  error
)

// buildJobd builds server/cmd/jobd in its own module (run from this
// package's directory, as go test does).
func buildJobd(t testing.TB) string {
	t.Helper()
	jobdOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jobkit-fault-jobd")
		if err != nil {
			jobdErr = err
			return
		}
		jobdBin = filepath.Join(dir, "jobd")
		cmd := exec.Command("go", "build", "-o", jobdBin, "./cmd/jobd")
		cmd.Dir = filepath.Join("..", "..", "server")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			jobdErr = fmt.Errorf("build jobd: %v\n%s", err, out)
		}
	})
	if jobdErr != nil {
		t.Fatal(jobdErr)
	}
	return jobdBin
}

// RemoteSpec is a Spec whose workers are remote executors (issue 21):
// faultworker managers on remote.Dial to one jobd process (built from
// server/cmd/jobd) that serves the run's namespace on the Redis at
// redisAddr. The test process schedules and checks through open, on the
// same Redis. Crashed work must run again within 2 s of the kill, which
// breaks the killed worker's stream.
func RemoteSpec(redisAddr string, open func(t testing.TB, ns string) store.Store) Spec {
	return Spec{Store: "remote", Open: open, MaxRerun: 2 * time.Second, Start: func(t *testing.T, ns string) []string {
		return []string{"-jobd", startJobd(t, "--store", "redis", "--redis-addr", redisAddr, "--namespace", ns)}
	}}
}

// startJobd starts a jobd process with args on a free loopback port,
// stops it when the test ends, and returns its URL.
func startJobd(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(buildJobd(t), args...)
	cmd.Env = append(os.Environ(), "JOBD_LISTEN=127.0.0.1:0", "JOBD_LOG_FORMAT=json")
	logs := &lockedWriter{}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start jobd: %v", err)
	}
	done := make(chan struct{})
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			_, _ = logs.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, Listen string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "jobd listening" {
				listening <- rec.Listen
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() || os.Getenv("JOBKIT_FAULT_STDERR") != "" {
			t.Logf("jobd log:\n%s", tail(logs.String(), 3000))
		}
	})
	select {
	case url := <-listening:
		return url
	case <-done:
		t.Fatalf("jobd exited before listening:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("jobd did not listen within 30 s:\n%s", logs.String())
	}
	return ""
}
