package jobtest

// go-job parity on every store: behaviours go-job documents, written as
// scenarios from its documentation (the root package's
// gojob_parity_test.go has those decided before the store is reached).

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
)

func init() {
	register("GoJobTerminateVerdict", testGoJobTerminateVerdict)
	register("GoJobConversionWhereTheyRun", testGoJobConversionWhereTheyRun)
}

// verdictLog records the errors a terminate verdict was called with, by
// instance.
type verdictLog struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (l *verdictLog) add(ji job.Instance, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.errs == nil {
		l.errs = map[string][]error{}
	}
	l.errs[ji.Info().ID] = append(l.errs[ji.Info().ID], err)
}

func (l *verdictLog) get(id string) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs[id]...)
}

// go-job: "The WithTerminateProcessor function is called whenever a job
// instance ends with an error. You can return nil to mark the job as
// successful, return the original error to keep it as failed, or return
// a new error to transform the result", with its example of a deadline
// that is not retried. jobkit's WithTerminateVerdict.
func testGoJobTerminateVerdict(t *testing.T, e *env) {
	var log verdictLog
	var terminated sync.Map // instance ID -> the terminate processor's error
	verdict := job.WithTerminateVerdict(func(ji job.Instance, err error) error {
		log.add(ji, err)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			ji.Infof("job (%s) ran out of time, which is fine: %v", ji.Info().Kind, err)
			return nil
		case strings.Contains(err.Error(), "soft"):
			return nil
		case strings.Contains(err.Error(), "fatal"):
			return job.Permanent(errors.New("transformed: " + err.Error()))
		}
		return err
	})
	onTerminate := job.WithTerminateProcessor(func(ji job.Instance, err error) { terminated.Store(ji.Info().ID, err) })
	backoff := job.WithBackoff(job.ConstantBackoff(time.Millisecond))
	jobs := []*job.Job{
		// Ignores nothing: returns ctx.Err() at its deadline, as go-job's
		// example executor does.
		mustJob(t, job.WithKind("v-deadline"), verdict, job.WithTimeout(30*time.Millisecond), job.WithMaxRetries(3),
			job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })),
		// Returns nil after its deadline: still judged a timeout, and
		// the verdict's nil completes it.
		mustJob(t, job.WithKind("v-late-nil"), verdict, job.WithTimeout(30*time.Millisecond), job.WithMaxRetries(0),
			job.WithExecutor(func(ctx context.Context) { <-ctx.Done() })),
		mustJob(t, job.WithKind("v-soft"), verdict, job.WithMaxRetries(3),
			job.WithExecutor(func() (int, error) { return 7, errors.New("soft failure") })),
		mustJob(t, job.WithKind("v-fatal"), verdict, onTerminate, job.WithMaxRetries(3),
			job.WithExecutor(func() error { return errors.New("fatal failure") })),
		mustJob(t, job.WithKind("v-keep"), verdict, onTerminate, job.WithMaxRetries(2), backoff,
			job.WithExecutor(func() error { return errors.New("hard failure") })),
		mustJob(t, job.WithKind("v-ok"), verdict, job.WithExecutor(func() int { return 1 })),
	}
	m := e.manager(t, jobs)
	start(t, m)
	ids := map[string]string{}
	for _, j := range jobs {
		ids[j.Kind()] = schedule(t, m, j.Kind()).ID
	}

	for _, kind := range []string{"v-deadline", "v-late-nil"} {
		got := waitState(t, m, ids[kind], job.Completed, deadline)
		errs := log.get(got.ID)
		if got.Attempt != 1 || len(errs) != 1 || !errors.Is(errs[0], job.ErrTimeout) || !errors.Is(errs[0], context.DeadlineExceeded) {
			t.Errorf("%s: attempt %d, verdict called with %v; want one call at attempt 1 with an error matching ErrTimeout and context.DeadlineExceeded", kind, got.Attempt, errs)
		}
	}
	got := waitState(t, m, ids["v-soft"], job.Completed, deadline)
	if r := resultsJSON(t, got); r != "[7]" || got.Attempt != 1 {
		t.Errorf("v-soft: results %s at attempt %d; want [7] at attempt 1 (the executor's results, kept)", r, got.Attempt)
	}

	got = waitState(t, m, ids["v-fatal"], job.Terminated, deadline)
	if got.Attempt != 1 || got.Err() == nil || got.Err().Error() != "transformed: fatal failure" {
		t.Errorf("v-fatal: attempt %d, error %v; want attempt 1 (Permanent), \"transformed: fatal failure\"", got.Attempt, got.Err())
	}
	got = waitState(t, m, ids["v-keep"], job.Terminated, deadline)
	if errs := log.get(got.ID); got.Attempt != 3 || len(errs) != 3 {
		t.Errorf("v-keep: attempt %d, verdict called %d times; want 3 and 3 (once per failed attempt)", got.Attempt, len(errs))
	}
	if got.Err() == nil || got.Err().Error() != "hard failure" {
		t.Errorf("v-keep: error %v, want \"hard failure\"", got.Err())
	}
	waitState(t, m, ids["v-ok"], job.Completed, deadline)
	if errs := log.get(ids["v-ok"]); len(errs) != 0 {
		t.Errorf("v-ok: verdict called with %v for an attempt that did not fail", errs)
	}
	// The terminate processor reports the final error, the verdict's.
	waitFor(t, deadline, "terminate processors", func() bool {
		_, a := terminated.Load(ids["v-fatal"])
		_, b := terminated.Load(ids["v-keep"])
		return a && b
	})
	if err, _ := terminated.Load(ids["v-fatal"]); err == nil || err.(error).Error() != "transformed: fatal failure" {
		t.Errorf("v-fatal's terminate processor got %v, want the verdict's error", err)
	}
	// The history says what the verdict decided.
	if st := states(t, m, ids["v-deadline"]); st[len(st)-1] != job.Completed {
		t.Errorf("v-deadline history %v, want it to end completed", st)
	}
}

