package benchkit

// Workloads across OS processes: the jobs are stored by this process and
// run by worker processes (this program re-executed, CrossWorkerMain) on
// the same queue, as they are in production with a shared server store.
//
// The parent and a worker process talk over pipes, one line at a time:
//
//	worker → parent (stdout)
//	  ready                       set up; in latency mode its workers run
//	  start STAMP NOW             latency mode: a job carrying STAMP started at NOW (Unix ns)
//	  done STARTS DONE LAST       throughput mode: jobs started, completions recorded,
//	                              time of the last completion (Unix ns; 0: none)
//	  final STARTS DONE LAST      the same, after the workers stopped
//	parent → worker (stdin)
//	  go                          throughput mode: start the workers
//	  report                      throughput mode: print a done line now
//	  stop                        stop the workers and exit (so does EOF or SIGTERM)
//
// A throughput worker prints a done line when its count changed and then
// stayed the same for a tick (10 ms: it went idle), at most every 250 ms
// while it keeps changing, and when asked: a few lines a second, whatever
// the job rate. Times are read from the one machine clock (Unix ns), so a
// worker's times and the parent's compare.

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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jobkit/job/store"
)

// The modes of CrossWorkerMain.
const (
	// CrossThroughput: count the jobs started and completed, start the
	// workers only on "go".
	CrossThroughput = "throughput"
	// CrossLatency: print each job's start with its stamp.
	CrossLatency = "latency"
)

// CrossSpawn returns the command that runs this program as a worker
// process (CrossWorkerMain) in mode on the queue whose ID is id with the
// given number of workers.
type CrossSpawn func(mode, id string, workers int) *exec.Cmd

// crossReady bounds the wait for a worker process to say "ready".
const crossReady = 60 * time.Second

