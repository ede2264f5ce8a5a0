package job_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"

	"github.com/jobkit/job"
)

type resizeArgs struct {
	Image string
	Width int
}

type resizeResult struct {
	Path  string
	Bytes int64
}

func resize(_ context.Context, a resizeArgs) (resizeResult, error) {
	if a.Width <= 0 {
		return resizeResult{}, job.Permanent(fmt.Errorf("width %d", a.Width))
	}
	return resizeResult{Path: fmt.Sprintf("%s@%d", a.Image, a.Width), Bytes: int64(a.Width) * 1000}, nil
}

func TestTypedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t)
	rj, err := job.Register(m, "resize", resize, job.WithPriority(job.LowPriority))
	if err != nil {
		t.Fatal(err)
	}
	if rj.Kind() != "resize" || rj.Job().Kind() != "resize" {
		t.Errorf("kind %q / %q", rj.Kind(), rj.Job().Kind())
	}
	if _, err := job.Register(m, "other", func(context.Context, int) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}

	ti, err := rj.Schedule(ctx, resizeArgs{Image: "cat.png", Width: 64}, job.WithPriority(job.HighPriority))
	if err != nil {
		t.Fatal(err)
	}
	if ti.Priority != job.HighPriority {
		t.Errorf("priority %d, want the override %d", ti.Priority, job.HighPriority)
	}
	if _, err := ti.Result(); !errors.Is(err, job.ErrInvalidResults) {
		t.Errorf("Result of a scheduled instance: %v, want ErrInvalidResults", err)
	}
	// The reflective path schedules the same job.
	plain, err := m.ScheduleJob(ctx, "resize", job.WithArguments(resizeArgs{Image: "dog.png", Width: 32}))
	if err != nil {
		t.Fatal(err)
	}
	failing, err := rj.Schedule(ctx, resizeArgs{Image: "x.png"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := m.ScheduleJob(ctx, "other", job.WithArguments(7))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	done, err := rj.GetInstance(ctx, ti.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := done.Result(); err != nil || res != (resizeResult{Path: "cat.png@64", Bytes: 64000}) {
		t.Errorf("Result: %+v, %v", res, err)
	}
	if a, err := done.Argument(); err != nil || a != (resizeArgs{Image: "cat.png", Width: 64}) {
		t.Errorf("Argument: %+v, %v", a, err)
	}
	viaPlain, err := rj.GetInstance(ctx, plain.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := viaPlain.Result(); err != nil || res.Path != "dog.png@32" {
		t.Errorf("Result of an instance scheduled with ScheduleJob: %+v, %v", res, err)
	}
	failed, err := rj.GetInstance(ctx, failing.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := failed.Result(); failed.State != job.Terminated || !errors.Is(err, job.ErrInvalidResults) {
		t.Errorf("failed instance: state %v, Result error %v; want Terminated and ErrInvalidResults", failed.State, err)
	}
	if _, err := rj.GetInstance(ctx, other.ID); !errors.Is(err, job.ErrNotFound) || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("GetInstance of another kind's instance: %v; want ErrNotFound naming the kind", err)
	}

	all, err := rj.LookupInstances(ctx, nil)
	if err != nil || len(all) != 3 {
		t.Fatalf("LookupInstances: %d instances, %v; want the 3 of kind resize", len(all), err)
	}
	completed, err := rj.LookupInstances(ctx, job.NewQuery(job.WithQueryState(job.Completed)))
	if err != nil || len(completed) != 2 {
		t.Errorf("LookupInstances(Completed): %d, %v; want 2", len(completed), err)
	}
	if _, err := rj.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("other"))); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("LookupInstances of another kind: %v, want ErrInvalidOption", err)
	}
}

func TestTypedJobMisuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t)
	for name, opts := range map[string][]job.JobOption{
		"WithKind":     {job.WithKind("x")},
		"WithExecutor": {job.WithExecutor(func() {})},
		"bad option":   {job.WithMaxRetries(-7)},
	} {
		if _, err := job.Register(m, "resize", resize, opts...); !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("Register with %s: %v, want ErrInvalidJob", name, err)
		}
	}
	if _, err := job.Register[resizeArgs, resizeResult](m, "resize", nil); !errors.Is(err, job.ErrInvalidJob) {
		t.Errorf("Register with a nil func: %v, want ErrInvalidJob", err)
	}
	if _, err := job.Register(nil, "resize", resize); !errors.Is(err, job.ErrInvalidJob) {
		t.Errorf("Register on a nil manager: %v, want ErrInvalidJob", err)
	}
	rj, err := job.Register(m, "resize", resize)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Register(m, "resize", resize); !errors.Is(err, job.ErrDuplicateKind) {
		t.Errorf("Register twice: %v, want ErrDuplicateKind", err)
	}
	if _, err := rj.Schedule(ctx, resizeArgs{}, job.WithArguments(resizeArgs{Width: 1})); !errors.Is(err, job.ErrInvalidOption) {
		t.Errorf("Schedule with WithArguments: %v, want ErrInvalidOption", err)
	}
	if insts, _ := m.LookupInstances(ctx, nil); len(insts) != 0 {
		t.Errorf("%d instances stored by refused calls", len(insts))
	}
}

// A typed job: the compiler checks the argument Schedule takes and the
// result Result returns.
func ExampleRegister() {
	ctx := context.Background()
	mgr, err := job.NewManager()
	if err != nil {
		log.Fatal(err)
	}
	type email struct{ To, Subject string }
	type sent struct{ ID string }
	mailer, err := job.Register(mgr, "email", func(ctx context.Context, e email) (sent, error) {
		return sent{ID: "msg-" + e.To}, nil
	}, job.WithMaxRetries(5))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		log.Fatal(err)
	}
	ji, err := mailer.Schedule(ctx, email{To: "ada", Subject: "hello"}, job.WithPriority(job.HighPriority))
	if err != nil {
		log.Fatal(err)
	}
	if err := mgr.Wait(ctx); err != nil {
		log.Fatal(err)
	}
	done, err := mailer.GetInstance(ctx, ji.ID)
	if err != nil {
		log.Fatal(err)
	}
	res, err := done.Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.State, res.ID)
	if err := mgr.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: completed msg-ada
}
