package job_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// TestFullStorePausesClaimsAndResumes: while the store refuses outcomes
// for want of space the manager starts at most one attempt a poll
// interval (a probe), and once the store has room again it claims as
// usual — even after it gave up every outcome write it had, so no write
// of its own is left to tell it that room came back.
func TestFullStorePausesClaimsAndResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		full := fmt.Errorf("OOM command not allowed: %w", store.ErrFull)
		fs := &faultStore{Store: newMemdb(t)}
		var (
			mu   sync.Mutex
			runs = map[string]int{}
		)
		ran := func() (total int, each map[string]int) {
			mu.Lock()
			defer mu.Unlock()
			each = map[string]int{}
			for id, n := range runs {
				each[id] = n
				total += n
			}
			return total, each
		}
		m := newManager(t, job.WithStore(fs), job.WithWorkers(4), job.WithLogger(quietLogger()))
		if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func(ji job.Instance) {
			mu.Lock()
			runs[ji.Info().ID]++
			mu.Unlock()
		}))); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}

		// The store fills up while a first job runs: its outcome is refused,
		// retried, and given up after a few minutes.
		fs.fail(nil, full, nil)
		first, err := m.ScheduleJob(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if n, _ := ran(); n == 0 {
			t.Fatal("the first job never ran")
		}

		// Claims would still be taken, outcomes are not: the manager must
		// not start the whole backlog, only a probe a poll interval.
		var ids []string
		for range 20 {
			ji, err := m.ScheduleJob(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, ji.ID)
		}
		before, _ := ran()
		time.Sleep(10 * job.DefaultPollInterval)
		synctest.Wait()
		after, _ := ran()
		if started := after - before; started > 11 {
			t.Errorf("%d attempts started in 10 poll intervals while the store refused outcomes; want at most one a poll interval", started)
		}

		// Room comes back: everything runs, none of the backlog twice.
		fs.fail(nil, nil, nil)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		_, each := ran()
		for _, id := range ids {
			if each[id] != 1 {
				t.Errorf("instance %s ran %d times after the store had room again, want 1", id, each[id])
			}
			got, err := m.GetInstance(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != job.Completed {
				t.Errorf("instance %s is %v, want completed", id, got.State)
			}
		}
		if got, err := m.GetInstance(ctx, first.ID); err != nil || got.State != job.Completed {
			t.Errorf("first instance (outcome given up, lease rescued) = %v, %v; want completed", got, err)
		}
		if err := m.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}
