package memdbstore

import (
	"context"
	"sort"
	"sync"

	"github.com/jobkit/job/store"
)

// definitions holds the job definitions, by kind, under a lock of their
// own: they never take part in a queue operation.
type definitions struct {
	mu sync.RWMutex
	m  map[string]*store.Definition
}

// PutDefinition implements store.Definitions.
func (s *Store) PutDefinition(ctx context.Context, p *store.PutDefinitionParams) (*store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := p.Definition.Clone()
	s.defs.mu.Lock()
	defer s.defs.mu.Unlock()
	old := s.defs.m[d.Kind]
	var have int64
	if old != nil {
		have = old.Version
	}
	if p.IfVersion != store.AnyVersion && p.IfVersion != have {
		return nil, store.VersionConflict(d.Kind, p.IfVersion, have)
	}
	d.Version, d.CreatedAt, d.UpdatedAt = have+1, p.Now, p.Now
	if old != nil {
		d.CreatedAt = old.CreatedAt
	}
	if s.defs.m == nil {
		s.defs.m = make(map[string]*store.Definition)
	}
	s.defs.m[d.Kind] = d
	return d.Clone(), nil
}

// GetDefinition implements store.Definitions.
func (s *Store) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.defs.mu.RLock()
	defer s.defs.mu.RUnlock()
	d, ok := s.defs.m[kind]
	if !ok {
		return nil, store.DefinitionNotFound(kind)
	}
	return d.Clone(), nil
}

// ListDefinitions implements store.Definitions. It sorts the kinds on each
// call: an embedded store holds few definitions.
func (s *Store) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	limit, err := p.Validate()
	if err != nil {
		return nil, err
	}
	after := ""
	if p != nil {
		after = p.After
	}
	s.defs.mu.RLock()
	defer s.defs.mu.RUnlock()
	kinds := make([]string, 0, len(s.defs.m))
	for k := range s.defs.m {
		if k > after {
			kinds = append(kinds, k)
		}
	}
	sort.Strings(kinds)
	kinds = kinds[:min(len(kinds), limit)]
	out := make([]*store.Definition, len(kinds))
	for i, k := range kinds {
		out[i] = s.defs.m[k].Clone()
	}
	return out, nil
}

// DeleteDefinition implements store.Definitions.
func (s *Store) DeleteDefinition(ctx context.Context, p *store.DeleteDefinitionParams) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	s.defs.mu.Lock()
	defer s.defs.mu.Unlock()
	old, ok := s.defs.m[p.Kind]
	if !ok {
		return store.DefinitionNotFound(p.Kind)
	}
	if p.IfVersion != 0 && p.IfVersion != old.Version {
		return store.VersionConflict(p.Kind, p.IfVersion, old.Version)
	}
	delete(s.defs.m, p.Kind)
	return nil
}
