package memdbstore

import (
	"context"
	"fmt"
	"sort"

	"github.com/jobkit/job/store"
)

// triggerTable holds the stored triggers, by name. Triggers are few and
// written rarely, so a map under its own lock (apart from the queue's
// write lock) is enough; a list sorts the names of one page.
type triggerTable struct {
	byName  map[string]*store.Trigger
	version int64 // the last Version given
}

// PutTrigger implements store.Triggers.
func (s *Store) PutTrigger(ctx context.Context, p *store.PutTriggerParams) (*store.Trigger, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: put trigger: %w", err)
	}
	if err := ctxErr(ctx, "put trigger"); err != nil {
		return nil, err
	}
	s.trigMu.Lock()
	defer s.trigMu.Unlock()
	if s.trig.byName == nil {
		s.trig.byName = map[string]*store.Trigger{}
	}
	t := p.Trigger.Clone()
	old := s.trig.byName[t.Name]
	switch {
	case p.IfVersion == store.AnyVersion:
	case p.IfVersion == 0 && old != nil:
		return nil, fmt.Errorf("memdbstore: put trigger %q: it exists already (version %d); read it and pass its Version to replace it: %w", t.Name, old.Version, store.ErrConflict)
	case p.IfVersion != 0 && old == nil:
		return nil, fmt.Errorf("memdbstore: put trigger %q: %w", t.Name, store.ErrNotFound)
	case p.IfVersion != 0 && old.Version != p.IfVersion:
		return nil, fmt.Errorf("memdbstore: put trigger %q: stored version %d, not %d; read it again and retry: %w", t.Name, old.Version, p.IfVersion, store.ErrConflict)
	}
	s.trig.version++ // versions are never reused, even across a delete
	t.Version = s.trig.version
	t.CreatedAt, t.UpdatedAt = p.Now, p.Now
	if old != nil {
		t.CreatedAt = old.CreatedAt
	}
	s.trig.byName[t.Name] = t
	return t.Clone(), nil
}

// GetTrigger implements store.Triggers.
func (s *Store) GetTrigger(ctx context.Context, name string) (*store.Trigger, error) {
	if err := ctxErr(ctx, "get trigger"); err != nil {
		return nil, err
	}
	s.trigMu.Lock()
	defer s.trigMu.Unlock()
	t := s.trig.byName[name]
	if t == nil {
		return nil, fmt.Errorf("memdbstore: trigger %q: %w", name, store.ErrNotFound)
	}
	return t.Clone(), nil
}

// ListTriggers implements store.Triggers. It sorts the names (triggers are
// few: hundreds, not millions).
func (s *Store) ListTriggers(ctx context.Context, p *store.ListTriggersParams) (*store.TriggerPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("memdbstore: list triggers: %w", err)
	}
	if err := ctxErr(ctx, "list triggers"); err != nil {
		return nil, err
	}
	after := ""
	if p != nil {
		after = p.After
	}
	s.trigMu.Lock()
	defer s.trigMu.Unlock()
	names := make([]string, 0, len(s.trig.byName))
	for n := range s.trig.byName {
		if n > after {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	page := &store.TriggerPage{}
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	for _, n := range names {
		page.Triggers = append(page.Triggers, s.trig.byName[n].Clone())
	}
	return page, nil
}

// DeleteTrigger implements store.Triggers.
func (s *Store) DeleteTrigger(ctx context.Context, p *store.DeleteTriggerParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memdbstore: delete trigger: %w", err)
	}
	if err := ctxErr(ctx, "delete trigger"); err != nil {
		return err
	}
	s.trigMu.Lock()
	defer s.trigMu.Unlock()
	old := s.trig.byName[p.Name]
	switch {
	case old == nil:
		return fmt.Errorf("memdbstore: delete trigger %q: %w", p.Name, store.ErrNotFound)
	case p.IfVersion != 0 && old.Version != p.IfVersion:
		return fmt.Errorf("memdbstore: delete trigger %q: stored version %d, not %d: %w", p.Name, old.Version, p.IfVersion, store.ErrConflict)
	}
	delete(s.trig.byName, p.Name)
	return nil
}
