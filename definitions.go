package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// Definition is a job kind's policy as data (queue, priority, retries,
// backoff, timeout, unique policy, required labels), kept in the store so
// that any manager sharing it can schedule the kind, with or without the
// Go function that runs it. See store.Definition for its fields, and
// Admin.PutDefinition, WithDefinition and WithPublishDefinitions for
// how definitions get there.
type Definition = store.Definition

// DefinitionCacheTTL is how long ScheduleJob keeps a stored definition it
// read before it reads it again: a change made by another process takes
// effect on this manager within that time (at once for changes made
// through this manager). A kind without a definition is not remembered:
// the next ScheduleJob of it reads the store again.
const DefinitionCacheTTL = 5 * time.Second

// publishTimeout bounds the store write of RegisterJob on a running
// manager with WithPublishDefinitions (RegisterJob takes no ctx).
const publishTimeout = 15 * time.Second

// defCache holds the jobs built from stored definitions, by kind.
type defCache struct {
	mu sync.Mutex
	m  map[string]defEntry
}

type defEntry struct {
	j    *Job
	read time.Time // on the manager's clock
}

func (c *defCache) get(kind string, now time.Time) *Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[kind]
	if !ok || now.Before(e.read) || now.Sub(e.read) >= DefinitionCacheTTL {
		return nil
	}
	return e.j
}

func (c *defCache) put(j *Job, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[string]defEntry)
	}
	c.m[j.kind] = defEntry{j, now}
}

func (c *defCache) forget(kind string) {
	c.mu.Lock()
	delete(c.m, kind)
	c.mu.Unlock()
}

// jobFor returns the job ScheduleJob builds an instance of kind from: the
// registered one, else one made from the kind's stored definition (which
// has no executor: its arguments are stored as JSON and checked where
// they run).
func (m *Manager) jobFor(ctx context.Context, kind string) (*Job, error) {
	if j, ok := m.reg.get(kind); ok {
		return j, nil
	}
	now := m.clock.Now()
	if j := m.defs.get(kind, now); j != nil {
		return j, nil
	}
	d, err := m.store.GetDefinition(ctx, kind)
	if errors.Is(err, store.ErrNotFound) {
		m.defs.forget(kind)
		return nil, unknownKind(kind, fmt.Sprintf("the store holds no definition of it and this node does not register it (it registers %s)", kindList(m.reg.kinds())))
	}
	if err != nil {
		return nil, fmt.Errorf("read the definition of kind %q: %w", kind, err)
	}
	j := &Job{}
	if err := WithDefinition(*d).applyJob(j); err != nil {
		return nil, fmt.Errorf("the stored definition of kind %q: %w", kind, err)
	}
	m.defs.put(j, now)
	return j, nil
}

// PutDefinition stores d, the policy of kind d.Kind, so that every manager
// sharing the store can schedule the kind. An empty Queue means
// DefaultQueue. ifVersion is the compare-and-set condition: 0 creates
// (an error wrapping store.ErrConflict when the kind has a definition
// already), the Version of a definition read updates that one (ErrConflict
// when it changed since), store.AnyVersion writes whatever is there. It
// returns the definition as stored, with its new Version. An invalid
// definition is an error wrapping ErrInvalidJob and store.ErrInvalid,
// and nothing is stored.
//
// Managers with a registered job of the kind keep using their job's own
// policy; the definition serves those without it (see ScheduleJob).
func (a *Admin) PutDefinition(ctx context.Context, d Definition, ifVersion int64) (*Definition, error) {
	m := a.m
	if err := m.prepareDefinition(ctx, &d); err != nil {
		return nil, fmt.Errorf("job: put definition: %w", err)
	}
	got, err := m.store.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &d, IfVersion: ifVersion, Now: m.clock.Now()})
	m.defs.forget(d.Kind)
	if err != nil {
		return nil, fmt.Errorf("job: put definition %q: %w", d.Kind, err)
	}
	m.definitionChanged(got.Kind, got)
	return got, nil
}

// GetDefinition returns the stored definition of kind, or an error wrapping
// ErrNotFound.
func (a *Admin) GetDefinition(ctx context.Context, kind string) (*Definition, error) {
	m := a.m
	d, err := m.store.GetDefinition(ctx, kind)
	if err != nil {
		return nil, fmt.Errorf("job: definition %q: %w", kind, err)
	}
	return d, nil
}

// ListDefinitions returns one page of the stored definitions sorted by
// kind: at most limit (0 for store.DefaultDefinitionsPage, at most
// store.MaxDefinitionsPage) from cursor on ("" from the first), with the
// cursor of the next page ("" when this page is shorter than the limit,
// so the last).
func (a *Admin) ListDefinitions(ctx context.Context, cursor string, limit int) (*Page[*Definition], error) {
	m := a.m
	ds, err := m.store.ListDefinitions(ctx, &store.ListDefinitionsParams{After: cursor, Limit: limit})
	if err != nil {
		return &Page[*Definition]{Items: ds}, fmt.Errorf("job: list definitions: %w", err)
	}
	out := &Page[*Definition]{Items: ds}
	size := limit
	if size <= 0 {
		size = store.DefaultDefinitionsPage
	}
	if len(ds) > 0 && len(ds) >= size {
		out.Next = ds[len(ds)-1].Kind
	}
	return out, nil
}

// ErrDefinitionInUse: a definition cannot be deleted while a stored trigger
// fires its kind; the error names the triggers. Delete them, or point them
// at another kind, first.
var ErrDefinitionInUse = errors.New("job: definition in use")

