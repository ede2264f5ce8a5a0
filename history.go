package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobkit/job/store"
)

// LookupInstances returns the instances q selects, newest first, as data
// (an InstanceInfo cannot log). Records the store cannot decode are left
// out and reported in an error wrapping ErrCorrupt, alongside the rest.
func (m *Manager) LookupInstances(ctx context.Context, q *Query) ([]*InstanceInfo, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupInstances(ctx, sq)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, fmt.Errorf("job: lookup instances: %w", err)
	}
	out := make([]*InstanceInfo, len(recs))
	for i, r := range recs {
		out[i] = newInfo(r)
	}
	if err != nil {
		err = fmt.Errorf("job: lookup instances: %w", err)
	}
	return out, err
}

// GetInstance returns the instance with that ID, or an error wrapping
// ErrNotFound.
func (m *Manager) GetInstance(ctx context.Context, id string) (*InstanceInfo, error) {
	rec, err := m.lookupRecord(ctx, id)
	if err != nil {
		return nil, err
	}
	return newInfo(rec), nil
}

// lookupRecord reads the record of the instance with that ID, as
// GetInstance does.
func (m *Manager) lookupRecord(ctx context.Context, id string) (*store.Instance, error) {
	recs, err := m.store.LookupInstances(ctx, &store.Query{InstanceID: id, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("job: lookup instance %s: %w", id, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("job: lookup instance %s: %w", id, ErrNotFound)
	}
	return recs[0], nil
}

// LookupInstanceHistory returns the state transitions q selects, oldest
// first.
func (m *Manager) LookupInstanceHistory(ctx context.Context, q *Query) ([]*HistoryRecord, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupHistory(ctx, sq)
	if err != nil {
		return recs, fmt.Errorf("job: lookup history: %w", err)
	}
	return recs, nil
}
