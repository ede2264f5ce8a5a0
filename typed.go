package job

import (
	"context"
	"fmt"
)

// TypedJob is a job registered with Register: an executor that takes one
// argument value of type A and returns a result of type R, scheduled and
// read back with those types, so the compiler checks what the reflective
// path (WithExecutor, WithArguments, InstanceInfo.ResultsInto) checks at run time.
//
// The job is an ordinary Job underneath: its instances are stored, claimed,
// retried and looked up like any other, ScheduleJob(ctx, kind,
// WithArguments(a)) schedules one too, and managers of a cluster that
// register the kind either way run each other's instances.
type TypedJob[A, R any] struct {
	m   *Manager
	job *Job
}

// TypedInstance is an instance of a TypedJob as data (an InstanceInfo),
// with its argument and result read back as A and R.
type TypedInstance[A, R any] struct {
	*InstanceInfo
}

// Register creates a job of the given kind whose executor is fn, registers
// it with m and returns its typed handle. opts configure the job as they
// do for NewJob (WithPriority, WithMaxRetries, WithCronSpec, ...), except
// WithKind and WithExecutor, which Register sets: passing either is an
// error wrapping ErrInvalidJob.
//
// A is stored as JSON, as the arguments of any job: it is typically a
// struct with exported fields. Use struct{} for a job that takes nothing
// and returns nothing of interest. A recurring job's ticks carry
// WithArguments(a) in their schedule options, a value of type A.
func Register[A, R any](m *Manager, kind string, fn func(ctx context.Context, args A) (R, error), opts ...JobOption) (*TypedJob[A, R], error) {
	if m == nil {
		return nil, fmt.Errorf("%w: register %q: nil manager", ErrInvalidJob, kind)
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: register %q: nil executor func", ErrInvalidJob, kind)
	}
	// Register sets the kind and executor; an option that sets either
	// would silently replace them.
	var probe Job
	for _, o := range opts {
		if o == nil {
			continue // NewJob reports it
		}
		_ = o.applyJob(&probe) // NewJob reports errors
	}
	if probe.kind != "" {
		return nil, fmt.Errorf("%w: register %q: WithKind(%q) or WithDefinition among the options; Register sets the kind, drop WithKind (or use NewJob with WithDefinition and RegisterJob)", ErrInvalidJob, kind, probe.kind)
	}
	if probe.exec != nil {
		return nil, fmt.Errorf("%w: register %q: WithExecutor among the options; Register sets the executor to fn, drop WithExecutor", ErrInvalidJob, kind)
	}
	j, err := NewJob(append([]JobOption{WithKind(kind), WithExecutor(fn)}, opts...)...)
	if err != nil {
		return nil, err
	}
	if err := m.RegisterJob(j); err != nil {
		return nil, err
	}
	return &TypedJob[A, R]{m: m, job: j}, nil
}

// Kind returns the job's kind.
func (t *TypedJob[A, R]) Kind() string { return t.job.kind }

// Job returns the registered Job.
func (t *TypedJob[A, R]) Job() *Job { return t.job }

// Schedule stores a new instance with args, due now unless opts say
// otherwise, as Manager.ScheduleJob does. opts are any ScheduleOption but
// WithArguments (args are the arguments; WithArguments is an error
// wrapping ErrInvalidOption). On ErrDuplicate it returns the instance that
// holds the unique key, as ScheduleJob does.
func (t *TypedJob[A, R]) Schedule(ctx context.Context, args A, opts ...ScheduleOption) (*TypedInstance[A, R], error) {
	all := append([]ScheduleOption{typedArguments(args)}, opts...)
	ji, err := t.m.ScheduleJob(ctx, t.job.kind, all...)
	if ji == nil {
		return nil, err
	}
	return &TypedInstance[A, R]{ji}, err
}

// typedArguments sets a TypedJob's one argument and forbids a later
// WithArguments.
func typedArguments(args any) ScheduleOption {
	return scheduleOption(func(c *scheduleConfig) error {
		c.args, c.hasArgs, c.typedArgs = []any{args}, true, true
		return nil
	})
}

// GetInstance returns the instance of this job with that ID, or an
// error wrapping ErrNotFound (also when the ID is of another kind's
// instance).
func (t *TypedJob[A, R]) GetInstance(ctx context.Context, id string) (*TypedInstance[A, R], error) {
	ji, err := t.m.GetInstance(ctx, id)
	if err != nil {
		return nil, err
	}
	if ji.Kind != t.job.kind {
		return nil, fmt.Errorf("job: lookup instance %s: %w: it is of kind %q, not %q", id, ErrNotFound, ji.Kind, t.job.kind)
	}
	return &TypedInstance[A, R]{ji}, nil
}

// LookupInstances returns the instances of this job that q selects, newest
// first, as Manager.LookupInstances does. q may be nil; a q that selects
// another kind is an error wrapping ErrInvalidOption.
func (t *TypedJob[A, R]) LookupInstances(ctx context.Context, q *Query) ([]*TypedInstance[A, R], error) {
	var kq Query
	if q != nil {
		kq = *q
	}
	if kq.q.Kind != "" && kq.q.Kind != t.job.kind {
		return nil, fmt.Errorf("%w: query of kind %q on typed job %q", ErrInvalidOption, kq.q.Kind, t.job.kind)
	}
	kq.q.Kind = t.job.kind
	insts, err := t.m.LookupInstances(ctx, &kq)
	out := make([]*TypedInstance[A, R], len(insts))
	for i, ji := range insts {
		out[i] = &TypedInstance[A, R]{ji}
	}
	return out, err
}

// Argument returns the instance's argument, decoded from the store into
// an A. Its error wraps ErrInvalidArguments when the stored value does not
// decode into an A (an instance scheduled by ScheduleJob with other
// arguments).
func (ti *TypedInstance[A, R]) Argument() (A, error) {
	var a A
	err := ti.ArgumentsInto(&a)
	return a, err
}

// Result returns the result of a completed instance, decoded into an R.
// Its error wraps ErrInvalidResults when the instance has no result (it
// has not completed) or it does not decode into an R.
func (ti *TypedInstance[A, R]) Result() (R, error) {
	var r R
	err := ti.ResultsInto(&r)
	return r, err
}
