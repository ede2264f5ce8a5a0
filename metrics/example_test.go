package metrics_test

import (
	"context"
	"fmt"
	"log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
)

// An embedded user registers a Collector for their own Manager on their
// own registry.
func Example() {
	col, err := metrics.New()
	if err != nil {
		log.Fatal(err)
	}
	mgr, err := job.NewManager(job.WithObserver(col), job.WithLogger(quiet))
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(col) // serve it with promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	hello, err := job.NewJob(job.WithKind("hello"), job.WithExecutor(func(name string) string { return "hello " + name }))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := mgr.RegisterJob(hello); err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer mgr.Stop(ctx)
	for _, name := range []string{"ann", "bob"} {
		if _, err := mgr.ScheduleJob(ctx, "hello", job.WithArguments(name)); err != nil {
			log.Fatal(err)
		}
	}
	if err := mgr.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "jobkit_completed_total" || f.GetName() == "jobkit_executed_total" {
			for _, m := range f.GetMetric() {
				fmt.Printf("%s{kind=%q} %v\n", f.GetName(), m.GetLabel()[0].GetValue(), m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// jobkit_completed_total{kind="hello"} 2
	// jobkit_executed_total{kind="hello"} 2
}
