package job_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

type reqKey struct{}

// recorder is middleware that names itself in a shared log, carries the
// scheduling ctx's request ID as metadata, and gives each attempt's ctx
// the request ID read back from the metadata.
type recorder struct {
	name string
	mu   *sync.Mutex
	log  *[]string
	seen *[]map[string]string // the metadata each Run saw
	errs *[]error             // what next returned to each Run
}

func (r recorder) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, r.name+" "+s)
}

func (r recorder) Schedule(ctx context.Context, info *job.ScheduleInfo, next func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
	r.note("schedule " + info.Kind)
	if id, ok := ctx.Value(reqKey{}).(string); ok {
		info.Metadata[r.name+"-req"] = id
	}
	inst, err := next(ctx)
	r.note("scheduled")
	return inst, err
}

func (r recorder) Run(ctx context.Context, inst job.Instance, next func(context.Context) error) error {
	r.note(fmt.Sprintf("run %d", inst.Info().Attempt))
	r.mu.Lock()
	*r.seen = append(*r.seen, inst.Info().Metadata)
	r.mu.Unlock()
	err := next(context.WithValue(ctx, reqKey{}, inst.Info().Metadata[r.name+"-req"]))
	r.mu.Lock()
	*r.errs = append(*r.errs, err)
	r.mu.Unlock()
	r.note("ran")
	return err
}