// A producer that knows a kind only by its definition cannot convert
// arguments: it stores them as given ("1", "2"), and the manager that
// runs the instance converts them with its job's option, which its
// published definition carries; jobctl and HTTP clients schedule through
// such a producer.
func testGoJobConversionWhereTheyRun(t *testing.T, e *env) {
	ctx := context.Background()
	sum := mustJob(t, job.WithKind("conv-sum"), job.WithArgumentConversion(), job.WithMaxRetries(3),
		job.WithExecutor(func(a, b int) int { return a + b }))
	strict := mustJob(t, job.WithKind("conv-strict"), job.WithMaxRetries(3),
		job.WithExecutor(func(a, b int) int { return a + b }))
	worker := e.manager(t, []*job.Job{sum, strict}, job.WithPublishDefinitions())
	producer := e.manager(t, nil, job.WithWorkers(0))
	start(t, worker)
	start(t, producer)
	d, err := producer.Admin().GetDefinition(ctx, "conv-sum")
	if err != nil || !d.ConvertArguments {
		t.Fatalf("published definition of conv-sum: %+v, %v; want ConvertArguments", d, err)
	}
	good := schedule(t, producer, "conv-sum", job.WithArguments("1", "2"))
	bad := schedule(t, producer, "conv-sum", job.WithArguments("one", "2"))
	refused := schedule(t, producer, "conv-strict", job.WithArguments("1", "2"))
	if r := resultsJSON(t, waitState(t, producer, good.ID, job.Completed, deadline)); r != "[3]" {
		t.Errorf("conv-sum(\"1\", \"2\"): results %s, want [3]", r)
	}
	for _, c := range []struct {
		ji   *job.InstanceInfo
		want string
	}{{bad, `argument 1 ("one") does not convert`}, {refused, "stored argument 1 cannot be decoded into int"}} {
		got := waitState(t, producer, c.ji.ID, job.Terminated, deadline)
		if got.Attempt != 1 || got.Err() == nil || !strings.Contains(got.Err().Error(), c.want) {
			t.Errorf("%s: attempt %d, error %v; want attempt 1 and an error saying %q", got.Kind, got.Attempt, got.Err(), c.want)
		}
	}
}
