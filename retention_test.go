package job_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/fakeclock"
	"github.com/jobkit/job/store"
)

// retentionFixture fills s, at t0, with three finished instances (each
// with two log records) and one instance pending far in the future (with
// its Created and Scheduled history records and one log record).
func retentionFixture(t *testing.T, s store.Store, t0 time.Time) (pending string) {
	t.Helper()
	ctx := context.Background()
	var recs []*store.Instance
	for i := range 3 {
		recs = append(recs, &store.Instance{ID: fmt.Sprintf("done-%d", i), Kind: "k", Queue: job.DefaultQueue, CreatedAt: t0, RunAt: t0})
	}
	recs = append(recs, &store.Instance{ID: "pending", Kind: "k", Queue: job.DefaultQueue, CreatedAt: t0, RunAt: t0.Add(365 * 24 * time.Hour)})
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: "n", Now: t0}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: job.DefaultQueue, Owner: "n", Limit: 3, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	if err != nil || len(res.Instances) != 3 {
		t.Fatalf("claim: %v, %d instances", err, len(res.Instances))
	}
	var outs []store.Outcome
	var logs []*store.LogRecord
	for _, in := range res.Instances {
		outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
		for range 2 {
			logs = append(logs, &store.LogRecord{InstanceID: in.ID, Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: t0, Node: "n", Message: "m"})
		}
	}
	logs = append(logs, &store.LogRecord{InstanceID: "pending", Kind: "k", Level: store.LevelInfo, Time: t0, Node: "n", Message: "m"})
	if errs, err := s.Finish(ctx, &store.FinishParams{Owner: "n", Now: t0, Outcomes: outs}); err != nil || errs[0].Err != nil {
		t.Fatalf("finish: %v %v", err, errs)
	}
	if err := s.AppendLogs(ctx, logs); err != nil {
		t.Fatal(err)
	}
	return "pending"
}

