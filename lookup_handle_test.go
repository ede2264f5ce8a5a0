package job_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// TestLookupCannotWriteIntoCompletedInstance looks a completed instance up
// every way a caller can and does everything the returned data allows
// (read, decode, copy, change, query with it): the instance's logs and
// progress must stay what its executor wrote. Before lookups returned
// data, the Instance they returned could call Infof and wrote into the
// completed instance's logs.
func TestLookupCannotWriteIntoCompletedInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t)
	typed, err := job.Register(m, "logged", func(ctx context.Context, n int) (int, error) { return n + 1, nil })
	if err != nil {
		t.Fatal(err)
	}
	err = m.RegisterJob(mustJob(t, job.WithKind("logged-too"),
		job.WithExecutor(func(ji job.Instance, n int) int {
			ji.Infof("from the executor")
			ji.SetProgress(0.5, "half")
			return n + 1
		})))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "logged-too", job.WithArguments(1))
	if err != nil {
		t.Fatal(err)
	}
	ti, err := typed.Schedule(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	id := ji.ID
	one, err := m.GetInstance(ctx, id)
	if err != nil || one.State != job.Completed {
		t.Fatalf("lookup: %v, state %v", err, one.State)
	}
	q := job.NewQuery(job.WithQueryKind("logged-too"))
	some, err := m.LookupInstances(ctx, q)
	if err != nil || len(some) != 1 {
		t.Fatalf("lookup instances: %d, %v", len(some), err)
	}
	page, err := m.ListInstances(ctx, q)
	if err != nil || len(page.Items) != 1 {
		t.Fatalf("page instances: %+v, %v", page, err)
	}
	found, err := m.SearchInstances(ctx, q, job.SearchParams{})
	if err != nil || len(found.Items) != 1 {
		t.Fatalf("search instances: %+v, %v", found, err)
	}
	typedOne, err := typed.GetInstance(ctx, ti.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []*job.InstanceInfo{ji, one, some[0], page.Items[0], found.Items[0], typedOne.InstanceInfo} {
		var n int
		_ = got.ArgumentsInto(&n)
		_ = got.ResultsInto(&n)
		_, _ = got.Arguments(), got.Results()
		c := got.Clone()
		c.State, c.Error, c.Attempt = job.Terminated, "written from a lookup", 9
		got.Error = "written from a lookup"
		_ = got.String()
		if _, err := m.LookupInstanceHistory(ctx, job.NewQuery(job.WithQueryInstance(got))); err != nil {
			t.Fatal(err)
		}
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
	if logs, err := m.LookupInstanceLogs(ctx, job.NewQuery(job.WithQueryInstanceID(ti.ID))); err != nil || len(logs) != 0 {
		t.Errorf("logs of the typed instance %d, %v; want none", len(logs), err)
	}
	prog, err := m.GetProgress(ctx, id)
	if p := prog[id]; err != nil || p.Fraction != 0.5 || p.Message != "half" {
		t.Errorf("progress of the completed instance %+v, %v; want the executor's 0.5 half", p, err)
	}
	again, err := m.GetInstance(ctx, id)
	if err != nil || again.State != job.Completed || again.Error != "" || again.Attempt != 1 {
		t.Errorf("stored instance after the lookups: %+v, %v; want Completed in attempt 1 with no error", again, err)
	}
}
