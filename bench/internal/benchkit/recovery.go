package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spawn returns the command that runs a worker process (WorkerMain) on the
// queue whose ID is id with the given number of workers.
type Spawn func(id string, workers int) *exec.Cmd

// Recovery measures crash recovery: a worker process (spawned by spawn)
// starts k jobs that never end; it is killed with SIGKILL; a worker in this
// process starts at once; the figure "recovery s" is the time from the kill
// until the last of the k jobs has started again here. limit bounds the
// wait after the kill.
func Recovery(ctx context.Context, sys System, spawn Spawn, k int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	cmd := spawn(q.ID(), k)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker process: %w", err)
	}
	exited := make(chan struct{})
	ready := make(chan struct{})
	startedCh := make(chan struct{}, k)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			switch l := sc.Text(); {
			case l == "ready":
				close(ready)
			case strings.HasPrefix(l, "start "):
				startedCh <- struct{}{}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = cmd.Wait(); close(exited) }()
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	defer func() {
		select {
		case <-exited:
		default:
			kill()
		}
	}()
	wait := func(what string, ch <-chan struct{}, d time.Duration) error {
		select {
		case <-ch:
			return nil
		case <-exited:
			return fmt.Errorf("worker process exited while waiting for %s: %s", what, stderr.String())
		case <-time.After(d):
			return fmt.Errorf("worker process: no %s within %v: %s", what, d, stderr.String())
		}
	}
	if err := wait("ready", ready, 60*time.Second); err != nil {
		return nil, err
	}
	for i := range k {
		if err := q.Insert(ctx, int64(i), time.Time{}); err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	}
	for range k {
		if err := wait("job start", startedCh, 60*time.Second); err != nil {
			return nil, err
		}
	}
	killed := time.Now()
	kill()
	var mu sync.Mutex
	again := map[int64]time.Time{}
	all := make(chan struct{})
	if err := q.Run(ctx, k, Hooks{Started: func(stamp int64) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := again[stamp]; !ok {
			again[stamp] = time.Now()
			if len(again) == k {
				close(all)
			}
		}
	}}); err != nil {
		return nil, err
	}
	select {
	case <-all:
	case <-time.After(limit):
		mu.Lock()
		n := len(again)
		mu.Unlock()
		return Sample{"recovery s": limit.Seconds()}, fmt.Errorf("recovery: %d of %d jobs ran again within %v of the kill (> %v): %w", n, k, limit, limit, ErrCutShort)
	}
	var last time.Time
	mu.Lock()
	for _, t := range again {
		if t.After(last) {
			last = t
		}
	}
	mu.Unlock()
	return Sample{"recovery s": last.Sub(killed).Seconds()}, nil
}

// stdoutLines returns a function that writes one line to stdout at once,
// safe for concurrent use: how a worker process talks to its parent.
func stdoutLines() func(string) {
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	return func(s string) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteString(s + "\n")
		w.Flush()
	}
}

// WorkerMain is the worker process of Recovery: it attaches to the queue
// id, runs workers whose jobs print "start STAMP" and then block, prints
// "ready", and waits for a signal.
func WorkerMain(ctx context.Context, sys System, id string, workers int) error {
	q, err := sys.Attach(ctx, id)
	if err != nil {
		return err
	}
	say := stdoutLines()
	if err := q.Run(ctx, workers, Hooks{
		Started: func(stamp int64) { say("start " + strconv.FormatInt(stamp, 10)) },
		Hold:    func(ctx context.Context) { <-ctx.Done() },
	}); err != nil {
		return err
	}
	say("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return q.Stop(sctx)
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
