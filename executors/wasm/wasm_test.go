package wasm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/internal/xtest"
	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// build compiles the Go program in dir to a wasip1 module, once per test
// binary.
var builds sync.Map // dir → func() ([]byte, error)

func build(t testing.TB, dir string) []byte {
	t.Helper()
	f, _ := builds.LoadOrStore(dir, sync.OnceValues(func() ([]byte, error) {
		out := filepath.Join(os.TempDir(), "jobkit-wasm-test-"+filepath.Base(dir)+"-"+strings.ReplaceAll(time.Now().Format("150405.000000000"), ".", "")+".wasm")
		defer os.Remove(out)
		cmd := exec.Command("go", "build", "-o", out, dir)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, errors.New(string(b) + err.Error())
		}
		return os.ReadFile(out)
	}))
	b, err := f.(func() ([]byte, error))()
	if err != nil {
		t.Fatalf("GOOS=wasip1 GOARCH=wasm go build %s: %v", dir, err)
	}
	return b
}

// trapModule is a hand-assembled module whose _start executes
// unreachable; noopModule's _start returns at once.
var (
	trapModule = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type: () -> ()
		0x03, 0x02, 0x01, 0x00, // func 0: type 0
		0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export _start
		0x0a, 0x05, 0x01, 0x03, 0x00, 0x00, 0x0b} // body: unreachable, end
	noopModule = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00,
		0x01, 0x04, 0x01, 0x60, 0x00, 0x00,
		0x03, 0x02, 0x01, 0x00,
		0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00,
		0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b} // body: end
)

// cacheDir keeps compiled code for the whole test binary, so each
// Go-built module is compiled once.
var cacheDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "jobkit-wasm-cache-")
	if err != nil {
		panic(err)
	}
	cacheDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// setup starts a manager running a wasm type; goModules says the test
// runs Go-built modules (see raceEnabled).
func setup(t *testing.T, goModules bool) (*job.Manager, *wasm.DirModules, *wasm.Type) {
	t.Helper()
	mods, err := wasm.NewDirModules(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	typ, err := wasm.New(wasm.Options{Modules: mods, MaxTimeout: time.Minute, CacheDir: cacheDir, Interpreter: goModules && raceEnabled})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = typ.Close(context.Background()) })
	return xtest.Manager(t, typ), mods, typ
}

