package job_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// TestLookupCannotLogIntoCompletedInstance looks a completed instance up
// every way a caller can and logs through what comes back: the instance's
// logs must stay the ones its executor wrote.
func TestLookupCannotLogIntoCompletedInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t)
	err := m.RegisterJob(mustJob(t, job.WithKind("logged"),
		job.WithExecutor(func(ji job.Instance) { ji.Infof("from the executor") })))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "logged")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	id := ji.ID()
	one, err := m.LookupInstance(ctx, id)
	if err != nil || one.State() != job.Completed {
		t.Fatalf("lookup: %v, state %v", err, one.State())
	}
	some, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("logged")))
	if err != nil || len(some) != 1 {
		t.Fatalf("lookup instances: %d, %v", len(some), err)
	}
	page, err := m.PageInstances(ctx, job.NewQuery(job.WithQueryKind("logged")))
	if err != nil || len(page.Instances) != 1 {
		t.Fatalf("page instances: %+v, %v", page, err)
	}
	found, err := m.SearchInstances(ctx, job.NewQuery(job.WithQueryKind("logged")), job.SearchParams{})
	if err != nil || len(found.Instances) != 1 {
		t.Fatalf("search instances: %+v, %v", found, err)
	}
	for _, got := range []job.Instance{ji, one, some[0], page.Instances[0], found.Instances[0]} {
		got.Infof("written from a lookup")
		got.Errorf("written from a lookup")
		got.SetProgress(1, "written from a lookup")
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.Stop(stop); err != nil {
		t.Fatal(err)
	}
	logs, err := m.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstanceID(id)))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, l := range logs {
		msgs = append(msgs, l.Message)
	}
	if len(msgs) != 1 || msgs[0] != "from the executor" {
		t.Errorf("logs of the completed instance %q; want only [from the executor]", msgs)
	}
}