// TestMiddlewareCarriesMetadata checks that Schedule middleware adds
// metadata from the scheduling ctx, that it is stored with WithMetadata's
// pairs and handed to every attempt, that Run middleware gives the
// executor its ctx, and the order in which middleware is called.
func TestMiddlewareCarriesMetadata(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var log []string
	var seen []map[string]string
	var errs []error
	outer := recorder{name: "outer", mu: &mu, log: &log, seen: &seen, errs: &errs}
	inner := recorder{name: "inner", mu: &mu, log: &log, seen: new([]map[string]string), errs: new([]error)}
	boom := errors.New("boom")
	var gotReq []any
	j := mustJob(t, job.WithKind("mw"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
		job.WithExecutor(func(ctx context.Context, ji job.Instance) error {
			mu.Lock()
			gotReq = append(gotReq, ctx.Value(reqKey{}))
			mu.Unlock()
			if ji.Info().Attempt == 1 {
				return boom
			}
			return nil
		}))
	m := newManager(t, job.WithMiddleware(outer), job.WithMiddleware(inner))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(t.Context(), reqKey{}, "req-42")
	inst, err := m.ScheduleJob(ctx, "mw", job.WithMetadata("tenant", "acme"), job.WithMetadata("tenant", "acme2"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenant": "acme2", "outer-req": "req-42", "inner-req": "req-42"}
	if got := inst.Metadata; !maps.Equal(got, want) {
		t.Fatalf("ScheduleJob's instance has Metadata %v, want %v", got, want)
	}
	inst.Metadata["tenant"] = "changed" // a copy
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "completion", func() bool {
		got, err := m.GetInstance(t.Context(), inst.ID)
		return err == nil && got.State == job.Completed
	})
	got, err := m.GetInstance(t.Context(), inst.ID)
	if err != nil || !maps.Equal(got.Metadata, want) {
		t.Fatalf("GetInstance: Metadata %v, %v; want %v", got.Metadata, err, want)
	}
	mu.Lock()
	defer mu.Unlock()
	wantLog := []string{
		"outer schedule mw", "inner schedule mw", "inner scheduled", "outer scheduled",
		"outer run 1", "inner run 1", "inner ran", "outer ran",
		"outer run 2", "inner run 2", "inner ran", "outer ran",
	}
	if strings.Join(log, "|") != strings.Join(wantLog, "|") {
		t.Errorf("middleware calls:\n%v\nwant\n%v", log, wantLog)
	}
	if len(seen) != 2 || !maps.Equal(seen[0], want) || !maps.Equal(seen[1], want) {
		t.Errorf("Run saw metadata %v, want %v on both attempts", seen, want)
	}
	if len(errs) != 2 || !errors.Is(errs[0], boom) || errs[1] != nil {
		t.Errorf("next returned %v to Run, want boom then nil", errs)
	}
	if len(gotReq) != 2 || gotReq[0] != "req-42" || gotReq[1] != "req-42" {
		t.Errorf("the executor's ctx carried %v, want req-42 on both attempts", gotReq)
	}
}

// funcMiddleware adapts funcs to job.Middleware.
type funcMiddleware struct {
	job.MiddlewareDefaults
	schedule func(ctx context.Context, info *job.ScheduleInfo, next func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error)
	run      func(ctx context.Context, inst job.Instance, next func(context.Context) error) error
}

func (f funcMiddleware) Schedule(ctx context.Context, info *job.ScheduleInfo, next func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
	if f.schedule == nil {
		return f.MiddlewareDefaults.Schedule(ctx, info, next)
	}
	return f.schedule(ctx, info, next)
}

func (f funcMiddleware) Run(ctx context.Context, inst job.Instance, next func(context.Context) error) error {
	if f.run == nil {
		return f.MiddlewareDefaults.Run(ctx, inst, next)
	}
	return f.run(ctx, inst, next)
}

// TestMiddlewareScheduleErrors checks bad metadata and middleware that
// fails, skips next or panics: ScheduleJob fails and nothing is stored.
func TestMiddlewareScheduleErrors(t *testing.T) {
	t.Parallel()
	if _, err := job.NewManager(job.WithMiddleware(nil)); !errors.Is(err, job.ErrInvalidOption) {
		t.Fatalf("WithMiddleware(nil): %v, want ErrInvalidOption", err)
	}
	denied := errors.New("denied")
	big := funcMiddleware{schedule: func(ctx context.Context, info *job.ScheduleInfo, next func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
		info.Metadata["big"] = strings.Repeat("x", store.MaxMetadataBytes)
		return next(ctx)
	}}
	fail := funcMiddleware{schedule: func(context.Context, *job.ScheduleInfo, func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
		return nil, denied
	}}
	skip := funcMiddleware{schedule: func(context.Context, *job.ScheduleInfo, func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
		return nil, nil
	}}
	panics := funcMiddleware{schedule: func(context.Context, *job.ScheduleInfo, func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
		panic("oops")
	}}
	many := make([]job.ScheduleOption, store.MaxMetadataPairs+1)
	for i := range many {
		many[i] = job.WithMetadata(fmt.Sprint("k", i), "v")
	}
	for _, tc := range []struct {
		name string
		mw   []job.Middleware
		opts []job.ScheduleOption
		want error
	}{
		{"empty key", nil, []job.ScheduleOption{job.WithMetadata("", "v")}, job.ErrInvalidOption},
		{"too many pairs", nil, many, job.ErrInvalidOption},
		{"middleware adds too much", []job.Middleware{big}, nil, job.ErrInvalidOption},
		{"middleware fails", []job.Middleware{fail}, nil, denied},
		{"middleware skips next", []job.Middleware{skip}, nil, job.ErrInvalidOption},
		{"middleware panics", []job.Middleware{panics}, nil, job.ErrPanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []job.ManagerOption{}
			if tc.mw != nil {
				opts = append(opts, job.WithMiddleware(tc.mw...))
			}
			m := newManager(t, opts...)
			if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
				t.Fatal(err)
			}
			inst, err := m.ScheduleJob(t.Context(), "k", tc.opts...)
			if !errors.Is(err, tc.want) || inst != nil {
				t.Fatalf("ScheduleJob = %v, %v; want nil and an error wrapping %v", inst, err, tc.want)
			}
			if got, err := m.LookupInstances(t.Context(), job.NewQuery()); err != nil || len(got) != 0 {
				t.Fatalf("LookupInstances after a failed ScheduleJob: %d instances, %v; want none", len(got), err)
			}
		})
	}
}

