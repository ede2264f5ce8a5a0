package server

import (
	"context"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/store/memdbstore"
)

// checkingDir is a real module directory that can check a module without
// storing it, as jobd's module stores do.
type checkingDir struct{ *wasm.DirModules }

func (d checkingDir) Check(b []byte) (string, error) {
	if err := wasm.CheckModule(b, d.MaxBytes()); err != nil {
		return "", err
	}
	return wasm.Ref(b), nil
}

// TestValidateOnlyDefinition: validate_only checks a definition as a
// create or an update would, executor config included, answers with it as
// it would be stored, and stores nothing, not even an uploaded module.
func TestValidateOnlyDefinition(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mods, err := wasm.NewDirModules(dir, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := wasm.New(wasm.Options{Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wt.Close(context.Background()) })
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(0), job.WithExecutorTypes(webhook.New(webhook.Options{}), wt))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Namespaces: map[string]*job.Manager{"default": m}, WasmModules: func(*job.Manager) ModuleStore { return checkingDir{mods} }})
	if err != nil {
		t.Fatal(err)
	}
	defs := jobkitv1connect.NewDefinitionServiceClient(httpClient(t, false, "", "default"), serve(t, srv))
	ctx := context.Background()
	hook := func(url string) *pb.Definition {
		return &pb.Definition{Kind: "hook", Executor: &pb.ExecutorSpec{Type: "webhook", ConfigJson: `{"url": "` + url + `", "unsigned": true}`}}
	}

	// Valid: answered as it would be stored, nothing stored.
	res, err := defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: hook("https://example.com/{{.ID}}"), ValidateOnly: true}))
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Msg.GetDefinition(); d.GetQueue() != job.DefaultQueue || d.GetExecutor().GetConfigJson() != `{"unsigned":true,"url":"https://example.com/{{.ID}}"}` {
		t.Fatalf("validated definition: %v", d)
	}
	if _, err := defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: "hook"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("after a validate-only create, GetDefinition = %v, want NotFound", err)
	}

	// A bad URL template: the error a create gives, on both calls.
	bad := hook("https://example.com/{{.ID")
	_, verr := defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: bad, ValidateOnly: true}))
	_, cerr := defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: bad}))
	for _, err := range []error{verr, cerr} {
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "webhook executor: invalid config") || !strings.Contains(err.Error(), "url") {
			t.Fatalf("a bad URL template: %v, want InvalidArgument naming the url", err)
		}
	}

	// Update: checked, not stored (the stored version stays).
	if _, err := defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: hook("https://example.com/a")})); err != nil {
		t.Fatal(err)
	}
	if _, err := defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: bad, ValidateOnly: true})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("validate-only update with a bad template: %v", err)
	}
	up, err := defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: hook("https://example.com/b"), ValidateOnly: true}))
	if err != nil || !strings.Contains(up.Msg.GetDefinition().GetExecutor().GetConfigJson(), "/b") {
		t.Fatalf("validate-only update: %v %v", up, err)
	}
	got, err := defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: "hook"}))
	if err != nil || got.Msg.GetDefinition().GetVersion() != 1 || !strings.Contains(got.Msg.GetDefinition().GetExecutor().GetConfigJson(), "/a") {
		t.Fatalf("after a validate-only update the stored definition is %v (%v), want version 1 unchanged", got, err)
	}

	// A module: checked and referenced, not stored; bytes that are not
	// Wasm, or too many, refused.
	module := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	wdef := &pb.Definition{Kind: "mod", Executor: &pb.ExecutorSpec{Type: "wasm", ConfigJson: `{"memory_mb": 16}`}}
	vr, err := defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: wdef, WasmModule: module, ValidateOnly: true}))
	if err != nil || !strings.Contains(vr.Msg.GetDefinition().GetExecutor().GetConfigJson(), wasm.Ref(module)) {
		t.Fatalf("validate-only with a module: %v %v", vr, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a validate-only request stored %d files in the module directory", len(ents))
	}
	for _, b := range [][]byte{[]byte("#!/bin/sh\n"), append(module, make([]byte, 2<<10)...)} {
		_, err := defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: wdef, WasmModule: b, ValidateOnly: true}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "invalid module") {
			t.Fatalf("validate-only with a bad module (%d bytes): %v", len(b), err)
		}
	}
}
