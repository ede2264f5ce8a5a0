package job_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jobkit/job"
)

type requestIDKey struct{}

// requestIDs is middleware that carries a request ID from the ctx of
// ScheduleJob to the ctx of every attempt, through the instance's
// metadata, on whichever manager runs it.
type requestIDs struct{ job.MiddlewareDefaults }

func (requestIDs) Schedule(ctx context.Context, info *job.ScheduleInfo, next func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		info.Metadata["request-id"] = id
	}
	return next(ctx)
}

func (requestIDs) Run(ctx context.Context, inst job.Instance, next func(context.Context) error) error {
	return next(context.WithValue(ctx, requestIDKey{}, inst.Info().Metadata["request-id"]))
}

// Carry a value of the scheduling request to the executor with middleware
// and metadata; WithMetadata adds pairs per call.
func ExampleWithMiddleware() {
	ctx := context.Background()
	mgr, err := job.NewManager(job.WithMiddleware(requestIDs{}))
	if err != nil {
		log.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("audit"), job.WithExecutor(func(ctx context.Context, ji job.Instance) {
		fmt.Println("request", ctx.Value(requestIDKey{}), "tenant", ji.Info().Metadata["tenant"])
	}))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(j); err != nil {
		log.Fatal(err)
	}
	reqCtx := context.WithValue(ctx, requestIDKey{}, "req-7")
	if _, err := mgr.ScheduleJob(reqCtx, "audit", job.WithMetadata("tenant", "acme")); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mgr.Wait(wctx); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Stop(wctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// request req-7 tenant acme
}
