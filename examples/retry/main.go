// Retry shows retries with backoff, a permanent error, a timeout and a
// recovered panic, and prints each instance's history.
//
//	go run ./examples/retry
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jobkit/job"
)

func main() {
	ctx := context.Background()
	mgr, err := job.NewManager()
	if err != nil {
		log.Fatal(err)
	}
	var calls atomic.Int32
	jobs := []*job.Job{
		// Fails twice, then succeeds on the third attempt.
		must(job.NewJob(job.WithKind("flaky"),
			job.WithMaxRetries(5),
			job.WithBackoff(job.ExponentialBackoff(20*time.Millisecond, time.Second)),
			job.WithExecutor(func(ji job.Instance) (string, error) {
				if calls.Add(1) < 3 {
					return "", fmt.Errorf("attempt %d: upstream unavailable", ji.Info().Attempt)
				}
				return "ok", nil
			}))),
		// A permanent error is not retried.
		must(job.NewJob(job.WithKind("invalid"),
			job.WithExecutor(func(id int) error { return job.Permanent(errors.New("no such customer")) }))),
		// Times out on every attempt: TimedOut once retries run out.
		must(job.NewJob(job.WithKind("slow"),
			job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(10*time.Millisecond)),
			job.WithTimeout(50*time.Millisecond),
			job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }))),
		// A panic is recovered and recorded with its stack.
		must(job.NewJob(job.WithKind("crash"), job.WithMaxRetries(0),
			job.WithExecutor(func() { panic("nil map write") }))),
	}
	for _, j := range jobs {
		if err := mgr.RegisterJob(j); err != nil {
			log.Fatal(err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	var ids []*job.InstanceInfo
	ids = append(ids, must(mgr.ScheduleJob(ctx, "flaky")))
	ids = append(ids, must(mgr.ScheduleJob(ctx, "invalid", job.WithArguments(42))))
	ids = append(ids, must(mgr.ScheduleJob(ctx, "slow")))
	ids = append(ids, must(mgr.ScheduleJob(ctx, "crash")))
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mgr.Wait(waitCtx); err != nil {
		log.Fatal(err)
	}
	for _, ji := range ids {
		got := must(mgr.GetInstance(ctx, ji.ID))
		msg := ""
		if got.Error != "" {
			msg = strings.SplitN(got.Error, "\n", 2)[0] // first line; panics carry a stack
		}
		fmt.Printf("%-8s %-10s attempts=%d error=%q\n", got.Kind, got.State, got.Attempt, msg)
		hist := must(mgr.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji))))
		for _, h := range hist {
			fmt.Printf("    %-10s attempt %d %s\n", h.State, h.Attempt, strings.SplitN(h.Error, "\n", 2)[0])
		}
	}
	stopCtx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := mgr.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
