package job_test

import (
	"context"
	"testing"

	"github.com/jobkit/job"
)

// A lookup that sets no limit returns at most DefaultLookupLimit results,
// however many the store holds; an explicit limit is kept.
func TestLookupWithoutLimitIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, job.WithStore(memStore(t)), job.WithWorkers(0))
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "bulk", Queue: "default"}, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < job.DefaultLookupLimit+5; i++ {
		if _, err := m.ScheduleJob(ctx, "bulk", job.WithArguments(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []*job.Query{nil, job.NewQuery(), job.NewQuery(job.WithQueryKind("bulk"))} {
		got, err := m.LookupInstances(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != job.DefaultLookupLimit {
			t.Errorf("LookupInstances(%v) returned %d, want DefaultLookupLimit (%d)", q, len(got), job.DefaultLookupLimit)
		}
	}
	hist, err := m.LookupInstanceHistory(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != job.DefaultLookupLimit {
		t.Errorf("LookupInstanceHistory(nil) returned %d records, want %d", len(hist), job.DefaultLookupLimit)
	}
	got, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryLimit(3)))
	if err != nil || len(got) != 3 {
		t.Errorf("an explicit limit of 3 returned %d (%v)", len(got), err)
	}
}