// CrossBurndown stores n ready no-op jobs (not timed, as Burndown), starts
// procs worker processes with workers workers each, waits until every one
// is ready, and times them from the "go" it sends them until the last
// completion any of them recorded (their own clock readings). Every job
// must have started and completed exactly once across the processes (the
// sums of their final counts are n): otherwise the run fails. Figures:
// "jobs/s" and "fill jobs/s" (the untimed store step).
func CrossBurndown(ctx context.Context, sys System, spawn CrossSpawn, n, procs, workers int, limit time.Duration) (Sample, error) {
	q, fill, err := openFilled(ctx, sys, n, limit)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)

	type counts struct {
		starts, done, last int64
		final              bool
	}
	var mu sync.Mutex
	got := make([]counts, procs)
	changed := make(chan struct{}, 1)
	sum := func() (c counts, finals int) {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range got {
			c.starts += g.starts
			c.done += g.done
			c.last = max(c.last, g.last)
			if g.final {
				finals++
			}
		}
		return c, finals
	}
	var children []*child
	defer func() { stopChildren(children, 10*time.Second) }()
	for i := range procs {
		c, err := startChild(spawn(CrossThroughput, q.ID(), workers), func(l string) {
			f := strings.Fields(l)
			if len(f) != 4 || (f[0] != "done" && f[0] != "final") {
				return
			}
			var v [3]int64
			for j := range v {
				x, err := strconv.ParseInt(f[j+1], 10, 64)
				if err != nil {
					return
				}
				v[j] = x
			}
			mu.Lock()
			if !got[i].final { // a done line never overwrites the final one
				got[i] = counts{starts: v[0], done: v[1], last: v[2], final: f[0] == "final"}
			}
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	for _, c := range children {
		if err := c.waitReady(crossReady); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	for _, c := range children {
		if err := c.send("go"); err != nil {
			return nil, fmt.Errorf("worker process %d: %w", c.cmd.Process.Pid, err)
		}
	}
	deadline := start.Add(limit)
	for {
		c, _ := sum()
		if c.done >= int64(n) {
			break
		}
		for _, ch := range children {
			if err := ch.exitedErr(); err != nil {
				return nil, err
			}
		}
		d := time.Until(deadline)
		if d <= 0 {
			for _, ch := range children {
				_ = ch.send("report")
			}
			time.Sleep(100 * time.Millisecond)
			c, _ = sum()
			return Sample{"jobs/s": float64(c.done) / limit.Seconds(), "fill jobs/s": fill},
				fmt.Errorf("%d-process burn-down of %d: %d done in %v: %w", procs, n, c.done, limit, ErrCutShort)
		}
		select {
		case <-changed:
		case <-time.After(min(d, 100*time.Millisecond)):
		}
	}
	// Stop the workers: each prints its final counts once its in-flight
	// jobs (none, when every job ran once) have ended.
	stopChildren(children, 10*time.Second)
	for _, ch := range children {
		if ch.err != nil {
			return nil, fmt.Errorf("worker process %d: %v: %s", ch.cmd.Process.Pid, ch.err, ch.stderr)
		}
	}
	c, finals := sum()
	if finals != procs {
		return nil, fmt.Errorf("%d-process burn-down: %d of %d worker processes reported final counts", procs, finals, procs)
	}
	if c.starts != int64(n) || c.done != int64(n) {
		return nil, fmt.Errorf("%d-process burn-down: %d jobs stored, %d started and %d completed across the processes (want each once)",
			procs, n, c.starts, c.done)
	}
	el := time.Duration(c.last - start.UnixNano())
	if el <= 0 {
		return nil, fmt.Errorf("%d-process burn-down: last completion %v before the start (clock stepped?)", procs, -el)
	}
	return Sample{"jobs/s": float64(n) / el.Seconds(), "fill jobs/s": fill}, nil
}

// CrossIdle is Idle with the workers in another process: one worker
// process (spawned by spawn, 8 workers) runs; this process inserts n jobs
// one at a time, each carrying its insert time, waits for each to start
// and then 1–5 ms. The latency is the worker process's start time minus
// the stamp. Figures: "p50 ms" and "p99 ms".
func CrossIdle(ctx context.Context, sys System, spawn CrossSpawn, n int, limit time.Duration) (Sample, error) {
	q, err := sys.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer stopQueue(q)
	lat := newLatencies(n)
	c, err := startChild(spawn(CrossLatency, q.ID(), 8), func(l string) {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "start" {
			return
		}
		stamp, err1 := strconv.ParseInt(f[1], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			lat.add(at - stamp)
		}
	})
	if err != nil {
		return nil, err
	}
	defer func() { stopChildren([]*child{c}, 10*time.Second) }()
	if err := c.waitReady(crossReady); err != nil {
		return nil, err
	}
	end := time.Now().Add(limit)
	cut, err := trickle(ctx, q, n, func(i int) (bool, error) { return lat.waitCountOr(i, end, c) })
	if err != nil {
		return nil, err
	}
	stopChildren([]*child{c}, 10*time.Second)
	if c.err != nil {
		return nil, fmt.Errorf("worker process %d: %v: %s", c.cmd.Process.Pid, c.err, c.stderr)
	}
	return lat.sample("cross-process idle latency", n, limit, cut)
}

// add records one latency in nanoseconds.
func (l *latencies) add(d int64) {
	l.mu.Lock()
	l.ns = append(l.ns, d)
	l.mu.Unlock()
	select {
	case l.got <- struct{}{}:
	default:
	}
}

// waitCountOr is waitCount that gives up with an error when c exits.
func (l *latencies) waitCountOr(n int, deadline time.Time, c *child) (bool, error) {
	for l.count() < n {
		d := time.Until(deadline)
		if d <= 0 {
			return false, nil
		}
		select {
		case <-l.got:
		case <-c.exited:
			if l.count() >= n {
				return true, nil
			}
			return false, c.exitedErr()
		case <-time.After(min(d, 50*time.Millisecond)):
		}
	}
	return true, nil
}

// CrossWorkerMain is the worker process of CrossBurndown and CrossIdle: it
// attaches to the queue id and runs workers workers in mode (CrossThroughput
// or CrossLatency), speaking the line protocol described at the top of this
// file, until it is told to stop, its stdin closes or it gets SIGTERM.
func CrossWorkerMain(ctx context.Context, sys System, mode, id string, workers int) error {
	if mode != CrossThroughput && mode != CrossLatency {
		return fmt.Errorf("unknown worker mode %q; want %s or %s", mode, CrossThroughput, CrossLatency)
	}
	q, err := sys.Attach(ctx, id)
	if err != nil {
		return err
	}
	say := stdoutLines()
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopNow := func() { stopOnce.Do(func() { close(stop) }) }
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; stopNow() }()
	goCh := make(chan struct{})
	var goOnce sync.Once
	report := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "go":
				goOnce.Do(func() { close(goCh) })
			case "report":
				select {
				case report <- struct{}{}:
				default:
				}
			case "stop":
				stopNow()
			}
		}
		stopNow() // EOF: the parent is gone
	}()
	stopWorkers := func() error {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return q.Stop(sctx)
	}

	if mode == CrossLatency {
		if err := q.Run(ctx, workers, Hooks{Started: func(stamp int64) {
			at := time.Now().UnixNano()
			say("start " + strconv.FormatInt(stamp, 10) + " " + strconv.FormatInt(at, 10))
		}}); err != nil {
			return err
		}
		say("ready")
		<-stop
		return stopWorkers()
	}

	// CrossThroughput. One round trip now, so the store's first
	// connection is not made in the timed part (the in-process burn-down's
	// client is warm from the fill).
	if sq, ok := q.(interface{ Store() store.Store }); ok {
		_, _ = sq.Store().LookupInstances(ctx, &store.Query{InstanceID: "00000000-0000-0000-0000-000000000000"})
	}
	say("ready")
	select {
	case <-goCh:
	case <-stop:
		return nil
	}
	var starts, done, last atomic.Int64
	if err := q.Run(ctx, workers, Hooks{
		Started: func(int64) { starts.Add(1) },
		Completed: func(int64) {
			now := time.Now().UnixNano()
			for {
				l := last.Load()
				if now <= l || last.CompareAndSwap(l, now) {
					break
				}
			}
			done.Add(1)
		},
	}); err != nil {
		return err
	}
	line := func(what string) string {
		d := done.Load() // before last: last covers every completion counted
		return what + " " + strconv.FormatInt(starts.Load(), 10) + " " + strconv.FormatInt(d, 10) + " " + strconv.FormatInt(last.Load(), 10)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	printed, seen := int64(0), int64(0)
	var printedAt time.Time
	for {
		select {
		case <-tick.C:
			d := done.Load()
			if d != printed && (d == seen || time.Since(printedAt) >= 250*time.Millisecond) {
				say(line("done"))
				printed, printedAt = d, time.Now()
			}
			seen = d
		case <-report:
			say(line("done"))
		case <-stop:
			err := stopWorkers()
			say(line("final"))
			return err
		}
	}
}

