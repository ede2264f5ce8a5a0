package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// ExecutorType is a built-in executor type (webhook, command, wasm, ...)
// that runs the kinds whose stored definition names it (Definition.Executor),
// so a manager runs them with no Go function registered. Enable types on a
// manager with WithExecutorTypes; the module github.com/jobkit/job/executors
// holds jobkit's own.
type ExecutorType interface {
	// Type is the name definitions use (store.ExecutorSpec.Type).
	Type() string
	// New builds the executor of d, a definition naming the type, from
	// its Executor.Config. It is called when the manager first sees the
	// definition and again after each change, and must be cheap (build
	// lazily what is costly). It returns an error only for a config that
	// can work nowhere (malformed, a missing field); what this node's
	// policy refuses (a destination or program not on its allowlist) is
	// the error of each attempt, so that a node allowing it can run it.
	New(d *Definition) (DataExecutor, error)
}

// DataExecutor runs one attempt of a kind defined as data. args are the
// instance's arguments as stored (one JSON value each). Its result is
// stored as the instance's one result; its error steers the attempt as a
// Go executor's does (Permanent, RetryAfter, the context's cause).
type DataExecutor func(ctx context.Context, inst Instance, args []json.RawMessage) (result any, err error)

// DefaultExecutorSync is how often a manager with executor types reads
// the stored definitions to pick up new, changed and deleted ones, when
// WithExecutorTypes is given no other interval.
const DefaultExecutorSync = 2 * time.Second

// WithExecutorTypes makes the manager run every stored definition whose
// Executor names one of types, as an ordinary registered job: retries,
// backoff, timeout, unique keys, priority, labels, cancel, history, logs,
// progress and metrics work as for a Go function. The manager reads the
// definitions at Start and every DefaultExecutorSync after (see
// WithExecutorSync), and at once for those it writes itself
// (PutDefinition, DeleteDefinition), registering, replacing and
// unregistering the kinds they define. RegisteredKinds lists them beside
// the Go kinds; Job.ExecutorType tells them apart.
//
// A kind cannot be both, on any manager, whether it enables executor
// types or not: RegisterJob of a Go function of a kind whose stored
// definition names an executor type fails with ErrDuplicateKind, and so
// does Start of a manager whose Go kind gained such a definition after
// RegisterJob; PutDefinition of a definition naming a type for a kind
// registered as a Go function on this manager or on a live node of the
// registry fails with ErrDuplicateKind naming the node. (Two processes
// doing both at the same moment can still race; the manager with the
// type enabled then logs the conflict and runs its Go function.)
// Two types of the same name are an error wrapping ErrInvalidOption.
func WithExecutorTypes(types ...ExecutorType) ManagerOption {
	return func(c *config) error {
		if c.execTypes == nil {
			c.execTypes = make(map[string]ExecutorType, len(types))
		}
		for _, t := range types {
			if t == nil || t.Type() == "" {
				return fmt.Errorf("%w: nil executor type, or one without a name", ErrInvalidOption)
			}
			if _, dup := c.execTypes[t.Type()]; dup {
				return fmt.Errorf("%w: executor type %q given twice", ErrInvalidOption, t.Type())
			}
			c.execTypes[t.Type()] = t
		}
		return nil
	}
}

// WithExecutorSync sets how often a manager with executor types reads the
// stored definitions (see WithExecutorTypes). Defaults to
// DefaultExecutorSync; it must be more than 0.
func WithExecutorSync(every time.Duration) ManagerOption {
	return func(c *config) error {
		if every <= 0 {
			return fmt.Errorf("%w: executor sync every %v; want more than 0", ErrInvalidOption, every)
		}
		c.execSync = every
		return nil
	}
}

