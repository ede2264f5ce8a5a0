package job_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jobkit/job"
)

// Register a job whose executor takes typed arguments, schedule an
// instance, and read its result.
func Example() {
	ctx := context.Background()
	mgr, err := job.NewManager() // embedded in-memory store
	if err != nil {
		log.Fatal(err)
	}
	sum, err := job.NewJob(
		job.WithKind("sum"),
		job.WithExecutor(func(ctx context.Context, a, b int) (int, error) { return a + b, nil }),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(sum); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	ji, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments(1, 2))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	done, err := mgr.GetInstance(ctx, ji.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.State, done.Results())
	if err := mgr.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: completed [3]
}

// Every state change is a history record.
func ExampleManager_LookupInstanceHistory() {
	ctx := context.Background()
	mgr, _ := job.NewManager()
	calls := 0
	flaky, _ := job.NewJob(
		job.WithKind("flaky"),
		job.WithMaxRetries(1),
		job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithExecutor(func() error {
			if calls++; calls == 1 {
				return errors.New("first attempt fails")
			}
			return nil
		}),
	)
	_ = mgr.RegisterJob(flaky)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "flaky")
	_ = mgr.Wait(ctx)
	hist, _ := mgr.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	for _, h := range hist {
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%v %d %s", h.State, h.Attempt, h.Error)))
	}
	_ = mgr.Stop(ctx)
	// Output:
	// created 0
	// scheduled 0
	// processing 1
	// scheduled 1 first attempt fails
	// processing 2
	// completed 2
}

// A wrong argument is rejected before anything is stored.
func ExampleManager_ScheduleJob_mismatch() {
	ctx := context.Background()
	mgr, _ := job.NewManager()
	sum, _ := job.NewJob(job.WithKind("sum"), job.WithExecutor(func(a, b int) int { return a + b }))
	_ = mgr.RegisterJob(sum)
	_, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments("one", 2))
	fmt.Println(errors.Is(err, job.ErrInvalidArguments))
	_, err = mgr.ScheduleJob(ctx, "sum", job.WithArguments(1))
	fmt.Println(err)
	// Output:
	// true
	// job: schedule "sum": job: invalid arguments: 1 arguments for executor func(int, int) int, which takes 2
}

// A unique key makes a second schedule return the first instance.
func ExampleWithUniqueKey() {
	ctx := context.Background()
	mgr, _ := job.NewManager()
	report, _ := job.NewJob(job.WithKind("report"), job.WithExecutor(func(day string) {}))
	_ = mgr.RegisterJob(report)
	first, _ := mgr.ScheduleJob(ctx, "report", job.WithArguments("2026-11-22"), job.WithUniqueKey("report:2026-11-22", time.Hour))
	again, err := mgr.ScheduleJob(ctx, "report", job.WithArguments("2026-11-22"), job.WithUniqueKey("report:2026-11-22", time.Hour))
	fmt.Println(errors.Is(err, job.ErrDuplicate), again.ID == first.ID)
	// Output: true true
}

// Instances log through the Instance they are handed.
func ExampleInstance_logs() {
	ctx := context.Background()
	mgr, _ := job.NewManager()
	greet, _ := job.NewJob(job.WithKind("greet"), job.WithExecutor(func(ji job.Instance, name string) {
		ji.Infof("hello, %s", name)
		ji.Warnf("attempt %d", ji.Info().Attempt)
	}))
	_ = mgr.RegisterJob(greet)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "greet", job.WithArguments("gopher"))
	_ = mgr.Wait(ctx)
	logs, _ := mgr.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	for _, l := range logs {
		fmt.Println(l.Level, l.Message)
	}
	_ = mgr.Stop(ctx)
	// Output:
	// info hello, gopher
	// warn attempt 1
}

// An invalid cron spec is an error when the job is defined.
func ExampleWithCronSpec() {
	_, err := job.NewJob(job.WithKind("nightly"), job.WithCronSpec("0 25 * * *"), job.WithExecutor(func() {}))
	fmt.Println(errors.Is(err, job.ErrInvalidJob))
	every, err := job.NewJob(job.WithKind("every-5m"), job.WithCronSpec("*/5 * * * *"), job.WithExecutor(func() {}))
	fmt.Println(every.Kind(), err)
	// Output:
	// true
	// every-5m <nil>
}
