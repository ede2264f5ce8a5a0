package job_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jobkit/job"
)

// The deprecated Admin.ListQueueNames answers as before: the queues
// instances were scheduled into, sorted, which ListQueues also lists.
func TestListQueueNamesDeprecatedStillAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, job.WithStore(memStore(t)))
	if err := m.RegisterJob(mustJob(t, job.WithKind("note"), job.WithExecutor(func(string) {}))); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"b", "a", "b"} {
		if _, err := m.ScheduleJob(ctx, "note", job.WithArguments(q), job.WithQueue(q)); err != nil {
			t.Fatal(err)
		}
	}
	names, err := m.Admin().ListQueueNames(ctx)
	if err != nil || !slices.Equal(names, []string{"a", "b"}) {
		t.Fatalf("ListQueueNames = %v, %v; want [a b]", names, err)
	}
	qs, err := m.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, q := range qs {
		listed = append(listed, q.Name)
	}
	if !slices.Equal(listed, names) {
		t.Fatalf("ListQueues names %v, ListQueueNames %v; want the same", listed, names)
	}
}