// ExecutorTypes returns the names of the executor types the manager
// enables, sorted.
func (m *Manager) ExecutorTypes() []string {
	ts := make([]string, 0, len(m.cfg.execTypes))
	for t := range m.cfg.execTypes {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts
}

// ExecutorType returns the executor type that runs the job's instances
// when it was built from a stored definition (see WithExecutorTypes), or
// "" for a Go function.
func (j *Job) ExecutorType() string { return j.execType }

// execSync is a manager's state for kinds defined as data.
type execSync struct {
	mu     sync.Mutex      // serialises reconciliations
	warned map[string]bool // "<kind> <version> <updated>" whose conflict or error was logged
}

// dataJob builds the job that runs d with t.
func (m *Manager) dataJob(t ExecutorType, d *Definition) *Job {
	j := &Job{}
	_ = WithDefinition(*d).applyJob(j) // d was validated by the store
	j.execType, j.defVersion, j.defUpdated = t.Type(), d.Version, d.UpdatedAt
	run, err := t.New(d.Clone())
	if err != nil {
		cerr := fmt.Errorf("%w: the %s executor of kind %q (definition version %d): %w; fix the definition's executor config", ErrInvalidJob, t.Type(), d.Kind, d.Version, err)
		m.warnOnce(d, "stored definition's executor config is unusable; its instances fail", cerr)
		run = func(context.Context, Instance, []json.RawMessage) (any, error) { return nil, Permanent(cerr) }
	}
	j.exec, _ = newExecutor(func(ctx context.Context, inst Instance, args ...json.RawMessage) (any, error) {
		return run(ctx, inst, args)
	})
	return j
}

func (m *Manager) warnOnce(d *Definition, msg string, err error) {
	key := fmt.Sprintf("%s %d %d", d.Kind, d.Version, d.UpdatedAt.UnixNano())
	if m.xs.warned[key] {
		return
	}
	if m.xs.warned == nil {
		m.xs.warned = map[string]bool{}
	}
	m.xs.warned[key] = true
	m.log.Error(msg, "kind", d.Kind, "version", d.Version, "error", err)
}

// adopt registers, replaces or unregisters the data job of one stored
// definition (nil: the kind has none); m.xs.mu is held.
func (m *Manager) adopt(kind string, d *Definition) {
	cur, ok := m.reg.get(kind)
	var t ExecutorType
	if d != nil && d.Executor != nil {
		t = m.cfg.execTypes[d.Executor.Type]
	}
	switch {
	case t == nil:
		if ok && cur.execType != "" {
			_, _ = m.reg.remove(kind)
			m.log.Info("kind no longer defined for an executor type enabled here; unregistered", "kind", kind, "type", cur.execType)
		}
	case ok && cur.execType == "":
		m.warnOnce(d, "stored definition names an executor type for a kind registered here as a Go function; this manager runs the Go function",
			fmt.Errorf("%w: %q is both a Go function here and a %s executor in its stored definition; unregister one or rename the kind", ErrDuplicateKind, kind, d.Executor.Type))
	case ok && cur.execType == t.Type() && cur.defVersion == d.Version && cur.defUpdated.Equal(d.UpdatedAt):
		// unchanged
	default:
		m.reg.put(m.dataJob(t, d))
		m.notifyLocal()
		m.log.Debug("kind defined as data registered", "kind", kind, "type", t.Type(), "version", d.Version)
	}
}

// syncExecutors reads every stored definition and adopts those naming an
// enabled type, unregistering the data jobs whose definitions are gone.
func (m *Manager) syncExecutors(ctx context.Context) error {
	if len(m.cfg.execTypes) == 0 {
		return nil
	}
	var defs []*Definition
	for after := ""; ; {
		page, err := m.store.ListDefinitions(ctx, &store.ListDefinitionsParams{After: after, Limit: store.MaxDefinitionsPage})
		if err != nil {
			return fmt.Errorf("job: read the stored definitions for the executor types: %w", err)
		}
		defs = append(defs, page...)
		if len(page) < store.MaxDefinitionsPage {
			break
		}
		after = page[len(page)-1].Kind
	}
	m.xs.mu.Lock()
	defer m.xs.mu.Unlock()
	seen := make(map[string]bool, len(defs))
	for _, d := range defs {
		seen[d.Kind] = true
		m.adopt(d.Kind, d)
	}
	for _, j := range m.reg.all() {
		if j.execType != "" && !seen[j.kind] {
			m.adopt(j.kind, nil)
		}
	}
	return nil
}

// execSyncLoop reads the definitions every execSync until Stop.
func (m *Manager) execSyncLoop(stop <-chan struct{}) {
	for {
		t := m.clock.NewTimer(m.cfg.execSync)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := m.syncExecutors(ctx); err != nil {
			m.log.Warn("executor types: reading the stored definitions failed; retrying", "error", err)
		}
		cancel()
	}
}

// startExecutors adopts the stored definitions at Start, before the
// first claim (when the store answers), and starts the loop that follows
// them; m.mu is held.
func (m *Manager) startExecutors(ctx context.Context) {
	if len(m.cfg.execTypes) == 0 {
		return
	}
	// A store that cannot be read yet (not up) does not stop Start: the
	// loop reads the definitions again every execSync, and the data kinds
	// run from the first read that succeeds.
	sctx, cancel := context.WithTimeout(ctx, conflictCheckTimeout)
	err := m.syncExecutors(sctx)
	cancel()
	if err != nil {
		m.log.Warn("executor types: the stored definitions could not be read at start; retrying", "error", err, "retry_in", m.cfg.execSync)
	}
	m.bg.goLoop(m.execSyncLoop)
}

// checkDataConflict refuses to register a Go function j of a kind a
// stored definition runs with an executor type: the registry holds its
// data job, or the store's definition of the kind names an executor. Every
// manager checks, whether or not it enables executor types.
func (m *Manager) checkDataConflict(j *Job) error {
	if j.execType != "" {
		return nil
	}
	if cur, ok := m.reg.get(j.kind); ok && cur.execType != "" {
		return fmt.Errorf("%w: %q is run here by the %s executor of its stored definition, so it cannot also be registered as a Go function; delete the definition's executor (or the definition) to register a Go function, or pick another kind", ErrDuplicateKind, j.kind, cur.execType)
	}
	ctx, cancel := context.WithTimeout(context.Background(), conflictCheckTimeout)
	defer cancel()
	d, err := m.store.GetDefinition(ctx, j.kind)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		// The store is unreachable (a manager may be set up before its
		// server is up): Start checks every Go kind again, and keeps
		// checking in the background until it can read the definitions.
		m.log.Debug("register: the stored definition could not be read; Start checks again", "kind", j.kind, "error", err)
		return nil
	case d.Executor != nil:
		return goVersusData(j.kind, d.Executor.Type)
	}
	return nil
}

