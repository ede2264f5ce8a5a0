package jobotel_test

import (
	"context"
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobkit/job"
	jobotel "github.com/jobkit/job/otel"
)

// ExampleNew traces a job scheduled under a request's span: its run is in
// the request's trace, a child of the schedule span.
func ExampleNew() {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	mgr, err := job.NewManager(jobotel.New(jobotel.WithTracerProvider(tp)))
	if err != nil {
		panic(err)
	}
	j, err := job.NewJob(job.WithKind("greet"), job.WithExecutor(func(ctx context.Context, name string) string {
		return "hello " + name
	}))
	if err != nil {
		panic(err)
	}
	if err := mgr.RegisterJob(j); err != nil {
		panic(err)
	}
	ctx := context.Background()
	reqCtx, req := tp.Tracer("app").Start(ctx, "POST /greet")
	if _, err := mgr.ScheduleJob(reqCtx, "greet", job.WithArguments("gopher")); err != nil {
		panic(err)
	}
	req.End()
	if err := mgr.Start(ctx); err != nil {
		panic(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mgr.Wait(wctx); err != nil {
		panic(err)
	}
	if err := mgr.Stop(wctx); err != nil {
		panic(err)
	}
	byID := map[string]string{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID().String()] = s.Name()
	}
	for _, name := range []string{"schedule greet", "wait greet", "run greet"} {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				fmt.Printf("%s (%v), child of %q, same trace: %v\n", name, s.SpanKind(),
					byID[s.Parent().SpanID().String()], s.SpanContext().TraceID() == req.SpanContext().TraceID())
			}
		}
	}
	// Output:
	// schedule greet (producer), child of "POST /greet", same trace: true
	// wait greet (internal), child of "schedule greet", same trace: true
	// run greet (consumer), child of "schedule greet", same trace: true
}
