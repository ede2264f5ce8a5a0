package job_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
)

// TestLeaseFencedHandBacksEnd: the renewals of an instance always fail
// while its claims and outcomes go through (a store fault specific to it,
// or renewals that always take too long), and its executor runs longer
// than its lease and returns on the fence's cancel. Each fence hands the
// attempt back without counting it; before the cap on fenced hand-backs in
// a row that went on for ever. Now the fence after DefaultFencedHandBacks
// hand-backs in a row counts the attempt, so MaxRetries ends the job.
func TestLeaseFencedHandBacksEnd(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		opts     []job.ManagerOption
		wantRuns []int
	}{
		{"default cap", nil, []int{1, 1, 1, 1, 2, 2, 2, 2}},
		{"cap 1", []job.ManagerOption{job.WithFencedHandBacks(1)}, []int{1, 1, 2, 2}},
		{"every fence counts", []job.ManagerOption{job.WithFencedHandBacks(0)}, []int{1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fs := &faultStore{Store: newMemdb(t)}
				fs.fail(errors.New("renewal timed out"), nil, nil)
				var runs runLog
				j := mustJob(t, job.WithKind("k"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Second)),
					job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
						runs.add(ji.Info().Attempt)
						<-ctx.Done() // longer than its lease: the watchdog's fence
						return ctx.Err()
					}))
				opts := append([]job.ManagerOption{job.WithStore(fs), job.WithNodeID("a"), job.WithLease(30 * time.Second), job.WithLogger(quietLogger())}, c.opts...)
				m := newManager(t, opts...)
				if err := m.RegisterJob(j); err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if err := m.Start(ctx); err != nil {
					t.Fatal(err)
				}
				ji, err := m.ScheduleJob(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, time.Hour)
				defer cancel()
				if err := m.Wait(wctx); err != nil {
					t.Fatalf("Wait: %v; runs so far with attempts %v: the fenced hand-backs never end", err, runs.get())
				}
				got := stateOf(t, m, ji.ID)
				if got.State != job.Terminated || got.Attempt != 2 {
					t.Errorf("instance %v attempt %d, want Terminated attempt 2", got.State, got.Attempt)
				}
				if e := got.Error; e == "" || !strings.Contains(e, job.ErrLeaseLost.Error()) {
					t.Errorf("final error %q, want one that says the lease was lost", e)
				}
				if r := runs.get(); !slices.Equal(r, c.wantRuns) {
					t.Errorf("runs with attempts %v, want %v", r, c.wantRuns)
				}
				hist, err := m.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstanceID(ji.ID)))
				if err != nil {
					t.Fatal(err)
				}
				backs := 0
				for _, h := range hist {
					if strings.HasPrefix(h.Error, "handed back") {
						backs++
					}
				}
				if want := len(c.wantRuns) - 2; backs != want {
					t.Errorf("%d hand-backs in the history, want %d:%s", backs, want, fmtHistory(hist))
				}
			})
		})
	}
}
