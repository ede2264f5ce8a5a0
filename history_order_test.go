package job_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store/memdbstore"
)

// steppingClock is the wall clock moved one millisecond ahead on every
// reading: a store call made after another reading of the clock always
// sees a later time, as happens on a busy machine.
type steppingClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func (c *steppingClock) NewTimer(d time.Duration) job.Timer { return job.SystemClock{}.NewTimer(d) }

// TestCreatedRecordNotAfterRunAt: an instance's Created and Scheduled
// history records are stamped no later than its RunAt. A claimer may take
// the instance at any time from RunAt on, and its Processing record
// carries the claim's time; were Created stamped later than RunAt (by the
// store call that stores it), a claim between the two would sort
// Processing before Created in the history (seen in CI as
// "processing,created,scheduled,completed").
func TestCreatedRecordNotAfterRunAt(t *testing.T) {
	ctx := context.Background()
	clk := &steppingClock{t: time.Now()}
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(st), job.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("noop"), job.WithExecutor(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "noop")
	if err != nil {
		t.Fatal(err)
	}
	hist, err := m.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) == 0 {
		t.Fatal("no history for a scheduled instance")
	}
	for _, h := range hist {
		if h.Time.After(ji.RunAt) {
			t.Errorf("%v record at %v, after the instance's RunAt %v: a claim at RunAt would sort before it",
				h.State, h.Time, ji.RunAt)
		}
	}
}