// TestRetentionOptionsIndependent checks that each retention option sets
// its own rule and leaves the others at their defaults, that 0 disables a
// rule, and what each default removes.
func TestRetentionOptionsIndependent(t *testing.T) {
	t.Parallel()
	const (
		hour = time.Hour
		day  = 24 * time.Hour
	)
	type want struct{ finished, pendingHistory, pendingLogs int }
	kept := want{3, 2, 1}
	cases := []struct {
		name    string
		opts    []job.ManagerOption
		elapsed time.Duration
		want    want
	}{
		{"defaults, 1h: nothing old enough", nil, hour, kept},
		{"defaults, 2d: finished go (24h), history and logs stay (7d)", nil, 2 * day, want{0, 2, 1}},
		{"defaults, 8d: all go", nil, 8 * day, want{0, 0, 0}},
		{"log 1h alone, 2h: logs go, finished and history stay", []job.ManagerOption{job.WithLogRetention(hour)}, 2 * hour, want{3, 2, 0}},
		{"log 1h alone, 2d: finished keep their default", []job.ManagerOption{job.WithLogRetention(hour)}, 2 * day, want{0, 2, 0}},
		{"log 1h alone, 8d: history keeps its default", []job.ManagerOption{job.WithLogRetention(hour)}, 8 * day, want{0, 0, 0}},
		{"history 1h alone, 2h", []job.ManagerOption{job.WithHistoryRetention(hour)}, 2 * hour, want{3, 0, 1}},
		{"history 1h alone, 2d", []job.ManagerOption{job.WithHistoryRetention(hour)}, 2 * day, want{0, 0, 1}},
		{"retention 0,0 keeps finished forever, others default", []job.ManagerOption{job.WithRetention(0, 0)}, 8 * day, want{3, 0, 0}},
		{"retention 1h,0 at 2h", []job.ManagerOption{job.WithRetention(hour, 0)}, 2 * hour, want{0, 2, 1}},
		{"retention 0,2 keeps the newest two", []job.ManagerOption{job.WithRetention(0, 2)}, 30 * day, want{2, 0, 0}},
		{"history 0 keeps history as long as its instance", []job.ManagerOption{job.WithHistoryRetention(0)}, 30 * day, want{0, 2, 0}},
		{"log 0 keeps logs as long as their instance", []job.ManagerOption{job.WithLogRetention(0)}, 30 * day, want{0, 0, 1}},
		{"everything off keeps everything", []job.ManagerOption{job.WithRetention(0, 0), job.WithHistoryRetention(0), job.WithLogRetention(0)}, 30 * day, kept},
		{"order does not matter", []job.ManagerOption{job.WithLogRetention(0), job.WithRetention(0, 0), job.WithHistoryRetention(0)}, 30 * day, kept},
		{"the last of one option wins", []job.ManagerOption{job.WithLogRetention(0), job.WithLogRetention(hour)}, 2 * hour, want{3, 2, 0}},
		{"prune interval alone changes no rule", []job.ManagerOption{job.WithPruneInterval(time.Second)}, 2 * day, want{0, 2, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := fakeclock.New(t0)
			s := newMemdb(t)
			pending := retentionFixture(t, s, t0)
			m, err := job.NewManager(append([]job.ManagerOption{job.WithStore(s), job.WithClock(clk)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(tc.elapsed)
			if _, err := m.Admin().Prune(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			fin, err := s.LookupInstances(ctx, &store.Query{States: []store.State{store.Completed}})
			if err != nil {
				t.Fatal(err)
			}
			hist, err := s.LookupHistory(ctx, &store.Query{InstanceID: pending})
			if err != nil {
				t.Fatal(err)
			}
			logs, err := s.LookupLogs(ctx, &store.Query{InstanceID: pending})
			if err != nil {
				t.Fatal(err)
			}
			got := want{len(fin), len(hist), len(logs)}
			if got != tc.want {
				t.Errorf("after %v: %d finished, %d history and %d log records of the pending instance; want %d, %d, %d",
					tc.elapsed, got.finished, got.pendingHistory, got.pendingLogs, tc.want.finished, tc.want.pendingHistory, tc.want.pendingLogs)
			}
		})
	}
}

// finishOld enqueues, claims and completes n instances at t.
func finishOld(t *testing.T, s store.Store, t0 time.Time, n int) {
	t.Helper()
	ctx := context.Background()
	var recs []*store.Instance
	for i := range n {
		recs = append(recs, &store.Instance{ID: fmt.Sprintf("old-%05d", i), Kind: "k", Queue: job.DefaultQueue, CreatedAt: t0, RunAt: t0})
	}
	if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: "n", Now: t0}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Claim(ctx, &store.ClaimParams{Queue: job.DefaultQueue, Owner: "n", Limit: n, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	if err != nil || len(res.Instances) != n {
		t.Fatalf("claim: %v, %d of %d instances", err, len(res.Instances), n)
	}
	var outs []store.Outcome
	var logs []*store.LogRecord
	for _, in := range res.Instances {
		outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
		logs = append(logs, &store.LogRecord{InstanceID: in.ID, Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: t0, Node: "n", Message: "m"})
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "n", Now: t0, Outcomes: outs}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendLogs(ctx, logs); err != nil {
		t.Fatal(err)
	}
}

func countFinished(t *testing.T, s store.Store) int {
	t.Helper()
	fin, err := s.LookupInstances(context.Background(), &store.Query{States: []store.State{store.Completed}})
	if err != nil {
		t.Fatal(err)
	}
	return len(fin)
}

// TestPruneCatchesUp checks that one retention pass removes everything
// the rules no longer want, in as many batches as it takes, not one
// batch: retention that removed one batch per interval fell behind any
// throughput above batch/interval.
func TestPruneCatchesUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := fakeclock.New(t0)
	s := newMemdb(t)
	finishOld(t, s, t0, 35)
	m, err := job.NewManager(job.WithStore(s), job.WithClock(clk), job.WithRetention(time.Hour, 0), job.WithHistoryRetention(time.Hour), job.WithLogRetention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	job.SetPruneBatch(m, 10)
	clk.Advance(2 * time.Hour)
	res, err := m.Admin().Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Instances != 35 {
		t.Errorf("one pass removed %d instances, want all 35 (4 batches of 10)", res.Instances)
	}
	if n := countFinished(t, s); n != 0 {
		t.Errorf("%d finished instances left after one pass, want 0", n)
	}
}

// TestPruneLoopRunsOnClock checks that the manager prunes every prune
// interval, not before, and that one run catches up. It runs in a
// synctest bubble: time moves only when every goroutine waits.
func TestPruneLoopRunsOnClock(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemdb(t)
		finishOld(t, s, time.Now(), 35)
		m, err := job.NewManager(job.WithStore(s), job.WithRetention(time.Hour, 0), job.WithPruneInterval(3*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		job.SetPruneBatch(m, 10)
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := m.Stop(context.Background()); err != nil {
				t.Error(err)
			}
		}()
		// Past the age, short of the interval: nothing may go yet.
		time.Sleep(3*time.Hour - time.Minute)
		synctest.Wait()
		if n := countFinished(t, s); n != 35 {
			t.Fatalf("%d finished instances left before the first prune interval, want 35", n)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := countFinished(t, s); n != 0 {
			t.Fatalf("%d finished instances left after the first prune run, want 0", n)
		}
	})
}