// child is a worker process speaking the line protocol.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	inMu   sync.Mutex
	stderr *tailBuffer
	ready  chan struct{}
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// startChild starts cmd as a child that dies with this process
// (Pdeathsig; its stdin closing stops it too) and calls onLine from one
// goroutine for every stdout line but "ready".
func startChild(cmd *exec.Cmd, onLine func(string)) (*child, error) {
	c := &child{cmd: cmd, stderr: &tailBuffer{max: 4096}, ready: make(chan struct{}), exited: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = c.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker process: %w", err)
	}
	c.stdin = in
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l := sc.Text(); l == "ready" {
				once.Do(func() { close(c.ready) })
			} else {
				onLine(l)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		c.err = cmd.Wait() // after every read, as os/exec asks
		close(c.exited)
	}()
	return c, nil
}

func (c *child) send(line string) error {
	c.inMu.Lock()
	defer c.inMu.Unlock()
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

func (c *child) waitReady(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.ready:
		return nil
	case <-c.exited:
		return fmt.Errorf("worker process %d exited before it was ready (%v): %s", c.cmd.Process.Pid, c.err, c.stderr)
	case <-t.C:
		return fmt.Errorf("worker process %d: not ready within %v: %s", c.cmd.Process.Pid, d, c.stderr)
	}
}

// exitedErr returns an error when the child has exited, else nil.
func (c *child) exitedErr() error {
	select {
	case <-c.exited:
		return fmt.Errorf("worker process %d exited (%v): %s", c.cmd.Process.Pid, c.err, c.stderr)
	default:
		return nil
	}
}

// stopChildren sends SIGTERM to every running child by PID, waits up to d
// for them to exit, and kills those still running.
func stopChildren(cs []*child, d time.Duration) {
	for _, c := range cs {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for _, c := range cs {
		select {
		case <-c.exited:
		case <-t.C:
			for _, k := range cs {
				select {
				case <-k.exited:
				default:
					_ = k.cmd.Process.Kill()
				}
			}
			for _, k := range cs {
				<-k.exited
			}
			return
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