// DeleteDefinition removes the stored definition of kind: only when it is
// at ifVersion, unless ifVersion is 0. It returns an error wrapping
// ErrNotFound when there is none and store.ErrConflict when the version
// differs. It refuses, with an error wrapping ErrDefinitionInUse that
// names them, while stored triggers fire the kind. Instances scheduled
// already are not touched, and managers with a registered job of the kind
// still schedule and run it.
func (a *Admin) DeleteDefinition(ctx context.Context, kind string, ifVersion int64) error {
	m := a.m
	users, err := m.triggersWhere(ctx, func(t *store.Trigger) bool { return t.Kind == kind })
	if err != nil {
		return fmt.Errorf("job: delete definition %q: %w", kind, err)
	}
	if len(users) > 0 {
		return fmt.Errorf("%w: kind %q is fired by %s; delete them or point them at another kind first", ErrDefinitionInUse, kind, strings.Join(users, ", "))
	}
	err = m.store.DeleteDefinition(ctx, &store.DeleteDefinitionParams{Kind: kind, IfVersion: ifVersion})
	m.defs.forget(kind)
	if err != nil {
		return fmt.Errorf("job: delete definition %q: %w", kind, err)
	}
	m.definitionChanged(kind, nil)
	return nil
}

// publish stores the definition of j, whatever version is stored.
func (m *Manager) publish(ctx context.Context, j *Job) error {
	if j.backoffFunc {
		m.log.Warn("publishing a job whose backoff is a Go func: the definition carries the default backoff; use WithDefinition to publish one as data", "kind", j.kind)
	}
	d := j.Definition()
	if _, err := m.store.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &d, IfVersion: store.AnyVersion, Now: m.clock.Now()}); err != nil {
		return fmt.Errorf("job: publish the definition of %q: %w", j.kind, err)
	}
	return nil
}

// WithPublishDefinitions makes the manager store the definition of each
// job registered with it (Job.Definition), replacing what the store holds
// for the kind, so that managers without the job (a producer with zero
// workers, another service) can schedule it: at Start for the jobs
// registered by then, and in RegisterJob for those registered while it
// runs (bounded by 15 s, RegisterJob taking no ctx). Start and RegisterJob
// return the store's error and then neither start nor register.
// UnregisterJob leaves the definition in place for the managers that still
// run the kind; DeleteDefinition removes it.
func WithPublishDefinitions() ManagerOption {
	return func(c *config) error {
		c.publishDefs = true
		return nil
	}
}

// WithDefinition sets the job's kind and policy from a definition: queue
// (DefaultQueue when empty), priority, max retries, backoff (built from
// its data), timeout, unique policy, required labels, description and
// argument conversion (WithArgumentConversion). Read
// a stored one with Admin.GetDefinition to run a kind the way it is
// defined. Options given after it override its parts. An invalid
// definition is an error wrapping ErrInvalidJob and store.ErrInvalid.
func WithDefinition(d Definition) JobOption {
	return jobOption(func(j *Job) error {
		if d.Queue == "" {
			d.Queue = DefaultQueue
		}
		if err := d.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
		j.kind, j.queue, j.priority, j.maxRetries, j.timeout = d.Kind, d.Queue, Priority(d.Priority), d.MaxRetries, d.Timeout
		j.backoff, j.backoffSpec, j.backoffFunc = backoffOf(d.Backoff), d.Backoff, false
		c := d.Clone()
		j.unique, j.labels, j.description = c.Unique, store.NormLabels(c.Labels), c.Description
		j.convertArgs = d.ConvertArguments
		return nil
	})
}

// Definition returns the job's policy as data, what WithPublishDefinitions
// stores. A backoff given as a Go func (WithBackoff) is not data: the
// definition then carries the default backoff (BackoffDefault).
func (j *Job) Definition() Definition {
	d := Definition{
		Kind: j.kind, Queue: j.queue, Priority: int(j.priority), MaxRetries: j.maxRetries,
		Timeout: j.timeout, Labels: j.labels, Description: j.description, Unique: j.unique,
		ConvertArguments: j.convertArgs,
	}
	if !j.backoffFunc {
		d.Backoff = j.backoffSpec
	}
	return *d.Clone()
}

// backoffOf builds the Backoff a definition describes.
func backoffOf(b store.Backoff) Backoff {
	switch b.Kind {
	case store.BackoffConstant:
		return func(int) time.Duration { return jittered(b.Base, b.Jitter) }
	case store.BackoffExponential:
		return func(attempt int) time.Duration {
			d := b.Base
			for i := 1; i < attempt && d < b.Limit; i++ {
				d *= 2
			}
			return jittered(min(d, b.Limit), b.Jitter)
		}
	}
	return defaultBackoff
}

// jittered returns d with the fraction f of it random: a duration in
// [d - f·d, d].
func jittered(d time.Duration, f float64) time.Duration {
	r := time.Duration(float64(d) * f)
	if r <= 0 {
		return d
	}
	return d - r + rand.N(r+1)
}

// encodeJSONArgs encodes the arguments of a kind whose executor is not
// known here as a JSON array; they are checked where they run.
func encodeJSONArgs(args []any) ([]byte, error) {
	out := make([]byte, 1, 64)
	out[0] = '['
	for i, a := range args {
		if i > 0 {
			out = append(out, ',')
		}
		var err error
		if out, err = appendArgJSON(out, a); err != nil {
			return nil, fmt.Errorf("%w: argument %d (%T) cannot be encoded: %v", ErrInvalidArguments, i+1, a, err)
		}
	}
	return append(out, ']'), nil
}

// argsUniqueKey is the unique key of an instance of kind with the encoded
// arguments args under a UniqueByArgs policy.
func argsUniqueKey(kind string, args []byte) string {
	sum := sha256.Sum256(args)
	return kind + ":args:" + hex.EncodeToString(sum[:16])
}
