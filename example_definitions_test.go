package job_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store/memdbstore"
)

// A producer with zero workers schedules a kind it has no executor for,
// from the definition stored for it; a worker that registers the kind
// runs it. On Redis, Valkey or etcd the two are separate processes.
func ExampleAdmin_PutDefinition() {
	ctx := context.Background()
	st, err := memdbstore.New()
	if err != nil {
		log.Fatal(err)
	}
	producer, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := producer.Admin().PutDefinition(ctx, job.Definition{Kind: "resize", Queue: "images", MaxRetries: 2}, 0); err != nil {
		log.Fatal(err)
	}
	ji, err := producer.ScheduleJob(ctx, "resize", job.WithArguments("cat.png", 640))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("scheduled into", ji.Queue, "with", ji.MaxRetries, "retries")

	worker, err := job.NewManager(job.WithStore(st), job.WithQueues("images"))
	if err != nil {
		log.Fatal(err)
	}
	resize, err := job.NewJob(job.WithKind("resize"), job.WithQueue("images"),
		job.WithExecutor(func(name string, width int) string { return fmt.Sprintf("%s at %dpx", name, width) }))
	if err != nil {
		log.Fatal(err)
	}
	if err := worker.RegisterJob(resize); err != nil {
		log.Fatal(err)
	}
	if err := worker.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer worker.Stop(ctx)
	if err := worker.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	done, err := producer.GetInstance(ctx, ji.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.State, done.Results())
	// Output:
	// scheduled into images with 2 retries
	// completed [cat.png at 640px]
}