func goVersusData(kind, typ string) error {
	return fmt.Errorf("%w: %q has a stored definition run by the %s executor, so it cannot also be registered as a Go function; delete the definition's executor (or the definition) to register a Go function, or pick another kind", ErrDuplicateKind, kind, typ)
}

// checkGoKindsStored refuses to start a manager one of whose Go kinds has
// gained a stored definition with an executor since RegisterJob (before
// Start no node lists the kind, so PutDefinition could not see it).
func (m *Manager) checkGoKindsStored(ctx context.Context) error {
	goKinds := map[string]bool{}
	for _, j := range m.reg.all() {
		if j.execType == "" {
			goKinds[j.kind] = true
		}
	}
	if len(goKinds) == 0 {
		return nil
	}
	for after := ""; ; {
		page, err := m.store.ListDefinitions(ctx, &store.ListDefinitionsParams{After: after, Limit: store.MaxDefinitionsPage})
		if err != nil {
			return fmt.Errorf("job: start: read the stored definitions (a kind stored with an executor cannot be a Go function too): %w", err)
		}
		for _, d := range page {
			if d.Executor != nil && goKinds[d.Kind] {
				return fmt.Errorf("job: start: %w", goVersusData(d.Kind, d.Executor.Type))
			}
		}
		if len(page) < store.MaxDefinitionsPage {
			return nil
		}
		after = page[len(page)-1].Kind
	}
}

// conflictCheckTimeout bounds the reads of RegisterJob's and Start's
// Go-function-versus-definition checks: a store that is not up yet (some
// clients wait for the server until the deadline) must not hold either
// call; Start leaves a check it could not finish to recheckGoKindsLoop.
const conflictCheckTimeout = 2 * time.Second

