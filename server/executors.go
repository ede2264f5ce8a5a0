package server

import (
	"context"
	"encoding/json"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// Executors as data (issue 22): the definition's executor spec on the
// wire, and modules uploaded with a definition.

// executorToProto converts a stored executor spec.
func executorToProto(x *store.ExecutorSpec) *pb.ExecutorSpec {
	if x == nil {
		return nil
	}
	return &pb.ExecutorSpec{Type: x.Type, ConfigJson: string(x.Config)}
}

// executorFromProto converts a requested executor spec; the store
// validates it.
func executorFromProto(p *pb.ExecutorSpec) *store.ExecutorSpec {
	if p == nil {
		return nil
	}
	x := &store.ExecutorSpec{Type: p.GetType()}
	if p.GetConfigJson() != "" {
		x.Config = json.RawMessage(p.GetConfigJson())
	}
	return x
}

// attachModule stores module (when sent) and sets the wasm executor
// config's "module" of d to its reference. With checkOnly it checks the
// module and sets the reference, storing nothing.
func (s definitionService) attachModule(ctx context.Context, d *store.Definition, module []byte, checkOnly bool) error {
	if len(module) == 0 {
		return nil
	}
	var mods ModuleStore
	if s.modules != nil {
		mods = s.modules(managerOf(ctx))
	}
	if mods == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("this jobd keeps no WebAssembly modules; start it with --wasm (modules in the store) or --wasm-modules DIR, or send the definition without wasm_module and a \"module\" reference"))
	}
	put := mods.Put
	if checkOnly {
		mc, ok := mods.(ModuleChecker)
		if !ok {
			return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("this jobd's module store cannot check a module without storing it; send validate_only without wasm_module"))
		}
		put = mc.Check
	}
	if d.Executor == nil || d.Executor.Type != store.ExecutorWasm {
		return invalid("wasm_module sent with a definition whose executor is not of type \"wasm\"; set definition.executor.type to wasm")
	}
	cfg := map[string]json.RawMessage{}
	if len(d.Executor.Config) > 0 {
		if err := json.Unmarshal(d.Executor.Config, &cfg); err != nil {
			return invalid(fmt.Sprintf("definition.executor.config_json is not a JSON object: %v", err))
		}
	}
	ref, err := put(module)
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("wasm_module: %w", err))
	}
	cfg["module"], _ = json.Marshal(ref)
	d.Executor.Config, _ = json.Marshal(cfg)
	return nil
}

// validateDefinition answers a validate_only request: d checked as a
// create or update would check it (Manager.CheckDefinition), as it would
// be stored, storing nothing.
func validateDefinition(ctx context.Context, d store.Definition) (*pb.Definition, error) {
	got, err := managerOf(ctx).Admin().CheckDefinition(ctx, d)
	if err != nil {
		return nil, toConnect(err)
	}
	return definitionToProto(got), nil
}
