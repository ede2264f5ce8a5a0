package leancore

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// heavy are substrings of module paths that must never reach the module
// graph of a program that imports only the core module, each with what it
// stands for.
var heavy = []struct{ substr, what string }{
	{"grpc", "gRPC"},
	{"protobuf", "protobuf"},
	{"genproto", "protobuf-generated Google APIs"},
	{"etcd", "etcd"},
	{"redis", "Redis"},
	{"valkey", "Valkey"},
	{"pgx", "pgx"},
	{"jackc/", "pgx (jackc)"},
	{"prometheus", "Prometheus"},
	{"connectrpc", "connect-go"},
	{"opentelemetry", "OpenTelemetry"},
	{"spf13/cobra", "cobra"},
}

// goCmd runs the go command in dir outside any workspace, so it sees the
// module graph a user of the module would, and returns its standard output.
// It never writes go.mod or go.sum (-mod=readonly) except where the caller
// runs go mod tidy itself.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out)
}

// coreDir returns the directory of the core module's go.mod.
func coreDir(t *testing.T) string {
	t.Helper()
	gomod := strings.TrimSpace(goCmd(t, ".", "env", "GOMOD"))
	if filepath.Base(gomod) != "go.mod" {
		t.Fatalf("go env GOMOD = %q: run this test inside the core module", gomod)
	}
	return filepath.Dir(gomod)
}

// checkGraph fails t for every module of the `go list -m all` output that
// matches a heavy client.
func checkGraph(t *testing.T, who, graph string) {
	t.Helper()
	n := 0
	for line := range strings.Lines(graph) {
		mod := strings.Fields(line)
		if len(mod) == 0 {
			continue
		}
		n++
		path := strings.ToLower(mod[0])
		for _, h := range heavy {
			if strings.Contains(path, h.substr) {
				t.Errorf("%s has %s in its module graph (%s): move the code that needs it into its own module (doc/design.md, \"Module layout\")",
					who, strings.TrimSpace(line), h.what)
			}
		}
	}
	if n < 2 {
		t.Fatalf("%s: go list -m all listed %d modules, want the module and its dependencies:\n%s", who, n, graph)
	}
}

// TestProgramImportingOnlyCore builds the module graph of a user program
// that imports only github.com/jobkit/job and checks it holds no heavy
// client.
func TestProgramImportingOnlyCore(t *testing.T) {
	core := coreDir(t)
	dir := t.TempDir()
	gomod := "module example.com/leancoreprobe\n\ngo 1.26.0\n\n" +
		"require github.com/jobkit/job v0.0.0\n\n" +
		"replace github.com/jobkit/job => " + core + "\n"
	main := `package main

import (
	"context"

	"github.com/jobkit/job"
)

func main() {
	mgr, err := job.NewManager()
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(context.Background())
	_ = mgr.Stop(context.Background())
}
`
	sum, err := os.ReadFile(filepath.Join(core, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "main.go": []byte(main), "go.sum": sum} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "tidy")
	if out := goCmd(t, dir, "list", "-deps", "."); !strings.Contains(out, "github.com/jobkit/job\n") {
		t.Fatalf("the probe program does not import github.com/jobkit/job; go list -deps:\n%s", out)
	}
	checkGraph(t, "a program importing only github.com/jobkit/job", goCmd(t, dir, "list", "-m", "all"))
}

// TestCoreModuleGraph checks the core module's own graph, test-only
// requirements included: what its go.mod hands every user.
func TestCoreModuleGraph(t *testing.T) {
	checkGraph(t, "module github.com/jobkit/job", goCmd(t, coreDir(t), "list", "-m", "all"))
}