// TestMiddlewareRunOutcome checks that what Run returns is the attempt's
// outcome, that a timeout reaches it as ErrTimeout, and that a panic or a
// skipped next fails the attempt.
func TestMiddlewareRunOutcome(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]error{} // kind: what next returned
	var ran []string          // kinds whose executor ran
	mw := funcMiddleware{run: func(ctx context.Context, inst job.Instance, next func(context.Context) error) error {
		switch inst.Info().Kind {
		case "panic":
			panic("oops")
		case "skip":
			return nil
		}
		err := next(ctx)
		mu.Lock()
		got[inst.Info().Kind] = err
		mu.Unlock()
		if inst.Info().Kind == "swallow" {
			return nil
		}
		return err
	}}
	m := newManager(t, job.WithMiddleware(mw))
	exec := func(ctx context.Context, ji job.Instance) error {
		mu.Lock()
		ran = append(ran, ji.Info().Kind)
		mu.Unlock()
		switch ji.Info().Kind {
		case "swallow":
			return errors.New("swallowed")
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	for _, k := range []string{"swallow", "timeout", "panic", "skip"} {
		if err := m.RegisterJob(mustJob(t, job.WithKind(k), job.WithMaxRetries(0), job.WithTimeout(50*time.Millisecond), job.WithExecutor(exec))); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]string{}
	for _, k := range []string{"swallow", "timeout", "panic", "skip"} {
		inst, err := m.ScheduleJob(t.Context(), k)
		if err != nil {
			t.Fatal(err)
		}
		ids[k] = inst.ID
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	final := func(k string) *job.InstanceInfo {
		var inst *job.InstanceInfo
		waitFor(t, k+" final", func() bool {
			var err error
			inst, err = m.GetInstance(t.Context(), ids[k])
			return err == nil && inst.State.Final()
		})
		return inst
	}
	if inst := final("swallow"); inst.State != job.Completed {
		t.Errorf("swallow: %v (%v), want Completed: Run returned nil", inst.State, inst.Error)
	}
	if inst := final("timeout"); inst.State != job.TimedOut {
		t.Errorf("timeout: %v (%v), want TimedOut", inst.State, inst.Error)
	}
	if inst := final("panic"); inst.State != job.Terminated || !strings.Contains(inst.Error, "panicked in Run") {
		t.Errorf("panic: %v (%v), want Terminated with the panic", inst.State, inst.Error)
	}
	if inst := final("skip"); inst.State != job.Terminated || !strings.Contains(inst.Error, "without calling next") {
		t.Errorf("skip: %v (%v), want Terminated: Run skipped next without an error", inst.State, inst.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(got["timeout"], job.ErrTimeout) {
		t.Errorf("next returned %v to Run on a timeout, want ErrTimeout", got["timeout"])
	}
	if got["swallow"] == nil || got["swallow"].Error() != "swallowed" {
		t.Errorf("next returned %v to Run, want the executor's error", got["swallow"])
	}
	if strings.Join(ran, ",") != "swallow,timeout" && strings.Join(ran, ",") != "timeout,swallow" {
		t.Errorf("executors ran for %v, want swallow and timeout only", ran)
	}
}

// TestMiddlewareRunNextTwice checks that a Run middleware calling next
// twice runs the executor once and fails the attempt.
func TestMiddlewareRunNextTwice(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := 0
	twice := funcMiddleware{run: func(ctx context.Context, _ job.Instance, next func(context.Context) error) error {
		if err := next(ctx); err != nil {
			return err
		}
		return next(ctx)
	}}
	m := newManager(t, job.WithMiddleware(twice))
	if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithMaxRetries(0), job.WithExecutor(func() {
		mu.Lock()
		runs++
		mu.Unlock()
	}))); err != nil {
		t.Fatal(err)
	}
	inst, err := m.ScheduleJob(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got *job.InstanceInfo
	waitFor(t, "a final state", func() bool {
		got, err = m.GetInstance(t.Context(), inst.ID)
		return err == nil && got.State.Final()
	})
	if got.State != job.Terminated || !strings.Contains(got.Error, "called next twice") {
		t.Errorf("instance %v (%v), want Terminated: next was called twice", got.State, got.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 {
		t.Errorf("the executor ran %d times, want once", runs)
	}
}
