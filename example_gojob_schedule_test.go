package job_test

// Examples for go-job users: when instances run — delays, jitter and
// recurring jobs (go-job's example_schedule_test.go and its cron
// examples). See doc/migrating-from-go-job.md.

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jobkit/job"
)

// WithJitter delays each instance by a random duration below the bound,
// so instances scheduled together do not all start together. go-job took
// a func returning the jitter; here the bound is a duration and the
// manager draws from it.
func ExampleWithJitter() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager() // not started: the instances only wait
	refresh, _ := job.NewJob(job.WithKind("refresh"), job.WithExecutor(func() {}))
	_ = mgr.RegisterJob(refresh)
	at := time.Now().Add(time.Hour)
	inWindow, spread := true, map[time.Duration]bool{}
	for range 20 {
		ji, err := mgr.ScheduleJob(ctx, "refresh", job.WithScheduleAt(at), job.WithJitter(time.Minute))
		if err != nil {
			log.Fatal(err)
		}
		d := ji.RunAt.Sub(at)
		inWindow = inWindow && d >= 0 && d < time.Minute
		spread[d] = true
	}
	fmt.Println("due within a minute of at:", inWindow)
	fmt.Println("spread out:", len(spread) > 1)
	// Output:
	// due within a minute of at: true
	// spread out: true
}

// WithScheduleAfter and WithScheduleAt set when an instance is due; until
// then it waits in the store, not in a worker.
func ExampleWithScheduleAfter() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	remind, _ := job.NewJob(job.WithKind("remind"), job.WithExecutor(func(msg string) {}))
	_ = mgr.RegisterJob(remind)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "remind", job.WithArguments("stand up"), job.WithScheduleAfter(time.Hour))
	fmt.Println(ji.RunAt.Sub(ji.CreatedAt))
	due, _ := mgr.LookupInstances(ctx, job.NewQuery(job.WithQueryState(job.Scheduled)))
	fmt.Println(len(due), due[0].State)
	_, _ = mgr.CancelInstance(ctx, ji.ID)
	_ = mgr.Stop(ctx)
	// Output:
	// 1h0m0s
	// 1 scheduled
}

// A recurring job carries its schedule (go-job set a crontab spec on each
// ScheduleJob call): WithCronSpec for cron, WithInterval for a fixed
// period, each with the options of the instances its ticks schedule. Every
// tick runs once per cluster, however many managers register the job.
func ExampleWithInterval() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	ticks := make(chan string, 2)
	beat, _ := job.NewJob(
		job.WithKind("heartbeat"),
		// At most one tick per job.MinInterval (1 s).
		job.WithInterval(job.MinInterval, job.WithArguments("ping")),
		job.WithExecutor(func(msg string) {
			select {
			case ticks <- msg:
			default: // the example has seen enough
			}
		}),
	)
	_ = mgr.RegisterJob(beat)
	_ = mgr.Start(ctx)
	for range 2 {
		fmt.Println(<-ticks)
	}
	_ = mgr.Stop(ctx)
	// Output:
	// ping
	// ping
}
