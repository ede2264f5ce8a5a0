package redistest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	jobotel "github.com/jobkit/job/otel"
	"github.com/jobkit/job/store/redisstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// process is one "process" of a test: its own TracerProvider recording
// spans in memory, its own Redis client, and a manager on the shared
// store.
type process struct {
	rec *tracetest.SpanRecorder
	tp  *sdktrace.TracerProvider
	mgr *job.Manager
}

func newProcess(t *testing.T, addr, ns string, opts ...jobotel.Option) *process {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := redis.NewClient(&redis.Options{Addr: addr})
	s, err := redisstore.New(c, redisstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := job.NewManager(job.WithStore(s), job.WithQueues(job.DefaultQueue, "mail"),
		jobotel.New(append([]jobotel.Option{jobotel.WithTracerProvider(tp)}, opts...)...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := mgr.Stop(ctx); err != nil && !errors.Is(err, job.ErrNotRunning) {
			t.Errorf("Stop: %v", err)
		}
		c.Close()
		_ = tp.Shutdown(ctx)
	})
	return &process{rec: rec, tp: tp, mgr: mgr}
}

// spans returns p's ended spans named name.
func (p *process) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until p has ended n spans named name, and returns them.
func (p *process) waitSpans(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s := p.spans(name); len(s) >= n {
			if len(s) > n {
				t.Fatalf("%d spans named %q, want %d", len(s), name, n)
			}
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d spans named %q (have %d)", n, name, len(p.spans(name)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func namespace(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "jobotel_" + hex.EncodeToString(b[:])
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkAttrs fails unless s carries the instance's attributes.
func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, kind, queue, id string, attempt int) {
	t.Helper()
	a := attrs(s)
	if a[jobotel.KindKey].AsString() != kind || a[jobotel.QueueKey].AsString() != queue || a[jobotel.InstanceIDKey].AsString() != id {
		t.Errorf("span %s: attributes %v, want kind %s, queue %s, instance %s", s.Name(), s.Attributes(), kind, queue, id)
	}
	if attempt > 0 && a[jobotel.AttemptKey].AsInt64() != int64(attempt) {
		t.Errorf("span %s: attempt %v, want %d", s.Name(), a[jobotel.AttemptKey], attempt)
	}
}

// flaky is an executor that fails its first attempt, and starts a span of
// its own from its ctx on each.
func flaky(tp func() trace.TracerProvider) func(ctx context.Context, ji job.Instance) error {
	return func(ctx context.Context, ji job.Instance) error {
		_, s := tp().Tracer("executor").Start(ctx, "inside")
		defer s.End()
		if ji.Info().Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
}

// TestTraceAcrossManagers schedules in one manager under a request span
// and runs in another on the same Redis store, each with its own
// TracerProvider (two processes): the run spans, the wait spans and the
// executor's own span are in the request's trace, children of the
// producer span, found through the instance's metadata.
func TestTraceAcrossManagers(t *testing.T) {
	t.Parallel()
	addr, ns := testserver.Redis(t), namespace(t)
	producer := newProcess(t, addr, ns)
	consumer := newProcess(t, addr, ns)
	newJob := func(p *process) *job.Job {
		j, err := job.NewJob(job.WithKind("send"), job.WithQueue("mail"), job.WithMaxRetries(1),
			job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(flaky(func() trace.TracerProvider { return p.tp })))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	for _, p := range []*process{producer, consumer} {
		if err := p.mgr.RegisterJob(newJob(p)); err != nil {
			t.Fatal(err)
		}
	}

	ctx, req := producer.tp.Tracer("test").Start(t.Context(), "request")
	inst, err := producer.mgr.ScheduleJob(ctx, "send")
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	if md := inst.Metadata; !strings.HasPrefix(md["traceparent"], "00-"+req.SpanContext().TraceID().String()+"-") {
		t.Fatalf("instance metadata %v, want a traceparent of the request's trace %s", md, req.SpanContext().TraceID())
	}
	if err := consumer.mgr.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	runs := consumer.waitSpans(t, "run send", 2)
	waits := consumer.waitSpans(t, "wait send", 2)
	insides := consumer.waitSpans(t, "inside", 2)

	// The producer side: request -> schedule.
	sched := producer.waitSpans(t, "schedule send", 1)[0]
	traceID := req.SpanContext().TraceID()
	if sched.SpanKind() != trace.SpanKindProducer || sched.Parent().SpanID() != req.SpanContext().SpanID() || sched.SpanContext().TraceID() != traceID {
		t.Fatalf("schedule span: kind %v, parent %v, trace %v; want a producer span, child of the request", sched.SpanKind(), sched.Parent().SpanID(), sched.SpanContext().TraceID())
	}
	checkAttrs(t, sched, "send", "mail", inst.ID, 0)
	if len(producer.spans("run send")) != 0 {
		t.Fatal("the producer ran the job; it was never started")
	}

	// The consumer side: schedule -> wait, run -> inside, per attempt.
	for i, run := range runs {
		attempt := i + 1
		if run.SpanContext().TraceID() != traceID || run.Parent().SpanID() != sched.SpanContext().SpanID() || !run.Parent().IsRemote() {
			t.Errorf("run %d: trace %v, parent %v (remote %v); want the request's trace %v, child of the schedule span %v",
				attempt, run.SpanContext().TraceID(), run.Parent().SpanID(), run.Parent().IsRemote(), traceID, sched.SpanContext().SpanID())
		}
		if run.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("run %d: kind %v, want consumer", attempt, run.SpanKind())
		}
		checkAttrs(t, run, "send", "mail", inst.ID, attempt)
		w := waits[i]
		if w.Parent().SpanID() != sched.SpanContext().SpanID() || w.SpanContext().TraceID() != traceID {
			t.Errorf("wait %d: parent %v, want the schedule span", attempt, w.Parent().SpanID())
		}
		checkAttrs(t, w, "send", "mail", inst.ID, attempt)
		if w.EndTime().After(run.StartTime()) || w.StartTime().After(w.EndTime()) || w.StartTime().Before(sched.StartTime().Add(-time.Second)) {
			t.Errorf("wait %d: %v to %v; want it to end when run %d starts (%v), and start after schedule (%v)",
				attempt, w.StartTime(), w.EndTime(), attempt, run.StartTime(), sched.StartTime())
		}
		in := insides[i]
		if in.Parent().SpanID() != run.SpanContext().SpanID() || in.SpanContext().TraceID() != traceID {
			t.Errorf("the executor's span of attempt %d: parent %v in trace %v, want the run span %v in trace %v", attempt, in.Parent().SpanID(), in.SpanContext().TraceID(), run.SpanContext().SpanID(), traceID)
		}
	}
	if runs[0].Status().Code != codes.Error || !strings.Contains(runs[0].Status().Description, "first attempt fails") || len(runs[0].Events()) == 0 {
		t.Errorf("run 1: status %+v, events %v; want an error with the executor's message", runs[0].Status(), runs[0].Events())
	}
	if runs[1].Status().Code == codes.Error {
		t.Errorf("run 2: status %+v, want no error", runs[1].Status())
	}
}

// TestLinkedRuns checks WithLinkedRuns: each run is the root of its own
// trace, linked to the producer span, with its wait span as its child.
func TestLinkedRuns(t *testing.T) {
	t.Parallel()
	addr, ns := testserver.Redis(t), namespace(t)
	p := newProcess(t, addr, ns, jobotel.WithLinkedRuns())
	var mu sync.Mutex
	var ran []trace.SpanContext
	j, err := job.NewJob(job.WithKind("report"), job.WithExecutor(func(ctx context.Context) {
		mu.Lock()
		ran = append(ran, trace.SpanContextFromContext(ctx))
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.mgr.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx, req := p.tp.Tracer("test").Start(t.Context(), "request")
	inst, err := p.mgr.ScheduleJob(ctx, "report")
	req.End()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.mgr.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	run := p.waitSpans(t, "run report", 1)[0]
	sched := p.waitSpans(t, "schedule report", 1)[0]
	wait := p.waitSpans(t, "wait report", 1)[0]
	if run.Parent().IsValid() || run.SpanContext().TraceID() == req.SpanContext().TraceID() {
		t.Fatalf("linked run: parent %v, trace %v; want a root span of a new trace", run.Parent(), run.SpanContext().TraceID())
	}
	links := run.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != sched.SpanContext().SpanID() || links[0].SpanContext.TraceID() != req.SpanContext().TraceID() {
		t.Fatalf("linked run: links %+v, want one to the schedule span %v", links, sched.SpanContext())
	}
	if wait.Parent().SpanID() != run.SpanContext().SpanID() {
		t.Errorf("linked run: wait span's parent %v, want the run span %v", wait.Parent().SpanID(), run.SpanContext().SpanID())
	}
	checkAttrs(t, run, "report", "default", inst.ID, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0].SpanID() != run.SpanContext().SpanID() {
		t.Errorf("the executor's ctx carried span %v, want the run span %v", ran, run.SpanContext().SpanID())
	}
}

// TestScheduleErrorsAndPropagator checks that a schedule span records a
// duplicate unique key as an error, that an instance scheduled without a
// span in its ctx still gets one trace (schedule, then run), and that a
// configured propagator carries baggage.
func TestScheduleErrorsAndPropagator(t *testing.T) {
	t.Parallel()
	addr, ns := testserver.Redis(t), namespace(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	p := newProcess(t, addr, ns, jobotel.WithPropagator(prop))
	j, err := job.NewJob(job.WithKind("k"), job.WithExecutor(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.mgr.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	bag, err := baggage.Parse("tenant=acme")
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.mgr.ScheduleJob(baggage.ContextWithBaggage(ctx, bag), "k", job.WithUniqueKey("u", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if md := first.Metadata; md["baggage"] != "tenant=acme" || md["traceparent"] == "" {
		t.Fatalf("metadata %v, want traceparent and baggage tenant=acme", md)
	}
	if _, err := p.mgr.ScheduleJob(ctx, "k", job.WithUniqueKey("u", time.Hour)); !errors.Is(err, job.ErrDuplicate) {
		t.Fatalf("second ScheduleJob: %v, want ErrDuplicate", err)
	}
	scheds := p.waitSpans(t, "schedule k", 2)
	if scheds[0].Parent().IsValid() || scheds[0].Status().Code == codes.Error {
		t.Errorf("first schedule span: parent %v, status %+v; want a root span without error", scheds[0].Parent(), scheds[0].Status())
	}
	if scheds[1].Status().Code != codes.Error || attrs(scheds[1])["jobkit.job.holder_id"].AsString() != first.ID {
		t.Errorf("duplicate schedule span: status %+v, attributes %v; want an error naming holder %s", scheds[1].Status(), scheds[1].Attributes(), first.ID)
	}
	if err := p.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	run := p.waitSpans(t, "run k", 1)[0]
	if run.Parent().SpanID() != scheds[0].SpanContext().SpanID() || run.SpanContext().TraceID() != scheds[0].SpanContext().TraceID() {
		t.Errorf("run: parent %v, want the first schedule span %v", run.Parent().SpanID(), scheds[0].SpanContext().SpanID())
	}
}
