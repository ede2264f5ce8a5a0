package redisstore_test

// Faults of a real redis-server under two running managers: connections
// killed mid-run, and the server frozen with SIGSTOP for longer than the
// lease.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// executions counts the executions of each instance: how many ran in all,
// and how many ran at the same time.
type executions struct {
	mu      sync.Mutex
	running map[string]int
	runs    map[string]int
	peak    int    // most executions of one instance running at once
	peakID  string // an instance that reached peak
	started atomic.Int64
}

func newExecutions() *executions {
	return &executions{running: map[string]int{}, runs: map[string]int{}}
}

func (e *executions) enter(id string) int64 {
	e.mu.Lock()
	e.running[id]++
	e.runs[id]++
	if e.running[id] > e.peak {
		e.peak, e.peakID = e.running[id], id
	}
	e.mu.Unlock()
	return e.started.Add(1)
}

func (e *executions) leave(id string) {
	e.mu.Lock()
	e.running[id]--
	e.mu.Unlock()
}

// summary returns the peak and, for each instance ID in ids, how often it
// ran when that was not once.
func (e *executions) summary(ids []string) (peak int, peakID string, notOnce map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	notOnce = map[string]int{}
	for _, id := range ids {
		if n := e.runs[id]; n != 1 {
			notOnce[id] = n
		}
	}
	return e.peak, e.peakID, notOnce
}

// lineLog keeps a manager's log lines (warnings and up) for a failure
// report, so a passing test prints nothing.
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, strings.TrimSuffix(string(b), "\n"))
	l.mu.Unlock()
	return len(b), nil
}

// logger logs warnings and up, and the info line of each repeated claim.
func (l *lineLog) logger() *slog.Logger {
	return slog.New(lineHandler{slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})})
}

// lineHandler passes on warnings and up, and the info line a claim
// repeated after its reply was lost logs.
type lineHandler struct{ slog.Handler }

func (h lineHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && !strings.HasPrefix(r.Message, "repeated a claim") {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return lineHandler{h.Handler.WithAttrs(as)}
}

func (h lineHandler) WithGroup(name string) slog.Handler {
	return lineHandler{h.Handler.WithGroup(name)}
}

// count returns how many lines contain substr.
func (l *lineLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// reportOnFailure logs the last lines through t if t failed.
func (l *lineLog) reportOnFailure(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		lines := l.lines
		if len(lines) > 60 {
			t.Logf("manager log: %d lines, the last 60:", len(lines))
			lines = lines[len(lines)-60:]
		}
		for _, s := range lines {
			t.Log(s)
		}
	})
}

// faultCluster is two managers, each on a store with a go-redis client of
// its own, sharing one namespace on a redis-server, and a third store on
// its own client for the test's look-ups.
type faultCluster struct {
	admin    *redis.Client
	look     store.Store
	managers []*job.Manager
	log      *lineLog
}

// clientRetries is the managers' clients' MaxRetries (-1: none, so every
// lost reply reaches the store and the engine; 0: go-redis's default 3).
func newFaultCluster(t *testing.T, addr, ns string, clientRetries int, j func() *job.Job, opts ...job.ManagerOption) *faultCluster {
	t.Helper()
	fc := &faultCluster{log: &lineLog{}}
	fc.log.reportOnFailure(t)
	fc.admin = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { fc.admin.Close() })
	fc.look = newStore(t, fc.admin, ns)
	for _, node := range []string{"a", "b"} {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: clientRetries})
		t.Cleanup(func() { c.Close() })
		m, err := job.NewManager(append([]job.ManagerOption{
			job.WithStore(newStore(t, c, ns)),
			job.WithNodeID(node),
			job.WithLogger(fc.log.logger()),
		}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.RegisterJob(j()); err != nil {
			t.Fatal(err)
		}
		fc.managers = append(fc.managers, m)
	}
	return fc
}

// start starts both managers; they are stopped when t ends, and Stop must
// succeed.
func (fc *faultCluster) start(t *testing.T) {
	t.Helper()
	for _, m := range fc.managers {
		if err := m.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		})
	}
}

