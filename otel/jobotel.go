// Package jobotel traces jobkit with OpenTelemetry: a span for each
// ScheduleJob call, and for each attempt a span of its wait in the queue
// and a span of its run, joined to the trace of the request that
// scheduled the instance, across processes.
//
// It is job.Middleware. An embedded user passes New's option to
// job.NewManager, on every manager that schedules or runs jobs:
//
//	mgr, err := job.NewManager(job.WithStore(s), jobotel.New())
//
// How it joins the traces: at schedule, a producer span ("schedule
// <kind>") starts as a child of the span in the scheduling ctx, and the
// configured propagator (W3C Trace Context by default) writes that span's
// context into the instance's metadata (job.InstanceInfo.Metadata:
// "traceparent", "tracestate"), which the store keeps with the instance.
// At each attempt, on whichever manager claims it, the propagator reads
// the metadata back, and the attempt's consumer span ("run <kind>") is a
// child of the producer span, so one trace shows the request, the
// schedule, the wait and every attempt. With WithLinkedRuns, each attempt
// starts a trace of its own that links to the producer span instead (see
// WithLinkedRuns for when that is better). The run span's context is what
// the executor's context.Context carries, so spans the executor starts
// (an HTTP call, a query) are its children.
//
// The package depends on the OpenTelemetry API only (the SDK is for its
// tests). The TracerProvider defaults to otel's global one; the
// propagator defaults to W3C Trace Context, not to otel's global
// propagator, which does nothing unless the program sets one.
package jobotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobkit/job"
)

// ScopeName is the instrumentation scope of the tracer this package
// creates spans with.
const ScopeName = "github.com/jobkit/job/otel"

// Attribute keys the spans carry. Spans also carry messaging.system
// "jobkit" and messaging.operation.type ("send" for schedule, "process"
// for run), after the OpenTelemetry messaging conventions.
const (
	KindKey       = attribute.Key("jobkit.job.kind")
	QueueKey      = attribute.Key("jobkit.job.queue")
	InstanceIDKey = attribute.Key("jobkit.job.instance_id")
	// AttemptKey is the attempt a run or wait span is of: 1 for the first.
	AttemptKey = attribute.Key("jobkit.job.attempt")
	// PriorityKey is the instance's priority.
	PriorityKey = attribute.Key("jobkit.job.priority")
	// RunAtKey is when the instance is due, as an RFC 3339 time, on the
	// schedule span.
	RunAtKey = attribute.Key("jobkit.job.run_at")
	// WaitKey is, on a run span, how long the attempt waited from when it
	// was due (or scheduled, if later) until it started, in seconds.
	WaitKey = attribute.Key("jobkit.job.wait_seconds")
)

var (
	systemAttr  = attribute.String("messaging.system", "jobkit")
	sendAttr    = attribute.String("messaging.operation.type", "send")
	processAttr = attribute.String("messaging.operation.type", "process")
)

// Option configures the middleware New and NewMiddleware return.
type Option func(*config)

type config struct {
	tp     trace.TracerProvider
	prop   propagation.TextMapPropagator
	linked bool
	noWait bool
}

// WithTracerProvider sets where spans go. Defaults to otel's global
// TracerProvider (otel.GetTracerProvider), read once, when the middleware
// is built.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithPropagator sets how a span context is written into an instance's
// metadata and read back. Defaults to W3C Trace Context
// (propagation.TraceContext: "traceparent" and "tracestate"); pass
// propagation.NewCompositeTextMapPropagator(propagation.TraceContext{},
// propagation.Baggage{}) to carry baggage too. Every manager of a cluster
// must use the same one. Its fields count against the instance's
// metadata limits (store.MaxMetadataPairs, store.MaxMetadataBytes); a
// ScheduleJob whose metadata would pass them fails.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// WithLinkedRuns makes each attempt's run span the root of a trace of its
// own, with a link to the producer span, instead of its child. The
// default (a child) puts everything an instance did in the request's
// trace, which is what one wants to see for work that runs soon after the
// request. Linked runs suit instances that run long after the request
// (hours later, or retried for days) or that the request fans out by the
// thousand: the request's trace stays short, and each run is still one
// click away. The wait span is then the run span's child.
func WithLinkedRuns() Option {
	return func(c *config) { c.linked = true }
}

// WithoutWaitSpans leaves out the wait spans; run spans still carry
// WaitKey.
func WithoutWaitSpans() Option {
	return func(c *config) { c.noWait = true }
}

