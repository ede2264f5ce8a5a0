package job_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jobkit/job"
)

// Follow the state changes of every instance as they happen, as a server
// streaming to a console would; keep the last event's Cursor to resume
// after a disconnect with WithEventCursor.
func ExampleManager_WatchEvents() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := job.NewManager()
	if err != nil {
		log.Fatal(err)
	}
	greet, err := job.NewJob(job.WithKind("greet"), job.WithExecutor(func(name string) string { return "hello " + name }))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.RegisterJob(greet); err != nil {
		log.Fatal(err)
	}
	events, err := mgr.WatchEvents(ctx, job.WithEventKinds("greet"))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer mgr.Stop(context.Background())
	if _, err := mgr.ScheduleJob(ctx, "greet", job.WithArguments("world")); err != nil {
		log.Fatal(err)
	}
	for ev := range events {
		if ev.Err != nil {
			log.Fatal(ev.Err) // fell behind what the store keeps: list instances, then follow again
		}
		fmt.Println(ev.Kind, ev.State, ev.Attempt)
		if ev.State.Final() {
			break
		}
	}
	// Output:
	// greet created 0
	// greet scheduled 0
	// greet processing 1
	// greet completed 1
}
