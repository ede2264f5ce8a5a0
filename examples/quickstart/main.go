// Quickstart registers jobs of several signatures on a manager with the
// embedded store, runs a few instances, and prints their results, state
// history and logs. No server is needed:
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jobkit/job"
)

type order struct {
	ID    string   `json:"id"`
	Items []string `json:"items"`
}

func main() {
	ctx := context.Background()
	mgr, err := job.NewManager(job.WithWorkers(4)) // the in-memory store (store/memdbstore) is the default
	if err != nil {
		log.Fatal(err)
	}

	// Any signature: leading context.Context / job.Instance are injected,
	// the rest are decoded from the stored arguments.
	jobs := []*job.Job{
		must(job.NewJob(job.WithKind("sum"),
			job.WithExecutor(func(a, b int) int { return a + b }))),
		must(job.NewJob(job.WithKind("shout"),
			job.WithExecutor(func(ctx context.Context, s string) (string, error) { return strings.ToUpper(s) + "!", nil }))),
		must(job.NewJob(job.WithKind("pack"),
			job.WithExecutor(func(ji job.Instance, o order) (int, error) {
				ji.Infof("packing order %s", o.ID)
				for _, it := range o.Items {
					ji.Debugf("packed %s", it)
				}
				return len(o.Items), nil
			}),
			job.WithCompleteProcessor(func(ji job.Instance, res []any) {
				fmt.Printf("handler: %s packed %v items\n", ji.Info().Kind, res[0])
			}))),
	}
	for _, j := range jobs {
		if err := mgr.RegisterJob(j); err != nil {
			log.Fatal(err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}

	sum := must(mgr.ScheduleJob(ctx, "sum", job.WithArguments(1, 2)))
	shout := must(mgr.ScheduleJob(ctx, "shout", job.WithArguments("hello"), job.WithScheduleAfter(50*time.Millisecond)))
	pack := must(mgr.ScheduleJob(ctx, "pack", job.WithArguments(order{ID: "A-1", Items: []string{"book", "pen"}}),
		job.WithPriority(job.HighPriority)))

	// A mismatch is caught before anything is stored.
	if _, err := mgr.ScheduleJob(ctx, "sum", job.WithArguments("one", 2)); err != nil {
		fmt.Println("rejected:", err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mgr.Wait(waitCtx); err != nil {
		log.Fatal(err)
	}

	for _, ji := range []*job.InstanceInfo{sum, shout, pack} {
		got := must(mgr.GetInstance(ctx, ji.ID))
		fmt.Printf("%s%v = %v (%s)\n", got.Kind, got.Arguments(), got.Results(), got.State)
		hist := must(mgr.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(ji))))
		var states []string
		for _, h := range hist {
			states = append(states, h.State.String())
		}
		fmt.Println("  history:", strings.Join(states, " → "))
	}
	logs := must(mgr.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstance(pack))))
	for _, l := range logs {
		fmt.Printf("  log %-5s %s\n", l.Level, l.Message)
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
