// Package releasetest plays a user outside the repository: it releases the
// repository's modules with scripts/release.sh in a clone, serves them at
// the release tag from a file-based module proxy, and builds and runs the
// quickstart, the Redis example and jobd from a fresh module that has no
// replace directive, as `go get` would give them to anyone.
package releasetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/jobkit/job/internal/testserver"
)

// version is the release the test makes in its clone: unique to the run,
// so the module cache never serves one run's modules to another, and
// removed from the cache when the test ends.
var version = fmt.Sprintf("v0.99.0-releasetest.%d", time.Now().UnixNano())

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	os.Exit(code)
}

// TestReleasedModulesWorkOutsideTheRepository releases HEAD (committed
// code only: the clone does not see uncommitted edits) and builds from the
// released modules alone.
func TestReleasedModulesWorkOutsideTheRepository(t *testing.T) {
	root := strings.TrimSpace(run(t, ".", nil, "git", "rev-parse", "--show-toplevel"))
	work := t.TempDir()
	clone := filepath.Join(work, "repo")
	run(t, work, nil, "git", "clone", "-q", root, clone)
	gitEnv := []string{"GIT_AUTHOR_NAME=releasetest", "GIT_AUTHOR_EMAIL=releasetest@invalid",
		"GIT_COMMITTER_NAME=releasetest", "GIT_COMMITTER_EMAIL=releasetest@invalid"}
	out := run(t, clone, gitEnv, "bash", "scripts/release.sh", version)
	t.Logf("release.sh: %s", strings.TrimSpace(out))

	// The file-based proxy: every tagged module's .info, .mod and .zip,
	// made from the repository at its tag as a module proxy makes them.
	proxy := filepath.Join(work, "proxy")
	tags := strings.Fields(run(t, clone, nil, "git", "tag", "--points-at", "HEAD"))
	released := map[string]*modfile.File{}
	for _, tag := range tags {
		subdir := strings.TrimSuffix(strings.TrimSuffix(tag, version), "/")
		f := serveModule(t, proxy, clone, tag, subdir)
		released[f.Module.Mod.Path] = f
	}
	for _, must := range []string{"github.com/jobkit/job", "github.com/jobkit/job/store/redisstore", "github.com/jobkit/job/server",
		"github.com/jobkit/job/metrics", "github.com/jobkit/job/otel",
		// internal, and required by the Redis and Valkey plugins
		"github.com/jobkit/job/store/internal/redisscript", "github.com/jobkit/job/store/internal/redisscript/scripttest"} {
		if released[must] == nil {
			t.Fatalf("release.sh tagged %v; %s is not among them", tags, must)
		}
	}
	// A module with an internal path element is released only when a
	// released module requires it.
	required := map[string]bool{}
	for _, f := range released {
		for _, r := range f.Require {
			required[r.Mod.Path] = true
		}
	}
	for path := range released {
		if strings.HasPrefix(path, "github.com/jobkit/job/bench") || strings.HasPrefix(path, "github.com/jobkit/job/examples") ||
			strings.HasPrefix(path, "github.com/jobkit/job/tools") {
			t.Errorf("release.sh released %s, a program no one imports", path)
		}
		if strings.Contains(strings.TrimPrefix(path, "github.com/jobkit/job")+"/", "/internal/") && !required[path] {
			t.Errorf("release.sh released %s, an internal module that no released module requires", path)
		}
	}
	for _, not := range []string{"github.com/jobkit/job/internal/faulttest", "github.com/jobkit/job/internal/releasetest",
		// the modules holding metrics' and otel's tests against Redis
		"github.com/jobkit/job/metrics/internal/redistest", "github.com/jobkit/job/otel/internal/redistest"} {
		if released[not] != nil {
			t.Errorf("release.sh released %s, a test harness no one imports", not)
		}
	}

	// A user's module: no replace, every jobkit module from the proxy.
	// Third-party modules come from this machine's module cache (a valid
	// file proxy), falling back to the configured proxy; the checksum
	// database is off because the jobkit modules exist only here. The
	// module cache is the machine's, so what earlier builds compiled from
	// it is reused; the release's own modules leave it when the test ends.
	user := filepath.Join(work, "user")
	shared := strings.TrimSpace(run(t, ".", nil, "go", "env", "GOMODCACHE"))
	t.Cleanup(func() { forgetRelease(t, shared) })
	upstream := strings.TrimSpace(run(t, ".", nil, "go", "env", "GOPROXY"))
	goEnv := []string{
		"GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOTOOLCHAIN=local",
		"GOPROXY=" + fileURL(proxy) + "," + fileURL(filepath.Join(shared, "cache", "download")) + "," + upstream,
	}
	for _, dir := range []string{"quickstart", "redisexample"} {
		if err := os.MkdirAll(filepath.Join(user, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, filepath.Join(clone, "examples", "quickstart", "main.go"), filepath.Join(user, "quickstart", "main.go"))
	copyFile(t, filepath.Join(clone, "examples", "redis", "main.go"), filepath.Join(user, "redisexample", "main.go"))
	run(t, user, goEnv, "go", "mod", "init", "example.com/user")
	run(t, user, goEnv, "go", "get", "github.com/jobkit/job@"+version, "github.com/jobkit/job/store/redisstore@"+version,
		"github.com/jobkit/job/server@"+version)
	run(t, user, goEnv, "go", "mod", "tidy")
	// Tidy drops the server (nothing imports it yet); jobd is built from
	// the module as `go install ...@version` would.
	run(t, user, goEnv, "go", "get", "github.com/jobkit/job/server@"+version)

	// Every jobkit module in the user's graph is the release, and nothing
	// is replaced.
	mods := run(t, user, goEnv, "go", "list", "-m", "-json", "all")
	dec := json.NewDecoder(strings.NewReader(mods))
	for dec.More() {
		var m struct {
			Path, Version string
			Replace       *struct{ Path string }
		}
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		if m.Replace != nil {
			t.Errorf("%s is replaced by %s in the user's graph", m.Path, m.Replace.Path)
		}
		if strings.HasPrefix(m.Path, "github.com/jobkit/") && m.Version != version {
			t.Errorf("the user's graph has %s at %s, want the release %s", m.Path, m.Version, version)
		}
	}

	bin := filepath.Join(work, "bin")
	run(t, user, goEnv, "go", "build", "-o", bin+"/", "./quickstart", "./redisexample", "github.com/jobkit/job/server/cmd/jobd")

	// The quickstart runs on the embedded store.
	if out := run(t, user, nil, filepath.Join(bin, "quickstart")); !strings.Contains(out, "sum[1 2] = [3] (completed)") {
		t.Errorf("the quickstart built from the release printed:\n%s\nwant a line \"sum[1 2] = [3] (completed)\"", out)
	}
	// The Redis example runs its jobs on a real redis-server.
	if out := run(t, user, nil, filepath.Join(bin, "redisexample"), "-addr", testserver.Redis(t), "-jobs", "5"); !strings.Contains(out, "5 jobs:") {
		t.Errorf("the Redis example built from the release printed:\n%s\nwant a line \"5 jobs: ...\"", out)
	}
	// jobd starts on the embedded store and answers /healthz.
	runJobd(t, filepath.Join(bin, "jobd"))
}

// TestLibraryUsersGetNoTestDependencies: a program that imports only the
// core, metrics and otel does not get the Redis client, etcd, pgx or
// gRPC into its module graph through their go.mod files (the modules'
// own tests against real servers live in modules of their own).
func TestLibraryUsersGetNoTestDependencies(t *testing.T) {
	root := strings.TrimSpace(run(t, ".", nil, "git", "rev-parse", "--show-toplevel"))
	for _, m := range []string{".", "metrics", "otel"} {
		data, err := os.ReadFile(filepath.Join(root, m, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(m+"/go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.Require {
			for _, heavy := range []string{"github.com/redis/", "github.com/valkey-io/", "go.etcd.io/", "github.com/jackc/",
				"google.golang.org/grpc", "github.com/jobkit/job/store/"} {
				if strings.HasPrefix(r.Mod.Path, heavy) {
					t.Errorf("%s/go.mod requires %s: every user of %s gets it in their module graph; move the test that needs it to a module of its own",
						m, r.Mod.Path, f.Module.Mod.Path)
				}
			}
		}
	}
}

// forgetRelease removes the test's release from the module cache: the
// extracted modules (github.com/jobkit/job...@version) and their downloads
// (cache/download/github.com/jobkit/.../@v/version.* and its line in each
// @v/list). The cache's files
// are read-only, so each directory is made writable first.
func forgetRelease(t *testing.T, modcache string) {
	var doomed []string
	root := filepath.Join(modcache, "github.com", "jobkit")
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && strings.HasSuffix(d.Name(), "@"+version) {
			doomed = append(doomed, path)
			return filepath.SkipDir
		}
		return nil
	})
	dl := filepath.Join(modcache, "cache", "download", "github.com", "jobkit")
	_ = filepath.WalkDir(dl, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil || d.IsDir():
		case strings.HasPrefix(d.Name(), version+"."):
			doomed = append(doomed, path)
		case d.Name() == "list":
			// The versions the cache has seen: drop the release's line.
			if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), version) {
				kept := strings.ReplaceAll(string(data), version+"\n", "")
				if err := os.WriteFile(path, []byte(kept), 0o644); err != nil {
					t.Errorf("removing the test's release from %s: %v", path, err)
				}
			}
		}
		return nil
	})
	for _, p := range doomed {
		_ = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o755)
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			t.Errorf("removing the test's release from the module cache: %v", err)
		}
	}
}

