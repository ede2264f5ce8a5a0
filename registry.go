package job

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// registry is a manager's set of jobs, by kind.
type registry struct {
	mu   sync.RWMutex
	jobs map[string]*Job
	// names is the sorted list of registered kinds, rebuilt by add and
	// remove; claims pass it to the store (never modified in place).
	names atomic.Pointer[[]string]
}

func newRegistry() *registry { return &registry{jobs: make(map[string]*Job)} }

func (r *registry) add(j *Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[j.kind]; ok {
		return fmt.Errorf("%w: %q; unregister it first or pick another kind", ErrDuplicateKind, j.kind)
	}
	r.jobs[j.kind] = j
	r.rebuild()
	return nil
}

func (r *registry) remove(kind string) (*Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[kind]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not registered", ErrUnknownKind, kind)
	}
	delete(r.jobs, kind)
	r.rebuild()
	return j, nil
}

func (r *registry) get(kind string) (*Job, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	j, ok := r.jobs[kind]
	return j, ok
}

// lookup is get with an error that lists what is registered.
func (r *registry) lookup(kind string) (*Job, error) {
	if j, ok := r.get(kind); ok {
		return j, nil
	}
	return nil, fmt.Errorf("%w: %q; register it with Manager.RegisterJob (registered: %v)", ErrUnknownKind, kind, r.kinds())
}

// rebuild refreshes names; r.mu is held.
func (r *registry) rebuild() {
	ks := make([]string, 0, len(r.jobs))
	for k := range r.jobs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	r.names.Store(&ks)
}

// kindList returns the registered kinds, sorted; the caller must not
// change the slice.
func (r *registry) kindList() []string {
	if p := r.names.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *registry) kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ks := make([]string, 0, len(r.jobs))
	for k := range r.jobs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (r *registry) all() []*Job {
	r.mu.RLock()
	defer r.mu.RUnlock()
	js := make([]*Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		js = append(js, j)
	}
	return js
}
