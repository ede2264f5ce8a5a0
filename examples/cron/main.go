// Cron runs a recurring job on a cron spec with seconds and another on a
// one-second interval (job.MinInterval) for a few seconds, then prints each
// tick once.
// Several managers sharing a store would still run every tick once.
//
//	go run ./examples/cron
package main

import (
	"context"
	"fmt"
	"log"
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
	var ticks atomic.Int32
	every2s, err := job.NewJob(job.WithKind("report"),
		job.WithCronSpec("*/2 * * * * *", job.WithArguments("daily-report")), // seconds field: every 2 s
		job.WithExecutor(func(ji job.Instance, name string) {
			fmt.Printf("%s: %s tick due %s\n", time.Now().Format("15:04:05.000"), name, ji.Info().RunAt.Format("15:04:05.000"))
		}))
	if err != nil {
		log.Fatal(err)
	}
	fast, err := job.NewJob(job.WithKind("heartbeat"),
		job.WithInterval(time.Second), // the shortest interval, job.MinInterval
		job.WithExecutor(func() { ticks.Add(1) }))
	if err != nil {
		log.Fatal(err)
	}
	// An invalid spec is an error at definition time.
	if _, err := job.NewJob(job.WithKind("bad"), job.WithCronSpec("61 * * * *"), job.WithExecutor(func() {})); err != nil {
		fmt.Println("rejected:", err)
	}
	for _, j := range []*job.Job{every2s, fast} {
		if err := mgr.RegisterJob(j); err != nil {
			log.Fatal(err)
		}
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	time.Sleep(5 * time.Second) // let it tick: this is a demo, not a test
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := mgr.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("heartbeat ran %d times in 5 s (every 1 s)\n", ticks.Load())
}
