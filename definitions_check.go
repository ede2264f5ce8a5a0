package job

import (
	"context"
	"fmt"
)

// CheckDefinition checks d exactly as PutDefinition does before it writes
// (the definition's own fields, and its executor config by the executor
// type when this manager enables that type) and returns d as PutDefinition
// would store it: an empty Queue made DefaultQueue, an executor config in
// canonical JSON. It stores nothing, so a form or a CLI can show a
// definition's errors before saving it. The errors are those of
// PutDefinition: ErrInvalidJob and store.ErrInvalid for bad fields,
// ErrDuplicateKind for a kind run as a Go function (here, or on a node
// the registry lists). It reads the stored definition and the node
// registry, as PutDefinition does, and writes nothing.
//
// A manager without the definition's executor type checks only what the
// store checks (a JSON object); its config is checked by the nodes that
// enable the type, when they run it.
func (a *Admin) CheckDefinition(ctx context.Context, d Definition) (*Definition, error) {
	m := a.m
	c := d.Clone()
	if err := m.prepareDefinition(ctx, c); err != nil {
		return nil, fmt.Errorf("job: check definition: %w", err)
	}
	return c, nil
}

// prepareDefinition fills d's defaults and checks it: the one path of
// PutDefinition and CheckDefinition.
func (m *Manager) prepareDefinition(ctx context.Context, d *Definition) error {
	if d.Queue == "" {
		d.Queue = DefaultQueue
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	return m.checkPutExecutor(ctx, d)
}
