package job_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobkit/job"
)

// TestInstanceProgress: an executor reports progress in a tight loop;
// the last report is stored before the outcome, Progress returns it
// inside the executor, and Manager.LookupProgress reads it afterwards.
func TestInstanceProgress(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	var inside job.Progress
	err := m.RegisterJob(mustJob(t, job.WithKind("copy"),
		job.WithExecutor(func(ji job.Instance, files int) error {
			for i := range files {
				ji.SetProgress(float64(i)/float64(files), fmt.Sprintf("%d of %d files", i, files))
			}
			ji.SetProgress(1, "all copied")
			inside = ji.Progress()
			return nil
		})))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ji, err := m.ScheduleJob(ctx, "copy", job.WithArguments(10000))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if inside.Fraction != 1 || inside.Message != "all copied" || inside.Attempt != 1 {
		t.Errorf("Progress() inside the executor = %+v", inside)
	}
	got, err := m.GetProgress(ctx, ji.ID, "no-such-id")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := got[ji.ID]
	if len(got) != 1 || !ok || p.Fraction != 1 || p.Message != "all copied" || p.Attempt != 1 || p.Time.IsZero() {
		t.Fatalf("LookupProgress = %+v, want the last report of attempt 1", got)
	}
}