// recheckGoKindsLoop runs checkGoKindsStored until the store answers,
// when Start could not read the stored definitions (the store was down):
// a conflict found then is logged as an error, since the manager already
// runs its Go function. It backs off from 1 s to 30 s between tries.
func (m *Manager) recheckGoKindsLoop(stop <-chan struct{}) {
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		t := m.clock.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.checkGoKindsStored(ctx)
		cancel()
		switch {
		case err == nil:
			return
		case errors.Is(err, ErrDuplicateKind):
			m.log.Error("a Go kind of this manager has a stored definition with an executor; both would run it", "error", err)
			return
		default:
			m.log.Warn("reading the stored definitions failed; retrying", "error", err, "retry_in", min(2*wait, 30*time.Second))
		}
	}
}

// checkPutExecutor refuses a definition naming an executor type for a
// kind registered as a Go function — here, or on a live node of the
// registry (unless the stored definition names an executor already, so
// the nodes listing the kind run it as data) — and one whose config the
// type enabled here cannot use.
func (m *Manager) checkPutExecutor(ctx context.Context, d *Definition) error {
	if d.Executor == nil {
		return nil
	}
	if cur, ok := m.reg.get(d.Kind); ok && cur.execType == "" {
		return fmt.Errorf("%w: %q is registered on this manager (node %s) as a Go function; a definition naming the %s executor would run it twice over; unregister the job or pick another kind", ErrDuplicateKind, d.Kind, m.node, d.Executor.Type)
	}
	if t := m.cfg.execTypes[d.Executor.Type]; t != nil {
		if _, err := t.New(d.Clone()); err != nil {
			return fmt.Errorf("%w: the %s executor config of %q: %w", ErrInvalidJob, d.Executor.Type, d.Kind, err)
		}
	}
	cur, err := m.store.GetDefinition(ctx, d.Kind)
	switch {
	case err == nil && cur.Executor != nil:
		return nil // run as data already: the nodes listing it run the definition
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("read the stored definition of %q (to check no node runs it as a Go function): %w", d.Kind, err)
	}
	nodes, err := m.store.ListNodes(ctx, &store.ListNodesParams{Now: m.clock.Now(), DeadAfter: m.cfg.deadAfter})
	if err != nil {
		return fmt.Errorf("read the node registry (to check no node runs %q as a Go function): %w", d.Kind, err)
	}
	var goNodes []string
	for _, n := range nodes {
		if n.ID != m.node && !n.Status.Gone() && slices.Contains(n.Kinds, d.Kind) {
			goNodes = append(goNodes, n.ID)
		}
	}
	if len(goNodes) > 0 {
		return fmt.Errorf("%w: %q is registered as a Go function on node %s (the node registry lists it); a definition naming the %s executor would run it twice over; unregister the job there, or pick another kind", ErrDuplicateKind, d.Kind, strings.Join(goNodes, ", "), d.Executor.Type)
	}
	return nil
}

// definitionChanged adopts the definition of kind this manager just
// wrote (nil: deleted), so its own next ScheduleJob and claim see it.
func (m *Manager) definitionChanged(kind string, d *Definition) {
	if len(m.cfg.execTypes) == 0 {
		return
	}
	m.xs.mu.Lock()
	m.adopt(kind, d)
	m.xs.mu.Unlock()
}

// put adds or replaces the job of j.kind.
func (r *registry) put(j *Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.jobs[j.kind] = j
	r.rebuild()
}

// retryAfterError carries the earliest time an attempt may be retried.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps err so that, when the attempt is retried, the retry
// waits at least d (and the job's backoff when that is longer): what an
// executor returns for a server's Retry-After. A permanent error is not
// retried whatever it says.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: d}
}

// retryAfterDelay is the wait before retrying an attempt that failed with err,
// given the job's backoff wait.
func retryAfterDelay(err error, backoff time.Duration) time.Duration {
	var ra *retryAfterError
	if errors.As(err, &ra) && ra.after > backoff {
		return ra.after
	}
	return backoff
}
