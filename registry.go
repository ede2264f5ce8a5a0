package job

import (
	"fmt"
	"sort"
	"sync"
)

// registry is a manager's set of jobs, by kind.
type registry struct {
	mu   sync.RWMutex
	jobs map[string]*Job
}

func newRegistry() *registry { return &registry{jobs: make(map[string]*Job)} }

func (r *registry) add(j *Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.jobs[j.kind]; ok {
		return fmt.Errorf("%w: %q; unregister it first or pick another kind", ErrDuplicateKind, j.kind)
	}
	r.jobs[j.kind] = j
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