// Middleware is job.Middleware that traces scheduling and each attempt.
// It is safe for concurrent use; one may serve several managers.
type Middleware struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	linked bool
	noWait bool
}

var _ job.Middleware = (*Middleware)(nil)

// NewMiddleware returns the tracing middleware, to compose with other
// middleware in job.WithMiddleware. Most users want New.
func NewMiddleware(opts ...Option) *Middleware {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.prop == nil {
		c.prop = propagation.TraceContext{}
	}
	return &Middleware{
		tracer: c.tp.Tracer(ScopeName),
		prop:   c.prop, linked: c.linked, noWait: c.noWait,
	}
}

// New returns the option that adds the tracing middleware to a manager:
// job.NewManager(..., jobotel.New()).
func New(opts ...Option) job.ManagerOption {
	return job.WithMiddleware(NewMiddleware(opts...))
}

// Schedule implements job.Middleware: a producer span, child of ctx's
// span, whose context goes into the instance's metadata.
func (m *Middleware) Schedule(ctx context.Context, info *job.ScheduleInfo, next func(context.Context) (*job.InstanceInfo, error)) (*job.InstanceInfo, error) {
	ctx, span := m.tracer.Start(ctx, "schedule "+info.Kind,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(systemAttr, sendAttr,
			KindKey.String(info.Kind), QueueKey.String(info.Queue), InstanceIDKey.String(info.ID),
			PriorityKey.Int(int(info.Priority)), RunAtKey.String(info.RunAt.UTC().Format(time.RFC3339Nano))))
	defer span.End()
	m.prop.Inject(ctx, propagation.MapCarrier(info.Metadata))
	inst, err := next(ctx)
	if inst != nil && inst.ID != info.ID {
		// A unique key held by another instance: name the holder.
		span.SetAttributes(attribute.String("jobkit.job.holder_id", inst.ID))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return inst, err
}

// Run implements job.Middleware: a wait span from when the attempt was
// due until now, and a consumer span around the executor, both joined to
// the producer span found in the instance's metadata. The executor's ctx
// carries the run span.
func (m *Middleware) Run(ctx context.Context, inst job.Instance, next func(context.Context) error) error {
	start := time.Now()
	info := inst.Info()
	ready := info.RunAt
	if c := info.CreatedAt; c.After(ready) {
		ready = c
	}
	if ready.After(start) || ready.IsZero() { // clocks of two nodes disagree
		ready = start
	}
	attrs := []attribute.KeyValue{
		systemAttr, processAttr,
		KindKey.String(info.Kind), QueueKey.String(info.Queue), InstanceIDKey.String(info.ID),
		AttemptKey.Int(info.Attempt), PriorityKey.Int(int(info.Priority)),
	}
	producer := trace.SpanContextFromContext(m.prop.Extract(context.Background(), propagation.MapCarrier(info.Metadata)))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start),
		trace.WithAttributes(attrs...), trace.WithAttributes(WaitKey.Float64(start.Sub(ready).Seconds())),
	}
	// The parent: the producer span, or (linked) none, with a link.
	parent := ctx
	if producer.IsValid() {
		if m.linked {
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: producer}))
		} else {
			parent = trace.ContextWithRemoteSpanContext(ctx, producer)
		}
	}
	// The wait span: the run span's sibling under the producer span, or
	// its child when the run starts a trace.
	waitUnderRun := m.linked || !producer.IsValid()
	if !m.noWait && !waitUnderRun {
		m.wait(parent, inst, ready, start, attrs)
	}
	ctx, span := m.tracer.Start(parent, "run "+inst.Info().Kind, opts...)
	defer span.End()
	if !m.noWait && waitUnderRun {
		m.wait(ctx, inst, ready, start, attrs)
	}
	err := next(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		switch {
		case errors.Is(err, job.ErrTimeout):
			span.SetAttributes(attribute.String("error.type", "timeout"))
		case errors.Is(err, job.ErrCanceled):
			span.SetAttributes(attribute.String("error.type", "canceled"))
		case errors.Is(err, job.ErrPanic):
			span.SetAttributes(attribute.String("error.type", "panic"))
		}
	}
	return err
}

// wait records the span of an attempt's wait, from ready to start, under
// parent.
func (m *Middleware) wait(parent context.Context, inst job.Instance, ready, start time.Time, attrs []attribute.KeyValue) {
	_, w := m.tracer.Start(parent, "wait "+inst.Info().Kind, trace.WithTimestamp(ready), trace.WithAttributes(attrs...))
	w.End(trace.WithTimestamp(start))
}
