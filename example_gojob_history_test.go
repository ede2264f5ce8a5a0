package job_test

// Examples for go-job users: state history, logs, queries and retention
// (go-job's package Example, its jobtest Example and its history and log
// cleaner jobs). See doc/migrating-from-go-job.md.

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jobkit/job"
)

// The whole round trip go-job's package Example shows: processors that
// log through the instance, then the instance's state history and logs.
// States print in lower case ("completed", go-job's "Completed").
func Example_history() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, err := job.NewManager()
	if err != nil {
		log.Fatal(err)
	}
	sum, err := job.NewJob(
		job.WithKind("sum"),
		job.WithExecutor(func(a, b int) int { return a + b }),
		job.WithCompleteProcessor(func(ji job.Instance, results []any) {
			ji.Infof("result: %v", results)
		}),
		job.WithTerminateProcessor(func(ji job.Instance, err error) {
			ji.Errorf("failed: %v", err)
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(sum); err != nil {
		log.Fatal(err)
	}
	ji, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments(1, 2))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	hist, err := mgr.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range hist {
		fmt.Println(h.State, h.Attempt)
	}
	logs, err := mgr.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range logs {
		fmt.Println(l.Level, l.Message)
	}
	if err := mgr.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// created 0
	// scheduled 0
	// processing 1
	// completed 1
	// info result: [3]
}

// LookupInstances selects instances by kind, state, queue and time, newest
// first; NewQuery() with no options selects all (go-job's ListInstances).
func ExampleManager_LookupInstances() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	div, _ := job.NewJob(
		job.WithKind("div"),
		job.WithMaxRetries(0),
		job.WithExecutor(func(a, b int) (int, error) {
			if b == 0 {
				return 0, fmt.Errorf("%d/%d: division by zero", a, b)
			}
			return a / b, nil
		}),
	)
	_ = mgr.RegisterJob(div)
	_ = mgr.Start(ctx)
	for _, b := range []int{1, 0, 2} {
		if _, err := mgr.ScheduleJob(ctx, "div", job.WithArguments(6, b)); err != nil {
			log.Fatal(err)
		}
	}
	_ = mgr.Wait(ctx)

	all, _ := mgr.LookupInstances(ctx, job.NewQuery())
	fmt.Println(len(all), "instances")
	failed, _ := mgr.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("div"), job.WithQueryState(job.Terminated)))
	for _, ji := range failed {
		fmt.Println(ji.State, ji.Arguments(), ji.Err())
	}
	newest, _ := mgr.LookupInstances(ctx, job.NewQuery(job.WithQueryState(job.Completed), job.WithQueryLimit(1)))
	fmt.Println(newest[0].Arguments(), newest[0].Results())
	_ = mgr.Stop(ctx)
	// Output:
	// 3 instances
	// terminated [6 0] 6/0: division by zero
	// [6 2] [3]
}

// Log records carry a level; a query selects levels, an instance, a kind
// or a time range (go-job's WithQueryLogLevel took one level).
func ExampleWithQueryLevel() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	importer, _ := job.NewJob(job.WithKind("import"), job.WithExecutor(func(ji job.Instance, rows []string) {
		ji.Debugf("importing %d rows", len(rows))
		for i, r := range rows {
			if r == "" {
				ji.Warnf("row %d is empty; skipped", i+1)
				continue
			}
			ji.Infof("row %d: %s", i+1, r)
		}
	}))
	_ = mgr.RegisterJob(importer)
	_ = mgr.Start(ctx)
	_, _ = mgr.ScheduleJob(ctx, "import", job.WithArguments([]string{"a", "", "c"}))
	_ = mgr.Wait(ctx)
	logs, _ := mgr.LookupInstanceLogs(ctx, job.NewQuery(
		job.WithQueryKind("import"),
		job.WithQueryLevel(job.LogWarn, job.LogError),
	))
	for _, l := range logs {
		fmt.Println(l.Level, l.Message)
	}
	_ = mgr.Stop(ctx)
	// Output: warn row 2 is empty; skipped
}

// Retention bounds what the store keeps: finished instances by age and
// count (with their history and logs), history and logs by age. The
// manager prunes every prune interval; Prune does it now. This replaces
// go-job's ClearInstanceHistory, ClearInstanceLogs and its cleaner jobs.
func ExampleAdmin_Prune() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager(
		job.WithRetention(24*time.Hour, 1), // keep the newest finished instance
		job.WithHistoryRetention(7*24*time.Hour),
		job.WithLogRetention(24*time.Hour),
	)
	hello, _ := job.NewJob(job.WithKind("hello"), job.WithExecutor(func() {}))
	_ = mgr.RegisterJob(hello)
	_ = mgr.Start(ctx)
	for range 3 {
		_, _ = mgr.ScheduleJob(ctx, "hello")
	}
	_ = mgr.Wait(ctx)
	res, err := mgr.Admin().Prune(ctx)
	fmt.Println(res.Instances, err)
	left, _ := mgr.LookupInstances(ctx, job.NewQuery())
	hist, _ := mgr.LookupInstanceHistory(ctx, job.NewQuery())
	fmt.Println(len(left), len(hist))
	_ = mgr.Stop(ctx)
	// Output:
	// 2 <nil>
	// 1 4
}
