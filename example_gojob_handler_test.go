package job_test

// Examples for go-job users: executors and the processors told of an
// instance's fate (go-job's example_handler_test.go). See
// doc/migrating-from-go-job.md.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobkit/job"
)

// The kind names a job; instances are scheduled and looked up by it.
func ExampleWithKind() {
	sum, err := job.NewJob(job.WithKind("sum"), job.WithExecutor(func(a, b int) int { return a + b }))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum.Kind(), sum.Queue())
	// Output: sum default
}

// An executor may have any signature: no arguments and no results, typed
// arguments and results, several results, a struct in and a struct out.
// Results read back from the store are JSON values (numbers as
// json.Number, structs as maps).
func ExampleWithExecutor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type Concat struct{ A, B, S string }
	executors := []struct {
		kind string
		fn   any
		args []any
	}{
		{"hello", func() {}, nil},
		{"sum", func(a, b int) int { return a + b }, []any{1, 2}},
		{"concat", func(a, b string) string { return a + ", " + b }, []any{"hello", "world"}},
		{"split", func(s string) (string, string) { return s[:2], s[2:] }, []any{"gopher"}},
		{"struct", func(c *Concat) *Concat { c.S = c.A + ", " + c.B; return c }, []any{Concat{A: "go", B: "job"}}},
	}
	mgr, err := job.NewManager()
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range executors {
		j, err := job.NewJob(job.WithKind(e.kind), job.WithExecutor(e.fn))
		if err != nil {
			log.Fatal(err)
		}
		if err := mgr.RegisterJob(j); err != nil {
			log.Fatal(err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	var ids []string
	for _, e := range executors {
		ji, err := mgr.ScheduleJob(ctx, e.kind, job.WithArguments(e.args...))
		if err != nil {
			log.Fatal(err)
		}
		ids = append(ids, ji.ID)
	}
	if err := mgr.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	for _, id := range ids {
		ji, err := mgr.GetInstance(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ji.Kind, ji.State, ji.Results())
	}
	if err := mgr.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// hello completed []
	// sum completed [3]
	// concat completed [hello, world]
	// split completed [go pher]
	// struct completed [map[A:go B:job S:go, job]]
}

// Leading context.Context and Instance parameters are injected, so an
// executor can log through its instance. Unlike go-job, the arguments name
// only the other parameters: there is no "?" placeholder.
func ExampleWithExecutor_instance() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	sum, _ := job.NewJob(
		job.WithKind("sum"),
		job.WithExecutor(func(ctx context.Context, ji job.Instance, a, b int) int {
			ji.Infof("%s: attempt %d adds %d and %d", ji.Info().Kind, ji.Info().Attempt, a, b)
			return a + b
		}),
	)
	_ = mgr.RegisterJob(sum)
	_ = mgr.Start(ctx)
	ji, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments(1, 2))
	if err != nil {
		log.Fatal(err)
	}
	_ = mgr.Wait(ctx)
	logs, _ := mgr.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstance(ji)))
	for _, l := range logs {
		fmt.Println(l.Level, l.Message)
	}
	_ = mgr.Stop(ctx)
	// Output: info sum: attempt 1 adds 1 and 2
}

// The complete processor gets the results as the executor returned them,
// typed, on the manager that ran the instance.
func ExampleWithCompleteProcessor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type Concat struct{ A, B, S string }
	mgr, _ := job.NewManager()
	concat, _ := job.NewJob(
		job.WithKind("concat"),
		job.WithExecutor(func(c *Concat) *Concat { c.S = c.A + ", " + c.B; return c }),
		job.WithCompleteProcessor(func(ji job.Instance, results []any) {
			c := results[0].(*Concat)
			fmt.Printf("%s completed: %q\n", ji.Info().Kind, c.S)
		}),
	)
	_ = mgr.RegisterJob(concat)
	_ = mgr.Start(ctx)
	if _, err := mgr.ScheduleJob(ctx, "concat", job.WithArguments(Concat{A: "hello", B: "world"})); err != nil {
		log.Fatal(err)
	}
	_ = mgr.Wait(ctx) // processors have run when Wait returns
	_ = mgr.Stop(ctx)
	// Output: concat completed: "hello, world"
}

