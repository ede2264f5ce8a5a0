package client

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// CreateDefinitionWithModule is CreateDefinition for a definition run by
// the wasm executor, sending the module's bytes: the jobd stores the
// module by content hash and sets the config's "module" to its reference
// (issue 22). The jobd must keep modules (--wasm-modules).
func (a *Admin) CreateDefinitionWithModule(ctx context.Context, d *jobkitv1.Definition, module []byte) (*jobkitv1.Definition, error) {
	c := a.c
	op := fmt.Sprintf("create definition %q", d.GetKind())
	res, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&jobkitv1.CreateDefinitionRequest{Definition: d, WasmModule: module}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetDefinition(), nil
}

// UpdateDefinitionWithModule is UpdateDefinition sending a new module, as
// CreateDefinitionWithModule does.
func (a *Admin) UpdateDefinitionWithModule(ctx context.Context, d *jobkitv1.Definition, ifVersion int64, module []byte) (*jobkitv1.Definition, error) {
	c := a.c
	op := fmt.Sprintf("update definition %q", d.GetKind())
	res, err := c.defs.UpdateDefinition(ctx, connect.NewRequest(&jobkitv1.UpdateDefinitionRequest{Definition: d, IfVersion: ifVersion, WasmModule: module}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetDefinition(), nil
}

// CheckDefinition sends d (and module, nil for none) to be checked as a
// create would check it — its fields, and its executor config on a jobd
// that enables the executor's type — and returns it as it would be
// stored, storing nothing (validate_only). A module is checked and
// referenced, not stored.
func (a *Admin) CheckDefinition(ctx context.Context, d *jobkitv1.Definition, module []byte) (*jobkitv1.Definition, error) {
	c := a.c
	op := fmt.Sprintf("check definition %q", d.GetKind())
	res, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&jobkitv1.CreateDefinitionRequest{Definition: d, WasmModule: module, ValidateOnly: true}))
	if err != nil {
		return nil, wrap(op, err)
	}
	return res.Msg.GetDefinition(), nil
}
