package job_test

// Examples for go-job users: the manager's registry, scheduling, workers,
// start, stop and wait (go-job's example_manager_test.go). See
// doc/migrating-from-go-job.md.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store/memdbstore"
)

// ScheduleJob schedules a registered kind. go-job's ScheduleJob(job)
// registered an unknown job on the fly; here an unregistered kind is an
// error wrapping ErrUnknownKind, so a typo does not create a new kind.
func ExampleManager_ScheduleJob() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, err := job.NewManager()
	if err != nil {
		log.Fatal(err)
	}
	_, err = mgr.ScheduleJob(ctx, "sum", job.WithArguments(1, 2))
	fmt.Println(errors.Is(err, job.ErrUnknownKind))

	sum, _ := job.NewJob(job.WithKind("sum"), job.WithExecutor(func(a, b int) int { return a + b }))
	if err := mgr.RegisterJob(sum); err != nil {
		log.Fatal(err)
	}
	ji, err := mgr.ScheduleJob(ctx, "sum",
		job.WithArguments(1, 2),
		job.WithScheduleAt(time.Now()), // due now is the default
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ji.State)
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	done, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(done.State, done.Results())
	if err := mgr.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// true
	// scheduled
	// completed [3]
}

// The registry: a kind registers once (go-job overwrote it silently),
// LookupJob returns an error rather than a bool, and RegisteredKinds lists
// the kinds (go-job's ListJobs).
func ExampleManager_RegisterJob() {
	mgr, _ := job.NewManager()
	hello, _ := job.NewJob(job.WithKind("hello"), job.WithExecutor(func() {}))
	sum, _ := job.NewJob(job.WithKind("sum"), job.WithExecutor(func(a, b int) int { return a + b }))
	fmt.Println(mgr.RegisterJob(sum), mgr.RegisterJob(hello))
	err := mgr.RegisterJob(sum)
	fmt.Println(errors.Is(err, job.ErrDuplicateKind))
	fmt.Println(mgr.RegisteredKinds())

	j, err := mgr.GetJob("sum")
	fmt.Println(j.Kind(), err)
	fmt.Println(mgr.UnregisterJob("sum"))
	_, err = mgr.GetJob("sum")
	fmt.Println(errors.Is(err, job.ErrUnknownKind))
	fmt.Println(mgr.RegisteredKinds())
	// Output:
	// <nil> <nil>
	// true
	// [hello sum]
	// sum <nil>
	// <nil>
	// true
	// [hello]
}

// SetWorkers resizes the pool while the manager runs (go-job's
// ResizeWorkers); Workers reports the size and how many are busy (go-job's
// NumWorkers). Shrinking never interrupts a running attempt.
func ExampleManager_SetWorkers() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager(job.WithWorkers(1))
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	block, _ := job.NewJob(job.WithKind("block"), job.WithExecutor(func() {
		started <- struct{}{}
		<-release
	}))
	_ = mgr.RegisterJob(block)
	_ = mgr.Start(ctx)
	for range 3 {
		if _, err := mgr.ScheduleJob(ctx, "block"); err != nil {
			log.Fatal(err)
		}
	}
	<-started
	fmt.Println(mgr.Workers()) // one worker, busy; two instances wait

	_ = mgr.SetWorkers(3)
	<-started
	<-started
	fmt.Println(mgr.Workers()) // all three run

	_ = mgr.SetWorkers(1)
	fmt.Println(mgr.Workers()) // smaller pool, nothing interrupted

	close(release)
	_ = mgr.Wait(ctx)
	_ = mgr.Stop(ctx)
	// Output:
	// 1 1
	// 3 3
	// 1 3
}

// Stop(ctx) stops claiming and lets running attempts finish while ctx
// lasts; go-job's Stop() took no ctx and canceled them at once.
func ExampleManager_Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	started := make(chan struct{})
	release := make(chan struct{})
	work, _ := job.NewJob(job.WithKind("work"), job.WithExecutor(func() string {
		close(started)
		<-release
		return "done"
	}))
	_ = mgr.RegisterJob(work)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "work")
	<-started
	close(release)
	fmt.Println(mgr.Stop(ctx)) // returns once the attempt is recorded
	done, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(done.State, done.Results())
	// Output:
	// <nil>
	// completed [done]
}

// When Stop's ctx ends first, running attempts are canceled with cause
// ErrShutdown and handed back to the queue once their executors return,
// their attempt not counted, so another manager can run them at once; Stop
// returns nil when that worked.
func ExampleManager_Stop_handBack() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	started := make(chan struct{})
	cause := make(chan error, 1)
	long, _ := job.NewJob(job.WithKind("long"), job.WithExecutor(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}))
	_ = mgr.RegisterJob(long)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "long")
	<-started

	now, stopNow := context.WithCancel(ctx)
	stopNow()            // no time to drain
	err := mgr.Stop(now) // nil: the attempt was handed back as designed
	fmt.Println(err)
	fmt.Println(errors.Is(<-cause, job.ErrShutdown))
	back, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(back.State, back.Attempt)
	// Output:
	// <nil>
	// true
	// scheduled 0
}

// CancelInstance cancels one instance by ID, pending or running; go-job's
// CancelInstances(query) is a lookup followed by a cancel of each.
func ExampleManager_CancelInstance() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	wait, _ := job.NewJob(job.WithKind("wait"), job.WithExecutor(func(ctx context.Context) error {
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}))
	_ = mgr.RegisterJob(wait)
	_ = mgr.Start(ctx)

	// A running instance: its context is canceled with cause ErrCanceled.
	running, _ := mgr.ScheduleJob(ctx, "wait")
	<-started
	if _, err := mgr.CancelInstance(ctx, running.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println(errors.Is(<-cause, job.ErrCanceled))

	// Pending instances, selected by a query.
	for range 2 {
		_, _ = mgr.ScheduleJob(ctx, "wait", job.WithScheduleAfter(time.Hour))
	}
	pending, _ := mgr.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("wait"), job.WithQueryState(job.Scheduled)))
	for _, ji := range pending {
		canceled, err := mgr.CancelInstance(ctx, ji.ID)
		fmt.Println(canceled.State, err)
	}

	// Nothing left to cancel: typed errors say why.
	_, err := mgr.CancelInstance(ctx, pending[0].ID)
	fmt.Println(errors.Is(err, job.ErrFinished))
	_, err = mgr.CancelInstance(ctx, "no-such-id")
	fmt.Println(errors.Is(err, job.ErrNotFound))

	_ = mgr.Wait(ctx)
	done, _ := mgr.GetInstance(ctx, running.ID)
	fmt.Println(done.State)
	_ = mgr.Stop(ctx)
	// Output:
	// true
	// canceled <nil>
	// canceled <nil>
	// true
	// true
	// canceled
}

// WithStore picks the store plugin; the default is the embedded in-process
// store (store/memdbstore). Redis, Valkey and etcd plugins take a client
// the caller owns (see doc/migrating-from-go-job.md).
func ExampleWithStore() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := memdbstore.New()
	if err != nil {
		log.Fatal(err)
	}
	mgr, err := job.NewManager(job.WithStore(st), job.WithWorkers(4))
	if err != nil {
		log.Fatal(err)
	}
	hello, _ := job.NewJob(job.WithKind("hello"), job.WithExecutor(func(name string) string { return "hello, " + name }))
	_ = mgr.RegisterJob(hello)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "hello", job.WithArguments("gopher"))
	_ = mgr.Wait(ctx)
	done, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(done.State, done.Results())
	_ = mgr.Stop(ctx)
	// Output: completed [hello, gopher]
}
