package job_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
)

// offsetClock is the system clock moved by d: a manager whose host clock
// runs d ahead (d > 0) or behind. Inside a synctest bubble the system
// clock is the bubble's, which the memdb store also reads.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                     { return time.Now().Add(c.d) }
func (c offsetClock) NewTimer(d time.Duration) job.Timer { return job.SystemClock{}.NewTimer(d) }

// TestClockSkewNoDoubleRun runs 30 jobs of 2 s on two managers sharing one
// store with a 3 s lease, one of them with its clock 5 s off. Before the
// node registry compared clocks, a slow manager claimed with leases that
// had already ended on the store's clock and the other manager rescued
// and ran them again (30 jobs ran twice); a fast manager rescued the
// others' live leases. Now the skewed manager neither claims nor rescues,
// and no job runs twice.
func TestClockSkewNoDoubleRun(t *testing.T) {
	for _, off := range []time.Duration{5 * time.Second, -5 * time.Second} {
		t.Run(fmt.Sprintf("offset %v", off), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := newMemdb(t)
				var ov overlap
				var mu sync.Mutex
				starts := map[string]int{}
				mk := func(node string, clk job.Clock) *job.Manager {
					m, err := job.NewManager(job.WithStore(s), job.WithNodeID(node), job.WithClock(clk), job.WithLease(3*time.Second),
						job.WithWorkers(15), job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
					if err != nil {
						t.Fatal(err)
					}
					j := mustJob(t, job.WithKind("work"), job.WithMaxRetries(job.RetryForever), job.WithExecutor(func(ctx context.Context, ji job.Instance) {
						ov.enter(ji.Info().ID)
						defer ov.leave(ji.Info().ID)
						mu.Lock()
						starts[ji.Info().ID]++
						mu.Unlock()
						select {
						case <-time.After(2 * time.Second):
						case <-ctx.Done():
						}
					}))
					if err := m.RegisterJob(j); err != nil {
						t.Fatal(err)
					}
					return m
				}
				good := mk("good", job.SystemClock{})
				skewed := mk("skewed", offsetClock{off})
				ctx := context.Background()
				for range 30 {
					if _, err := good.ScheduleJob(ctx, "work"); err != nil {
						t.Fatal(err)
					}
				}
				// Due on both clocks, and more than one manager's workers can
				// take, so both run some.
				time.Sleep(6 * time.Second)
				for _, m := range []*job.Manager{skewed, good} {
					if err := m.Start(ctx); err != nil {
						t.Fatal(err)
					}
				}
				wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				defer cancel()
				if err := good.Wait(wctx); err != nil {
					t.Fatal(err)
				}
				for _, m := range []*job.Manager{skewed, good} {
					if err := m.Stop(ctx); err != nil {
						t.Error(err)
					}
				}
				peak, runs := ov.stats()
				t.Logf("runs %d peak %d", runs, peak)
				twice := 0
				mu.Lock()
				for _, n := range starts {
					if n > 1 {
						twice++
					}
				}
				mu.Unlock()
				if peak > 1 || twice > 0 {
					t.Errorf("with a manager %v off: %d of 30 jobs ran more than once (%d runs, at most %d at once), want none", off, twice, runs, peak)
				}
				if len(starts) != 30 {
					t.Errorf("%d of 30 jobs ran", len(starts))
				}
			})
		})
	}
}

// TestClockSkewCronOnTime runs a recurring job every second for 20 s on
// two managers, one with its clock 5 s fast. Before the skew check the
// fast one scheduled and claimed each tick 5 s early (19 of 20 ran early);
// now it fires and claims nothing while skewed, and every tick runs at its
// time on the other manager.
func TestClockSkewCronOnTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newMemdb(t)
		var mu sync.Mutex
		var early, ran int
		mk := func(node string, clk job.Clock) *job.Manager {
			m, err := job.NewManager(job.WithStore(s), job.WithNodeID(node), job.WithClock(clk),
				job.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			j := mustJob(t, job.WithKind("tick"), job.WithInterval(time.Second), job.WithExecutor(func(ji job.Instance) {
				mu.Lock()
				defer mu.Unlock()
				ran++
				if time.Now().Before(ji.Info().RunAt.Add(-100 * time.Millisecond)) {
					early++
				}
			}))
			if err := m.RegisterJob(j); err != nil {
				t.Fatal(err)
			}
			return m
		}
		ms := []*job.Manager{mk("fast", offsetClock{5 * time.Second}), mk("good", job.SystemClock{})}
		ctx := context.Background()
		for _, m := range ms {
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Second) // bubble time: the span under test
		for _, m := range ms {
			if err := m.Stop(ctx); err != nil {
				t.Error(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if early > 0 {
			t.Errorf("%d of %d ticks ran more than 100 ms before their time, want none", early, ran)
		}
		if ran < 18 {
			t.Errorf("%d ticks ran in 20 s, want at least 18", ran)
		}
	})
}