// The terminate processor is told why an instance failed for good: its
// retries ran out, it timed out on its last attempt, or it returned a
// Permanent error. It returns nothing: unlike go-job's, it cannot turn the
// failure into a success; an executor that wants that returns nil itself.
func ExampleWithTerminateProcessor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errNoCustomer := errors.New("no such customer")
	mgr, _ := job.NewManager()
	charge, _ := job.NewJob(
		job.WithKind("charge"),
		job.WithMaxRetries(5), // not used: a Permanent error is not retried
		job.WithExecutor(func(customer int) error {
			return job.Permanent(fmt.Errorf("customer %d: %w", customer, errNoCustomer))
		}),
		job.WithTerminateProcessor(func(ji job.Instance, err error) {
			fmt.Println(ji.Info().Kind, "attempt", ji.Info().Attempt, ji.Info().State)
			fmt.Println(err)
			fmt.Println(errors.Is(err, errNoCustomer), errors.Is(err, job.ErrPermanent))
		}),
	)
	_ = mgr.RegisterJob(charge)
	_ = mgr.Start(ctx)
	if _, err := mgr.ScheduleJob(ctx, "charge", job.WithArguments(42)); err != nil {
		log.Fatal(err)
	}
	_ = mgr.Wait(ctx)
	_ = mgr.Stop(ctx)
	// Output:
	// charge attempt 1 terminated
	// customer 42: no such customer
	// true true
}

// go-job's terminate processor decides the outcome: here a deadline is
// not a failure, as in go-job's own example. The executor returns its
// ctx's error at the timeout; the verdict's nil completes the instance.
func ExampleWithTerminateVerdict() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	poll, _ := job.NewJob(
		job.WithKind("poll"),
		job.WithTimeout(20*time.Millisecond),
		job.WithExecutor(func(ctx context.Context) error {
			<-ctx.Done() // polls until the deadline
			return ctx.Err()
		}),
		job.WithTerminateVerdict(func(ji job.Instance, err error) error {
			if errors.Is(err, context.DeadlineExceeded) {
				fmt.Println(ji.Info().Kind, "ran out of time, which is fine")
				return nil // the attempt succeeded after all
			}
			return err // a failure: retried while retries are left
		}),
	)
	_ = mgr.RegisterJob(poll)
	_ = mgr.Start(ctx)
	ji, _ := mgr.ScheduleJob(ctx, "poll")
	_ = mgr.Wait(ctx)
	ji, _ = mgr.GetInstance(ctx, ji.ID)
	fmt.Println(ji.State)
	_ = mgr.Stop(ctx)
	// Output:
	// poll ran out of time, which is fine
	// completed
}

// go-job converts arguments to the executor's parameter types; in jobkit
// a job opts in, and the conversion happens when the instance is
// scheduled.
func ExampleWithArgumentConversion() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type concat struct{ A, B string }
	mgr, _ := job.NewManager()
	sum, _ := job.NewJob(job.WithKind("sum"), job.WithArgumentConversion(),
		job.WithExecutor(func(a, b int) int { return a + b }))
	join, _ := job.NewJob(job.WithKind("join"), job.WithArgumentConversion(),
		job.WithExecutor(func(p concat) string { return p.A + ", " + p.B }))
	_ = mgr.RegisterJob(sum)
	_ = mgr.RegisterJob(join)
	_ = mgr.Start(ctx)
	s, _ := mgr.ScheduleJob(ctx, "sum", job.WithArguments("42", "58"))
	j, _ := mgr.ScheduleJob(ctx, "join", job.WithArguments(`{"A": "Hello", "B": "world!"}`))
	_, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments("forty-two", "58"))
	fmt.Println(errors.Is(err, job.ErrInvalidArguments))
	_ = mgr.Wait(ctx)
	for _, id := range []string{s.ID, j.ID} {
		ji, _ := mgr.GetInstance(ctx, id)
		fmt.Println(ji.Kind, ji.State, ji.Results())
	}
	_ = mgr.Stop(ctx)
	// Output:
	// true
	// sum completed [100]
	// join completed [Hello, world!]
}

// The state change processor sees each change this manager makes. An
// instance scheduled before Start reports its changes in order; one
// scheduled while the manager runs may report Processing before Scheduled,
// and the history (Manager.LookupInstanceHistory) is then the ordered
// record.
func ExampleWithStateChangeProcessor() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mgr, _ := job.NewManager()
	hello, _ := job.NewJob(
		job.WithKind("hello"),
		job.WithExecutor(func() {}),
		job.WithStateChangeProcessor(func(ji job.Instance, state job.State) {
			fmt.Println(ji.Info().Kind, state)
		}),
	)
	_ = mgr.RegisterJob(hello)
	if _, err := mgr.ScheduleJob(ctx, "hello"); err != nil {
		log.Fatal(err)
	}
	_ = mgr.Start(ctx)
	_ = mgr.Wait(ctx)
	_ = mgr.Stop(ctx)
	// Output:
	// hello scheduled
	// hello processing
	// hello completed
}
