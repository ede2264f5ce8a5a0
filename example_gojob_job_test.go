package job_test

// Examples for go-job users: job definitions (go-job's
// example_job_test.go). See doc/migrating-from-go-job.md.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobkit/job"
)

// A job pairs a kind with an executor and the policy its instances run
// under. NewJob takes only JobOptions, so a misplaced option is a compile
// error, and a definition it cannot use is an error wrapping ErrInvalidJob
// whose message names the fix.
func ExampleNewJob() {
	sum, err := job.NewJob(
		job.WithKind("sum"),
		job.WithExecutor(func(a, b int) int { return a + b }),
		job.WithPriority(job.HighPriority),
		job.WithMaxRetries(2),
		job.WithTimeout(time.Minute),
	)
	fmt.Println(sum.Kind(), err)

	_, err = job.NewJob(job.WithKind("nothing"))
	fmt.Println(errors.Is(err, job.ErrInvalidJob))
	fmt.Println(err)
	_, err = job.NewJob(job.WithKind("text"), job.WithExecutor("not a func"))
	fmt.Println(err)
	_, err = job.NewJob(job.WithKind("late"), job.WithExecutor(func(n int, ctx context.Context) {}))
	fmt.Println(err)
	// Output:
	// sum <nil>
	// true
	// job: invalid job definition: job "nothing" has no executor; add job.WithExecutor(func(...){...})
	// job: invalid job definition: executor is a string, not a func; pass a func to WithExecutor
	// job: invalid job definition: executor func(int, context.Context) takes context.Context as parameter 2; injected parameters must come first
}

// A struct argument travels as JSON and is decoded into the executor's
// parameter type. Read back from the store, arguments and results are JSON
// values; ArgumentsInto and ResultsInto decode them into typed variables
// (go-job's ResultSet held them as []any).
func ExampleNewJob_struct() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type Sum struct{ A, B int }
	mgr, _ := job.NewManager()
	sum, _ := job.NewJob(
		job.WithKind("sum"),
		job.WithExecutor(func(s Sum) int { return s.A + s.B }),
	)
	_ = mgr.RegisterJob(sum)
	_ = mgr.Start(ctx)
	ji, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments(Sum{A: 1, B: 2}))
	if err != nil {
		log.Fatal(err)
	}
	_ = mgr.Wait(ctx)
	done, _ := mgr.GetInstance(ctx, ji.ID)
	fmt.Println(done.Arguments(), done.Results())
	var (
		args  Sum
		total int
	)
	if err := done.ArgumentsInto(&args); err != nil {
		log.Fatal(err)
	}
	if err := done.ResultsInto(&total); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v %d\n", args, total)
	_ = mgr.Stop(ctx)
	// Output:
	// [map[A:1 B:2]] [3]
	// {A:1 B:2} 3
}
