package job_test

// Examples for go-job users: priority, retries, timeout and backoff, set
// on the job and overridden per instance (go-job's
// example_policy_test.go). See doc/migrating-from-go-job.md.

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/jobkit/job"
)

// A job's priority is its instances' default; a schedule may override it.
// Higher runs first (go-job's priority was a nice value: lower ran first).
func ExampleWithPriority() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager(job.WithWorkers(1))
	var (
		mu  sync.Mutex
		ran []string
	)
	report, _ := job.NewJob(
		job.WithKind("report"),
		job.WithPriority(job.LowPriority),
		job.WithExecutor(func(name string) {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, name)
		}),
	)
	_ = mgr.RegisterJob(report)
	for _, s := range []struct {
		name string
		opts []job.ScheduleOption
	}{
		{"low", nil}, // the job's default
		{"high", []job.ScheduleOption{job.WithPriority(job.HighPriority)}},
		{"normal", []job.ScheduleOption{job.WithPriority(job.NormalPriority)}},
	} {
		ji, err := mgr.ScheduleJob(ctx, "report", append(s.opts, job.WithArguments(s.name))...)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(s.name, ji.Priority)
	}
	_ = mgr.Start(ctx)
	_ = mgr.Wait(ctx)
	_ = mgr.Stop(ctx)
	mu.Lock()
	fmt.Println(ran)
	mu.Unlock()
	// Output:
	// low -10
	// high 10
	// normal 0
	// [high normal low]
}

// A failed attempt is retried up to the job's max retries, or the
// instance's own; then the instance is Terminated with the last error.
func ExampleWithMaxRetries() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	flaky, _ := job.NewJob(
		job.WithKind("flaky"),
		job.WithMaxRetries(2),
		job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithExecutor(func(ji job.Instance) error {
			return fmt.Errorf("attempt %d failed", ji.Info().Attempt)
		}),
	)
	_ = mgr.RegisterJob(flaky)
	_ = mgr.Start(ctx)
	byJob, _ := mgr.ScheduleJob(ctx, "flaky")
	once, _ := mgr.ScheduleJob(ctx, "flaky", job.WithMaxRetries(0))
	fmt.Println(byJob.MaxRetries, once.MaxRetries)
	_ = mgr.Wait(ctx)
	for _, ji := range []*job.InstanceInfo{byJob, once} {
		done, _ := mgr.GetInstance(ctx, ji.ID)
		fmt.Println(done.State, done.Attempt, done.Err())
	}
	_ = mgr.Stop(ctx)
	// Output:
	// 2 0
	// terminated 3 attempt 3 failed
	// terminated 1 attempt 1 failed
}

// A timeout bounds each attempt: the executor's context ends, and an
// attempt that ran out of time with no retries left is TimedOut. A
// schedule may override the job's timeout.
func ExampleWithTimeout() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	slow, _ := job.NewJob(
		job.WithKind("slow"),
		job.WithTimeout(20*time.Millisecond),
		job.WithMaxRetries(0),
		job.WithExecutor(func(ctx context.Context, d time.Duration) error {
			select {
			case <-time.After(d): // the work
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
	)
	_ = mgr.RegisterJob(slow)
	_ = mgr.Start(ctx)
	tooSlow, _ := mgr.ScheduleJob(ctx, "slow", job.WithArguments(time.Hour))
	longer, _ := mgr.ScheduleJob(ctx, "slow", job.WithArguments(time.Millisecond), job.WithTimeout(time.Hour))
	fmt.Println(tooSlow.Timeout, longer.Timeout)
	_ = mgr.Wait(ctx)
	for _, ji := range []*job.InstanceInfo{tooSlow, longer} {
		done, _ := mgr.GetInstance(ctx, ji.ID)
		fmt.Println(done.State, done.Err())
	}
	_ = mgr.Stop(ctx)
	// Output:
	// 20ms 1h0m0s
	// timedout job: attempt timed out after 20ms: context deadline exceeded
	// completed <nil>
}

// A Backoff (go-job's BackoffStrategy) is told the number of the attempt
// that failed and returns the wait before the next one. The retry is a
// store write with a later run time: no worker sleeps through it.
func ExampleWithBackoff() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var (
		mu    sync.Mutex
		waits []string
	)
	linear := func(attempt int) time.Duration {
		d := time.Duration(attempt) * time.Millisecond
		mu.Lock()
		defer mu.Unlock()
		waits = append(waits, fmt.Sprintf("after attempt %d: %v", attempt, d))
		return d
	}
	mgr, _ := job.NewManager()
	flaky, _ := job.NewJob(
		job.WithKind("flaky"),
		job.WithMaxRetries(5),
		job.WithBackoff(linear),
		job.WithExecutor(func(ji job.Instance) error {
			if ji.Info().Attempt < 3 {
				return fmt.Errorf("attempt %d failed", ji.Info().Attempt)
			}
			return nil
		}),
	)
	_ = mgr.RegisterJob(flaky)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "flaky")
	_ = mgr.Wait(ctx)
	_ = mgr.Stop(ctx)
	done, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(done.State, done.Attempt)
	mu.Lock()
	for _, w := range waits {
		fmt.Println(w)
	}
	mu.Unlock()
	// Output:
	// completed 3
	// after attempt 1: 1ms
	// after attempt 2: 2ms
}

// ExponentialBackoff doubles the wait after each failure up to a limit;
// each wait is random in its upper half, so instances that failed together
// do not retry together.
func ExampleExponentialBackoff() {
	backoff := job.ExponentialBackoff(time.Second, 10*time.Second)
	for attempt, ceiling := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second} {
		d := backoff(attempt)
		if d < ceiling/2 || d > ceiling {
			fmt.Println("attempt", attempt, "waits", d, "outside", ceiling/2, "to", ceiling)
		}
	}
	fmt.Println("every wait in its range")
	// Output: every wait in its range
}

// Permanent marks an error that retrying cannot fix: the instance is
// Terminated at once, whatever retries are left.
func ExamplePermanent() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	parse, _ := job.NewJob(
		job.WithKind("parse"),
		job.WithMaxRetries(job.RetryForever),
		job.WithExecutor(func(doc string) error {
			if doc == "" {
				return job.Permanent(fmt.Errorf("empty document"))
			}
			return nil
		}),
	)
	_ = mgr.RegisterJob(parse)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "parse", job.WithArguments(""))
	_ = mgr.Wait(ctx)
	done, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(done.State, done.Attempt, done.Err())
	_ = mgr.Stop(ctx)
	// Output: terminated 1 empty document
}
