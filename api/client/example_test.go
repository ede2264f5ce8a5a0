package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
)

// A service schedules a job on jobd and reads what became of it, with the
// option names of the in-process API. (Not run: it needs a server; the
// tests in server/cmd/jobctl run the same calls against one.)
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", client.WithToken("secret"), client.WithNamespace("billing"))
	if err != nil {
		log.Fatal(err)
	}
	ji, err := c.ScheduleJob(ctx, "invoice",
		client.WithArguments("order-42", 1999),
		client.WithScheduleAfter(time.Minute),
		client.WithMaxRetries(5),
		client.WithIdempotencyKey("order-42"), // safe to repeat after a timeout
	)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("scheduled", ji.ID(), ji.State())

	page, err := c.ListInstances(ctx, client.NewQuery(
		client.WithQueryKind("invoice"),
		client.WithQueryState(job.Terminated, job.TimedOut),
		client.WithQuerySince(time.Now().Add(-24*time.Hour)),
	))
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range page.Items {
		fmt.Println("failed:", in.ID(), in.Error())
	}

	if _, err := c.GetInstance(ctx, "0194c6a0-0000-7000-8000-000000000000"); errors.Is(err, job.ErrNotFound) {
		fmt.Println("no such instance; code", client.CodeOf(err))
	}

	for ev, err := range c.Watch(ctx, client.WithEventKinds("invoice")) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.GetInstanceId(), ev.GetState())
	}
}
