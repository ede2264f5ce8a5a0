package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// TriggerCollection is the Documents collection that holds the stored
// triggers: one document per trigger, named by the trigger's name, whose
// body is the trigger's JSON without its Version and times (the
// document's own Version, CreatedAt and UpdatedAt are the trigger's).
const TriggerCollection = "triggers"

// TriggersIn returns the Triggers kept in d, as documents of
// TriggerCollection. It holds no state: any number of them on one store
// see the same triggers.
func TriggersIn(d Documents) Triggers { return triggerDocuments{d} }

// TriggerUpgrader is implemented by a plugin whose earlier releases kept
// triggers in a layout of their own, before they were documents of
// TriggerCollection. The engine's scheduler role calls UpgradeTriggers
// each time it reads the triggers, so the triggers of an upgraded store
// keep firing, and those an older node writes during a rolling upgrade
// are moved too.
type TriggerUpgrader interface {
	// UpgradeTriggers moves every trigger of the earlier layout into
	// TriggerCollection with MoveTrigger, removes it from the earlier
	// layout, and returns how many it moved. With none left it costs one
	// read. Safe to run from many processes at once.
	UpgradeTriggers(ctx context.Context) (int, error)
}

// MoveTrigger stores t, read from a plugin's earlier trigger layout, as a
// document of TriggerCollection with its CreatedAt, UpdatedAt and tick
// state. A trigger already stored as a document is left as it is (written
// since, or moved by another process): moved reports whether t was
// stored. The plugin removes t from its earlier layout after a nil error.
func MoveTrigger(ctx context.Context, d Documents, t *Trigger) (moved bool, err error) {
	body, err := encodeTriggerBody(t)
	if err != nil {
		return false, err
	}
	created, updated := t.CreatedAt, t.UpdatedAt
	if created.IsZero() {
		created = updated
	}
	if updated.IsZero() {
		return false, fmt.Errorf("%w: trigger %q of the earlier layout has no UpdatedAt", ErrCorrupt, t.Name)
	}
	// Two writes keep both times: the create sets CreatedAt, the replace
	// UpdatedAt (the scheduler reads ticks before UpdatedAt as decided).
	doc, err := d.PutDocument(ctx, &PutDocumentParams{Collection: TriggerCollection, Name: t.Name, Body: body, Now: created})
	if errors.Is(err, ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("move trigger %q: %w", t.Name, err)
	}
	if updated.Equal(created) {
		return true, nil
	}
	_, err = d.PutDocument(ctx, &PutDocumentParams{Collection: TriggerCollection, Name: t.Name, Body: body, IfVersion: doc.Version, Now: updated})
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) {
		return true, nil // changed or deleted since by a user: theirs stands
	}
	if err != nil {
		return true, fmt.Errorf("move trigger %q: %w", t.Name, err)
	}
	return true, nil
}

// triggerDocuments is the Triggers of TriggersIn.
type triggerDocuments struct{ d Documents }

// encodeTriggerBody is the document body of t: its JSON without what the
// document keeps itself.
func encodeTriggerBody(t *Trigger) (json.RawMessage, error) {
	c := t.Clone()
	c.Version, c.CreatedAt, c.UpdatedAt = 0, time.Time{}, time.Time{}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("%w: trigger %q: %v", ErrInvalid, t.Name, err)
	}
	return b, nil
}

// decodeTrigger is the trigger of a document of TriggerCollection.
func decodeTrigger(doc *Document) (*Trigger, error) {
	t := &Trigger{}
	if err := json.Unmarshal(doc.Body, t); err != nil {
		return nil, fmt.Errorf("%w: trigger %q: the stored document is not a trigger: %v", ErrCorrupt, doc.Name, err)
	}
	t.Name, t.Version, t.CreatedAt, t.UpdatedAt = doc.Name, doc.Version, doc.CreatedAt, doc.UpdatedAt
	return t, nil
}

func (s triggerDocuments) PutTrigger(ctx context.Context, p *PutTriggerParams) (*Trigger, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("put trigger: %w", err)
	}
	body, err := encodeTriggerBody(p.Trigger)
	if err != nil {
		return nil, fmt.Errorf("put trigger: %w", err)
	}
	doc, err := s.d.PutDocument(ctx, &PutDocumentParams{Collection: TriggerCollection, Name: p.Trigger.Name, Body: body, IfVersion: p.IfVersion, Now: p.Now})
	if err != nil {
		return nil, fmt.Errorf("put trigger %q: %w", p.Trigger.Name, err)
	}
	return decodeTrigger(doc)
}

func (s triggerDocuments) GetTrigger(ctx context.Context, name string) (*Trigger, error) {
	doc, err := s.d.GetDocument(ctx, TriggerCollection, name)
	if err != nil {
		return nil, fmt.Errorf("trigger %q: %w", name, err)
	}
	return decodeTrigger(doc)
}

func (s triggerDocuments) ListTriggers(ctx context.Context, p *ListTriggersParams) (*TriggerPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("list triggers: %w", err)
	}
	after := ""
	if p != nil {
		after = p.After
	}
	docs, err := s.d.ListDocuments(ctx, &ListDocumentsParams{Collection: TriggerCollection, After: after, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("list triggers: %w", err)
	}
	page := &TriggerPage{Triggers: make([]*Trigger, 0, len(docs.Documents)), Next: docs.Next}
	var bad error
	for _, doc := range docs.Documents {
		t, err := decodeTrigger(doc)
		if err != nil {
			bad = err // the others are listed still
			continue
		}
		page.Triggers = append(page.Triggers, t)
	}
	return page, bad
}

func (s triggerDocuments) DeleteTrigger(ctx context.Context, p *DeleteTriggerParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("delete trigger: %w", err)
	}
	if err := s.d.DeleteDocument(ctx, &DeleteDocumentParams{Collection: TriggerCollection, Name: p.Name, IfVersion: p.IfVersion}); err != nil {
		return fmt.Errorf("delete trigger %q: %w", p.Name, err)
	}
	return nil
}