func put(t *testing.T, mods *wasm.DirModules, b []byte) string {
	t.Helper()
	ref, err := mods.Put(b)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestWasmGreetBuiltFromGo(t *testing.T) {
	t.Parallel()
	m, mods, _ := setup(t, true)
	ref := put(t, mods, build(t, "./example/greet"))
	xtest.Define(t, m, "greet", store.ExecutorWasm, map[string]any{"module": ref}, 0, 0)
	inst := xtest.Run(t, m, "greet", "world", "wasm")
	var res struct{ Greetings []string }
	if inst.State != job.Completed || inst.ResultsInto(&res) != nil || strings.Join(res.Greetings, ";") != "hello, world;hello, wasm" {
		t.Fatalf("state %v error %v result %+v", inst.State, inst.Error, res)
	}
	if logs := xtest.Logs(t, m, inst.ID); !strings.Contains(logs, "greeting 2 names") {
		t.Fatalf("logs %q, want the module's stderr", logs)
	}
}

func TestWasmMisbehaving(t *testing.T) {
	t.Parallel()
	m, mods, _ := setup(t, true)
	modes := put(t, mods, build(t, "./testdata/modes"))
	// Generous time limits but for the loop: a Go module starts slowly in
	// the interpreter under -race on a loaded machine.
	xtest.Define(t, m, "modes", store.ExecutorWasm, map[string]any{"module": modes, "memory_mb": 64, "timeout": "60s"}, 0, 0)
	xtest.Define(t, m, "loop", store.ExecutorWasm, map[string]any{"module": modes, "memory_mb": 64, "timeout": "1s"}, 0, 0)
	xtest.Define(t, m, "trap", store.ExecutorWasm, map[string]any{"module": put(t, mods, trapModule)}, 3, 0)

	// Compiled (and cached) first, so the clock below times the run.
	if inst := xtest.Run(t, m, "modes", "ok"); inst.State != job.Completed {
		t.Fatalf("ok: state %v error %v", inst.State, inst.Error)
	}
	start := time.Now()
	inst := xtest.Run(t, m, "loop", "loop")
	if inst.State != job.Terminated || !strings.Contains(inst.Error, "time limit exceeded") {
		t.Fatalf("loop: state %v error %v", inst.State, inst.Error)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("a looping module ran %v against a 1s limit", took)
	}
	// Its own definition: the interpreter (under -race) is slow to zero
	// memory, and the limit is what must stop it, not the time.
	xtest.Define(t, m, "alloc", store.ExecutorWasm, map[string]any{"module": modes, "memory_mb": 32, "timeout": "60s"}, 0, 0)
	inst = xtest.Run(t, m, "alloc", "alloc")
	if inst.State != job.Terminated || inst.Error == "" {
		t.Fatalf("alloc: state %v error %v", inst.State, inst.Error)
	}
	if logs := xtest.Logs(t, m, inst.ID); !strings.Contains(logs, "out of memory") {
		t.Fatalf("alloc: error %v logs %q; want the module's out of memory", inst.Error, logs)
	}
	inst = xtest.Run(t, m, "trap")
	if inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "trapped") {
		t.Fatalf("trap: state %v attempt %d error %v; want Terminated at once", inst.State, inst.Attempt, inst.Error)
	}
	if inst = xtest.Run(t, m, "modes", "exit3"); inst.State != job.Terminated || !strings.Contains(inst.Error, "exit status 3") {
		t.Fatalf("exit3: state %v error %v", inst.State, inst.Error)
	}
	// No filesystem unless granted.
	inst = xtest.Run(t, m, "modes", "fs")
	if inst.State != job.Completed || inst.Error != "" {
		t.Fatalf("fs: state %v error %v", inst.State, inst.Error)
	}
	if logs := xtest.Logs(t, m, inst.ID); !strings.Contains(logs, "read /etc/passwd: 0 bytes") {
		t.Fatalf("logs %q; want /etc/passwd unreadable", logs)
	}
	// The node is healthy after all that: a good module still runs.
	if inst = xtest.Run(t, m, "modes", "ok"); inst.State != job.Completed {
		t.Fatalf("ok after the failures: state %v error %v", inst.State, inst.Error)
	}
}

func TestWasmNotWasm(t *testing.T) {
	t.Parallel()
	m, mods, _ := setup(t, false)
	if _, err := mods.Put([]byte("#!/bin/sh\necho hi\n")); !errors.Is(err, wasm.ErrModule) {
		t.Fatalf("Put of a shell script = %v, want ErrModule", err)
	}
	small, _ := wasm.NewDirModules(t.TempDir(), 16)
	if _, err := small.Put(noopModule); !errors.Is(err, wasm.ErrModule) {
		t.Fatalf("Put over the size limit = %v, want ErrModule", err)
	}
	// Magic number right, the rest garbage: stored, and refused when
	// compiled.
	bad := append(append([]byte{}, noopModule[:8]...), 0xff, 0xff, 0xff)
	xtest.Define(t, m, "garbage", store.ExecutorWasm, map[string]any{"module": put(t, mods, bad)}, 3, 0)
	if inst := xtest.Run(t, m, "garbage"); inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "invalid module") {
		t.Fatalf("garbage: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Error)
	}
	// A module this node does not have.
	xtest.Define(t, m, "absent", store.ExecutorWasm, map[string]any{"module": wasm.Ref([]byte("nothing"))}, 3, 0)
	if inst := xtest.Run(t, m, "absent"); inst.State != job.Terminated || !strings.Contains(inst.Error, "module not found") {
		t.Fatalf("absent: state %v error %v", inst.State, inst.Error)
	}
	for name, cfg := range map[string]map[string]any{
		"no module":      {},
		"bad reference":  {"module": "greet.wasm"},
		"memory":         {"module": wasm.Ref(nil), "memory_mb": 1 << 20},
		"timeout":        {"module": wasm.Ref(nil), "timeout": "2h"},
		"unknown field":  {"module": wasm.Ref(nil), "network": true},
		"relative mount": {"module": wasm.Ref(nil), "mounts": []map[string]any{{"host": "data", "guest": "/data"}}},
	} {
		if err := xtest.TryDefine(m, "bad", store.ExecutorWasm, cfg, 0, 0); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("%s: %v, want the config refused", name, err)
		}
	}
}

func TestWasmModulesOnDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mods, err := wasm.NewDirModules(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	typ, err := wasm.New(wasm.Options{Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	defer typ.Close(context.Background())
	ref := put(t, mods, noopModule)
	if again := put(t, mods, noopModule); again != ref {
		t.Fatalf("the same bytes put twice: %s, %s", ref, again)
	}
	if err := typ.Compile(context.Background(), ref, 0); err != nil {
		t.Fatalf("Compile of the no-op module: %v", err)
	}
	// A file changed on disk under its name is refused.
	h, _ := wasm.ParseRef(ref)
	if err := os.WriteFile(filepath.Join(dir, h+".wasm"), trapModule, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mods.Get(ref); !errors.Is(err, wasm.ErrModule) {
		t.Fatalf("Get of a changed file = %v, want ErrModule", err)
	}
	if _, err := mods.Get(wasm.Ref(trapModule)); !errors.Is(err, wasm.ErrNoModule) {
		t.Fatalf("Get of a module never put = %v, want ErrNoModule", err)
	}
}

// TestStoreModules: modules kept in a store's Documents, chunked, read
// back through another handle and run; a changed chunk is refused.
func TestStoreModules(t *testing.T) {
	t.Parallel()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	mods := wasm.NewStoreModules(st, 0)
	if _, err := mods.Put([]byte("not wasm")); !errors.Is(err, wasm.ErrModule) {
		t.Fatalf("Put of non-Wasm bytes = %v", err)
	}
	// Over one chunk: the no-op module with a custom section of 600 KiB.
	big := append([]byte{}, noopModule...)
	payload := make([]byte, 600<<10)
	for i := range payload {
		payload[i] = byte(i)
	}
	sec := append([]byte{1, 'x'}, payload...) // name "x", then the bytes
	big = append(big, 0x00)                   // custom section id
	big = appendULEB(big, len(sec))
	big = append(big, sec...)
	ref, err := mods.Put(big)
	if err != nil {
		t.Fatal(err)
	}
	got, err := wasm.NewStoreModules(st, 0).Get(ref)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get = %d bytes, %v; want the %d bytes put", len(got), err, len(big))
	}
	typ, err := wasm.New(wasm.Options{Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	defer typ.Close(context.Background())
	m := xtest.Manager(t, typ)
	xtest.Define(t, m, "big", store.ExecutorWasm, map[string]any{"module": ref}, 0, 0)
	if inst := xtest.Run(t, m, "big"); inst.State != job.Completed {
		t.Fatalf("the module read from the store: state %v error %v", inst.State, inst.Error)
	}
	// A chunk changed in the store is refused.
	h, _ := wasm.ParseRef(ref)
	if _, err := st.PutDocument(context.Background(), &store.PutDocumentParams{Collection: wasm.ModulesCollection, Name: h + ".0001", Body: []byte(`"AAAA"`), IfVersion: store.AnyVersion, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := mods.Get(ref); !errors.Is(err, wasm.ErrModule) {
		t.Fatalf("Get after a chunk changed = %v, want ErrModule", err)
	}
	if _, err := mods.Get(wasm.Ref([]byte("never"))); !errors.Is(err, wasm.ErrNoModule) {
		t.Fatalf("Get of a module never put = %v, want ErrNoModule", err)
	}
}

func appendULEB(b []byte, v int) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}