// waitAllFinished waits until n instances are in a final state, and
// returns them all.
func (fc *faultCluster) waitAllFinished(t *testing.T, within time.Duration, n int) []*store.Instance {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		all, err := fc.look.LookupInstances(context.Background(), &store.Query{})
		finished := 0
		byState := map[store.State]int{}
		for _, in := range all {
			byState[in.State]++
			if in.State.Final() {
				finished++
			}
		}
		if err == nil && finished >= n {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d of %d instances finished; by state: %v (last look-up error: %v)", within, finished, n, byState, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkCompleted fails t unless ids are exactly the instances of all and
// each ended Completed; it returns how many took more than one attempt.
func checkCompleted(t *testing.T, ids []string, all []*store.Instance) (retried int) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if len(all) != len(ids) {
		t.Errorf("%d instances finished, %d scheduled", len(all), len(ids))
	}
	for _, in := range all {
		if !want[in.ID] {
			t.Errorf("instance %s finished but was never scheduled", in.ID)
		}
		if in.State != store.Completed {
			t.Errorf("instance %s ended %v after %d attempts (last error %q), want Completed", in.ID, in.State, in.Attempt, in.Error)
		}
		if in.Attempt > 1 {
			retried++
		}
	}
	return retried
}

// Two managers run a few thousand short jobs on one redis-server while the
// test kills their connections, over and over (CLIENT KILL of every normal
// and pub/sub client but its own). Each kill loses the replies of whatever
// was in flight: claims, renewals, finishes, rescues. go-redis reconnects;
// claims are repeated with their claim number and Finish is idempotent
// ("Lost replies" in doc/design.md), so every job completes, after one
// attempt, each exactly once, and its complete handler runs once. No
// instance ever runs twice at once.
//
// It runs with go-redis's own retries (a command on a killed connection is
// sent again by the client, so the store's scripts see repeats) and
// without (every lost reply reaches the engine as an error).
func TestManagersSurviveKilledConnections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		retries int
	}{{"ClientRetries", 0}, {"NoClientRetries", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testKilledConnections(t, tc.retries)
		})
	}
}