// serveModule writes the module in subdir of repo at tag into the
// file-based proxy and returns its go.mod.
func serveModule(t *testing.T, proxy, repo, tag, subdir string) *modfile.File {
	t.Helper()
	modFile := "go.mod"
	if subdir != "" {
		modFile = subdir + "/go.mod"
	}
	data := run(t, repo, nil, "git", "show", tag+":"+modFile)
	mf, err := modfile.Parse(modFile, []byte(data), nil)
	if err != nil {
		t.Fatalf("%s at %s: %v", modFile, tag, err)
	}
	if mf.Module == nil || mf.Module.Mod.Path == "" {
		t.Fatalf("%s at %s declares no module path", modFile, tag)
	}
	path := mf.Module.Mod.Path
	escaped, err := module.EscapePath(path)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":%q}`, version, time.Now().UTC().Format(time.RFC3339))
	zf, err := os.Create(filepath.Join(dir, version+".zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer zf.Close()
	if err := modzip.CreateFromVCS(zf, module.Version{Path: path, Version: version}, repo, tag, subdir); err != nil {
		t.Fatalf("zipping %s at %s: %v", path, tag, err)
	}
	for name, content := range map[string]string{"list": version + "\n", version + ".info": info, version + ".mod": data} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return mf
}

// runJobd starts jobd on the embedded store on a free port, waits for its
// /healthz and stops it.
func runJobd(t *testing.T, bin string) {
	t.Helper()
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--listen", addr)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("jobd built from the release exited (%v) before answering /healthz; its log:\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("jobd built from the release did not answer /healthz on %s within 30 s; its log:\n%s", addr, logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run runs a command in dir with env added to the environment and returns
// its standard output, failing the test with both outputs on an error.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := exec.Command(name, args...)
	c.Dir, c.Stdout, c.Stderr = dir, &stdout, &stderr
	c.Env = append(os.Environ(), env...)
	start := time.Now()
	defer func() { t.Logf("%s %s: %v", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond)) }()
	if err := c.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fileURL is path as a file:// URL for GOPROXY.
func fileURL(path string) string { return "file://" + filepath.ToSlash(path) }