func testKilledConnections(t *testing.T, clientRetries int) {
	const (
		jobs  = 3000
		kills = 8
	)
	p := testserver.StartRedis(t)
	ex := newExecutions()
	var (
		hmu       sync.Mutex
		completed = map[string]int{} // complete handler calls per instance
	)
	mkJob := func() *job.Job {
		j, err := job.NewJob(job.WithKind("short"),
			job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
				ex.enter(ji.Info().ID)
				defer ex.leave(ji.Info().ID)
				// A little work, so claims, renewals and outcomes
				// interleave on the connections being killed.
				select {
				case <-time.After(time.Millisecond):
					return nil
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}),
			job.WithCompleteProcessor(func(ji job.Instance, _ []any) {
				hmu.Lock()
				completed[ji.Info().ID]++
				hmu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	fc := newFaultCluster(t, p.Addr, "killconn", clientRetries, mkJob,
		job.WithWorkers(8),
		job.WithPollInterval(50*time.Millisecond),
		job.WithRescueInterval(200*time.Millisecond),
	)
	ctx := t.Context()
	ids := make([]string, jobs)
	for i := range ids {
		ji, err := fc.managers[i%2].ScheduleJob(ctx, "short")
		if err != nil {
			t.Fatalf("ScheduleJob %d: %v", i, err)
		}
		ids[i] = ji.ID
	}
	fc.start(t)

	// Kill every connection but the test's own each time another tenth or
	// so of the jobs has started, beginning once a tenth has.
	var killed int64
	for k := range kills {
		at := int64(jobs/10 + k*jobs/12)
		waitFor(t, 20*time.Second, fmt.Sprintf("%d jobs to start (kill %d)", at, k+1), func() bool { return ex.started.Load() >= at })
		for _, typ := range []string{"normal", "pubsub"} {
			n, err := fc.admin.ClientKillByFilter(ctx, "TYPE", typ, "SKIPME", "yes").Result()
			if err != nil {
				t.Fatalf("CLIENT KILL TYPE %s: %v", typ, err)
			}
			killed += n
		}
	}
	// Both managers' clients had connections open at each kill: at least
	// two are killed every time, or the fault did not hit.
	if killed < 2*kills {
		t.Fatalf("%d connections killed in %d rounds, want at least %d", killed, kills, 2*kills)
	}

	all := fc.waitAllFinished(t, 25*time.Second, jobs)
	retried := checkCompleted(t, ids, all)
	// Wait for the complete handlers (they run off the claim path) before
	// counting them.
	waitFor(t, 5*time.Second, "a complete handler call per job", func() bool {
		hmu.Lock()
		defer hmu.Unlock()
		calls := 0
		for _, n := range completed {
			calls += n
		}
		return calls >= jobs
	})
	peak, peakID, notOnce := ex.summary(ids)
	if peak > 1 {
		t.Errorf("instance %s ran %d times at once, want at most once", peakID, peak)
	}
	// Nothing here is ambiguous beyond a lost reply, which the design
	// reconciles: each job runs once and completes after one attempt.
	for id, n := range notOnce {
		t.Errorf("instance %s ran %d times, want once", id, n)
	}
	if retried > 0 {
		t.Errorf("%d instances took more than one attempt, want every job done in one", retried)
	}
	hmu.Lock()
	for _, id := range ids {
		if n := completed[id]; n != 1 {
			t.Errorf("complete handler ran %d times for %s, want once", n, id)
		}
	}
	hmu.Unlock()
	repeats := fc.log.count("repeated a claim")
	t.Logf("%d jobs, %d connections killed in %d rounds; %d ran more than once, %d took more than one attempt; %d warnings logged; %d claims repeated after a lost reply, %d of them had claimed something",
		jobs, killed, kills, len(notOnce), retried, fc.log.count("level=WARN"), repeats, repeats-fc.log.count("claimed=0"))
}

// Two managers with a 2 s lease run 4 s jobs; Redis is frozen (SIGSTOP)
// for 3 s, longer than the lease, just as an attempt starts. No manager can
// renew, so each running attempt is fenced (its ctx canceled with
// ErrLeaseLost, its outcome discarded) before its lease ends; after SIGCONT
// the instances are rescued and run again. The jobs run longer than the
// freeze, so an attempt left running would still run when its instance
// runs again elsewhere: no instance may ever run twice at once. Every job
// still ends Completed.
func TestManagersFencedWhileRedisFrozen(t *testing.T) {
	t.Parallel()
	const (
		jobs      = 16
		workers   = 4 // per manager: two rounds of jobs
		lease     = 2 * time.Second
		runFor    = 4 * time.Second // longer than freezeFor
		freezeFor = 3 * time.Second // longer than the lease
		freezeAt  = 3               // freeze as the third attempt starts
		// windDown is how long an executor takes to return once its ctx
		// is canceled: less than the stop allowance (a sixth of the
		// lease), as fencing assumes.
		windDown = 250 * time.Millisecond
	)
	p := testserver.StartRedis(t)
	ex := newExecutions()
	var (
		lost    atomic.Int64 // attempts canceled with ErrLeaseLost
		fenced  atomic.Int64 // of which while Redis was frozen
		thawed  atomic.Bool
		atStart = make(chan struct{})
	)
	mkJob := func() *job.Job {
		j, err := job.NewJob(job.WithKind("long"),
			job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
				if ex.enter(ji.Info().ID) == freezeAt {
					close(atStart)
				}
				defer ex.leave(ji.Info().ID)
				select {
				case <-time.After(runFor):
					return nil
				case <-ctx.Done():
					err := context.Cause(ctx)
					if errors.Is(err, job.ErrLeaseLost) {
						lost.Add(1)
						// While frozen, no store call answers: only
						// the fence can cancel an attempt.
						if !thawed.Load() {
							fenced.Add(1)
						}
					}
					// Winding down takes a while, within the stop
					// allowance the design grants an executor.
					time.Sleep(windDown)
					return err
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	fc := newFaultCluster(t, p.Addr, "frozen", 0, mkJob,
		job.WithWorkers(workers),
		job.WithLease(lease),
		job.WithPollInterval(50*time.Millisecond),
		job.WithRescueInterval(100*time.Millisecond),
	)
	ctx := t.Context()
	ids := make([]string, jobs)
	for i := range ids {
		ji, err := fc.managers[0].ScheduleJob(ctx, "long")
		if err != nil {
			t.Fatalf("ScheduleJob %d: %v", i, err)
		}
		ids[i] = ji.ID
	}
	fc.start(t)

	select {
	case <-atStart:
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d of %d attempts started within 10s", ex.started.Load(), freezeAt)
	}
	thaw := freeze(t, p)
	time.Sleep(freezeFor) // the fault itself: Redis stays frozen this long
	thawed.Store(true)
	thaw()

	all := fc.waitAllFinished(t, 25*time.Second, jobs)
	retried := checkCompleted(t, ids, all)
	peak, peakID, notOnce := ex.summary(ids)
	if peak > 1 {
		t.Errorf("instance %s ran %d times at once, want at most once", peakID, peak)
	}
	// The attempt that had just started when Redis froze cannot finish
	// before its fence, so at least one attempt was fenced while frozen.
	if fenced.Load() == 0 {
		t.Errorf("no attempt was fenced (canceled with ErrLeaseLost) during a %v freeze with a %v lease; %d were canceled so after it", freezeFor, lease, lost.Load())
	}
	twice := 0
	for _, n := range notOnce {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d jobs; %d attempts fenced while frozen, %d canceled with ErrLeaseLost in all; %d instances ran more than once, %d took more than one attempt; %d warnings logged, %d of them lease-lost",
		jobs, fenced.Load(), lost.Load(), twice, retried, fc.log.count("level=WARN"), fc.log.count("lease"))
}
