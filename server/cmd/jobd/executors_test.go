package main_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/webhook"
)

// Executors as data (issue 22) through a bare jobd process, created and
// test-run with the jobctl binary, on the embedded store (Wasm modules in
// a directory) and on Redis (Wasm modules in the store).

const (
	e2eSignKey = "e2e-sign-key-3b9f0c"
	e2eToken   = "e2e-api-token-d41e77"
)

var greetWasm = sync.OnceValues(func() (string, error) {
	out := filepath.Join(binDir, "greet.wasm")
	cmd := exec.Command("go", "build", "-C", "../../../executors", "-o", out, "./wasm/example/greet")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &exec.Error{Name: string(b), Err: err}
	}
	return out, nil
})

func TestExecutorsAsData(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"memdb", "redis"} {
		t.Run(st, func(t *testing.T) {
			t.Parallel()
			executorsAsData(t, st)
		})
	}
}

func executorsAsData(t *testing.T, st string) {
	dir := t.TempDir()
	secretsDir := filepath.Join(dir, "secrets")
	if err := os.Mkdir(secretsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretsDir, "hook-key"), []byte(e2eSignKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The receiver verifies every request's signature.
	var verified, bad, busy atomic.Int32
	var authSeen atomic.Value
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := webhook.Verify([]byte(e2eSignKey), r.Header, b, time.Now(), time.Minute); err != nil {
			bad.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		verified.Add(1)
		authSeen.Store(r.Header.Get("Authorization"))
		if r.URL.Path == "/reject" {
			http.Error(w, "no such build", http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/busy" && busy.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"ok":true,"got":` + string(b) + `}`))
	}))
	defer recv.Close()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var internalHits atomic.Int32
	internal := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { internalHits.Add(1) })}}
	internal.Start()
	defer internal.Close()

	args := []string{"--workers", "4", "--namespace", uniqueNS(t),
		"--webhook", "--webhook-allow", "127.0.0.1",
		"--command-allow", "/bin/echo,/bin/sh",
		"--wasm-cache-dir", filepath.Join(binDir, "wasm-cache"),
		"--secrets-dir", secretsDir}
	if st == "redis" {
		// Modules kept in the store (shared by every jobd on it).
		args = append(args, "--store", "redis", "--redis-addr", redisAddr(t), "--wasm")
	} else {
		args = append(args, "--wasm-modules", filepath.Join(dir, "modules"))
	}
	p := startJobd(t, jobdBin(), []string{"JOBD_SECRET_API_TOKEN=" + e2eToken}, args...)
	env := []string{"JOBCTL_ADDR=" + p.api}
	run := func(want int, args ...string) string {
		t.Helper()
		code, out := jobctl(t, env, args...)
		if code != want {
			t.Fatalf("jobctl %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	type inst struct {
		Instance struct {
			State      string `json:"state"`
			Attempt    int    `json:"attempt"`
			ResultJSON string `json:"resultJson"`
			Error      string `json:"error"`
			ID         string `json:"id"`
		} `json:"instance"`
	}
	test := func(want int, kind, args string) inst {
		t.Helper()
		out := run(want, "definitions", "test", kind, "--args", args, "-o", "json")
		var in inst
		if err := json.Unmarshal([]byte(out[:strings.LastIndexByte(out, '}')+1]), &in); err != nil {
			t.Fatalf("definitions test %s: %v\n%s", kind, err, out)
		}
		return in
	}

	// Webhook: signed, a header from a secret, the response kept.
	hookCfg := `{"url": "` + recv.URL + `/build/{{index .Args 0}}", "secret_ref": "hook-key", "headers": {"Authorization": "Bearer {{secret \"api-token\"}}"}}`
	run(0, "definitions", "create", "hook", "--executor", "webhook", "--config", hookCfg, "--retries", "2")
	if out := run(0, "definitions", "list"); !strings.Contains(out, "EXECUTOR") || !strings.Contains(out, "webhook") {
		t.Fatalf("definitions list:\n%s", out)
	}
	in := test(0, "hook", `["b1"]`)
	if in.Instance.State != "STATE_COMPLETED" || !strings.Contains(in.Instance.ResultJSON, `"status":200`) || !strings.Contains(in.Instance.ResultJSON, `\"ok\":true`) {
		t.Fatalf("webhook: %+v", in.Instance)
	}
	if verified.Load() != 1 || bad.Load() != 0 || authSeen.Load() != "Bearer "+e2eToken {
		t.Fatalf("receiver: %d verified, %d refused, Authorization %v", verified.Load(), bad.Load(), authSeen.Load())
	}
	// Edit: --check has the server check a change and stores nothing (a
	// bad URL template refused, naming it); then the change is saved and
	// the next run uses it.
	if code, out := jobctl(t, env, "definitions", "update", "hook", "--config", `{"url": "`+recv.URL+`/v2/{{index .Args 0"}`, "--check"); code == 0 || !strings.Contains(out, "template url") {
		t.Fatalf("update --check with a bad URL template: exit %d\n%s", code, out)
	}
	hookV2 := `{"url": "` + recv.URL + `/v2/{{index .Args 0}}", "secret_ref": "hook-key", "headers": {"Authorization": "Bearer {{secret \"api-token\"}}"}}`
	if out := run(0, "definitions", "update", "hook", "--config", hookV2, "--check", "-o", "json"); !strings.Contains(out, "/v2/") {
		t.Fatalf("update --check of a good config:\n%s", out)
	}
	var stored struct {
		Definition struct {
			Version string `json:"version"`
		} `json:"definition"`
	}
	if out := run(0, "definitions", "get", "hook", "-o", "json"); strings.Contains(out, "/v2/") || json.Unmarshal([]byte(out), &stored) != nil || stored.Definition.Version != "1" {
		t.Fatalf("update --check stored something:\n%s", out)
	}
	run(0, "definitions", "update", "hook", "--config", hookV2)
	if out := run(0, "definitions", "test", "hook", "--args", `["b2"]`); !strings.Contains(out, "/v2/b2") || !strings.Contains(out, "completed") {
		t.Fatalf("the edited webhook's test run:\n%s", out)
	}
	if code, out := jobctl(t, env, "definitions", "create", "nohook", "--executor", "webhook", "--config", `{"method": "BREW", "url": "https://example.com/"}`, "--check"); code == 0 || !strings.Contains(out, "method") {
		t.Fatalf("create --check with a bad method: exit %d\n%s", code, out)
	}
	if code, _ := jobctl(t, env, "definitions", "get", "nohook"); code == 0 {
		t.Fatal("create --check stored the definition")
	}

	// 503 with Retry-After: 1, then 200: retried, no sooner than asked.
	run(0, "definitions", "create", "busy", "--executor", "webhook", "--config", `{"url": "`+recv.URL+`/busy", "secret_ref": "hook-key"}`, "--retries", "3")
	start := time.Now()
	if in := test(0, "busy", `[]`); in.Instance.State != "STATE_COMPLETED" || in.Instance.Attempt != 2 || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("webhook 503 then 200: %+v after %v", in.Instance, time.Since(start))
	}
	// 400: permanent, one request; a forbidden destination: refused.
	run(0, "definitions", "create", "reject", "--executor", "webhook", "--config", `{"url": "`+recv.URL+`/reject", "secret_ref": "hook-key"}`, "--retries", "3")
	if in := test(1, "reject", `[]`); in.Instance.State != "STATE_TERMINATED" || in.Instance.Attempt != 1 || !strings.Contains(in.Instance.Error, "status 400") {
		t.Fatalf("webhook 400: %+v", in.Instance)
	}
	run(0, "definitions", "create", "ssrf", "--executor", "webhook", "--config", `{"url": "`+internal.URL+`", "unsigned": true}`)
	if in := test(1, "ssrf", `[]`); in.Instance.State != "STATE_TERMINATED" || !strings.Contains(in.Instance.Error, "destination forbidden") || internalHits.Load() != 0 {
		t.Fatalf("webhook to a forbidden address: %+v, %d hits", in.Instance, internalHits.Load())
	}

	// Command: output, metacharacters as data, not allowed, timeout.
	run(0, "definitions", "create", "say", "--executor", "command", "--config", `{"argv": ["/bin/echo", "{{index .Args 0}}"]}`)
	if in := test(0, "say", `["a; rm -rf / $(id)"]`); in.Instance.State != "STATE_COMPLETED" || !strings.Contains(in.Instance.ResultJSON, `a; rm -rf / $(id)\n`) {
		t.Fatalf("command: %+v", in.Instance)
	}
	out := run(0, "definitions", "test", "say", "--args", `["hello"]`)
	if !strings.Contains(out, `"exit_code":0`) || !strings.Contains(out, "  hello") {
		t.Fatalf("definitions test table output:\n%s", out)
	}
	// Edit the command: the next run runs the new argv.
	run(0, "definitions", "update", "say", "--config", `{"argv": ["/bin/echo", "edited:", "{{index .Args 0}}"]}`)
	if out := run(0, "definitions", "test", "say", "--args", `["hello"]`); !strings.Contains(out, "edited: hello") {
		t.Fatalf("the edited command's test run:\n%s", out)
	}
	run(0, "definitions", "create", "id", "--executor", "command", "--config", `{"argv": ["/usr/bin/id"]}`)
	if in := test(1, "id", `[]`); in.Instance.State != "STATE_TERMINATED" || !strings.Contains(in.Instance.Error, "not on this node's allowlist") {
		t.Fatalf("command not allowed: %+v", in.Instance)
	}
	pidFile := filepath.Join(dir, "pid")
	run(0, "definitions", "create", "hang", "--executor", "command", "--timeout", "2s",
		"--config", `{"argv": ["trap '' TERM; read -r _ _ _ _ pg _ < /proc/$$/stat; echo $pg > \"$1\"; sleep 300 & sleep 300", "`+pidFile+`"], "shell": true, "grace": "200ms"}`)
	if in := test(1, "hang", `[]`); in.Instance.State != "STATE_TIMED_OUT" {
		t.Fatalf("command past its timeout: %+v", in.Instance)
	}
	b, _ := os.ReadFile(pidFile)
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %q", b)
	}
	waitFor(t, 5*time.Second, "the timed-out command's process group to be gone", func() (bool, string) { return !groupAlive(pgid), "" })

	// Cancel mid-run: the process group goes with the instance.
	pidFile2 := filepath.Join(dir, "pid2")
	run(0, "definitions", "create", "long", "--executor", "command",
		"--config", `{"argv": ["read -r _ _ _ _ pg _ < /proc/$$/stat; echo $pg > \"$1\"; echo started; sleep 300 & sleep 300", "`+pidFile2+`"], "shell": true}`)
	var sched struct {
		Instance struct {
			ID string `json:"id"`
		} `json:"instance"`
	}
	if err := json.Unmarshal([]byte(run(0, "schedule", "long", "-o", "json")), &sched); err != nil {
		t.Fatal(err)
	}
	var pgid2 int
	waitFor(t, 30*time.Second, "the long command to start", func() (bool, string) {
		b, _ := os.ReadFile(pidFile2)
		pgid2, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, string(b)
	})
	run(0, "instance", "cancel", sched.Instance.ID)
	waitFor(t, 30*time.Second, "the canceled command's instance to end Canceled and its group to be gone", func() (bool, string) {
		var got inst
		_ = json.Unmarshal([]byte(run(0, "instance", "get", sched.Instance.ID, "-o", "json")), &got)
		return got.Instance.State == "STATE_CANCELED" && !groupAlive(pgid2), got.Instance.State
	})

	// Wasm: a module that traps, uploaded as bytes.
	trapFile := filepath.Join(dir, "trap.wasm")
	_ = os.WriteFile(trapFile, []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x04, 0x01, 0x60, 0x00, 0x00, 0x03, 0x02, 0x01, 0x00,
		0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, 0x0a, 0x05, 0x01, 0x03, 0x00, 0x00, 0x0b}, 0o600)
	run(0, "definitions", "create", "trap", "--executor", "wasm", "--wasm-file", trapFile, "--retries", "3")
	if in := test(1, "trap", `[]`); in.Instance.State != "STATE_TERMINATED" || in.Instance.Attempt != 1 || !strings.Contains(in.Instance.Error, "trapped") {
		t.Fatalf("wasm trap: %+v", in.Instance)
	}

	// Wasm: the example module built from Go, uploaded with jobctl.
	wasmFile, err := greetWasm()
	if err != nil {
		t.Fatalf("GOOS=wasip1 GOARCH=wasm go build: %v", err)
	}
	out = run(0, "definitions", "create", "greet", "--executor", "wasm", "--wasm-file", wasmFile, "-o", "json")
	if !strings.Contains(out, `\"module\":\"sha256:`) {
		t.Fatalf("created wasm definition without its module reference:\n%s", out)
	}
	if in := test(0, "greet", `["jobd"]`); in.Instance.State != "STATE_COMPLETED" || !strings.Contains(in.Instance.ResultJSON, "hello, jobd") {
		t.Fatalf("wasm: %+v", in.Instance)
	}
	// Edit the wasm definition: a new config with the module uploaded again
	// (checked first: the reference it would get, nothing stored).
	if out := run(0, "definitions", "update", "greet", "--wasm-file", wasmFile, "--config", `{"memory_mb": 32}`, "--check", "-o", "json"); !strings.Contains(out, `\"module\":\"sha256:`) {
		t.Fatalf("update --check with a module:\n%s", out)
	}
	run(0, "definitions", "update", "greet", "--wasm-file", wasmFile, "--config", `{"memory_mb": 32}`)
	if out := run(0, "definitions", "get", "greet", "-o", "json"); !strings.Contains(out, `\"memory_mb\":32`) || !strings.Contains(out, `\"module\":\"sha256:`) {
		t.Fatalf("the edited wasm definition:\n%s", out)
	}
	if in := test(0, "greet", `["again"]`); in.Instance.State != "STATE_COMPLETED" || !strings.Contains(in.Instance.ResultJSON, "hello, again") {
		t.Fatalf("the edited wasm definition's run: %+v", in.Instance)
	}
	// Not Wasm at all: refused at upload.
	notWasm := filepath.Join(dir, "x.wasm")
	_ = os.WriteFile(notWasm, []byte("#!/bin/sh\n"), 0o600)
	if code, out := jobctl(t, env, "definitions", "create", "nw", "--executor", "wasm", "--wasm-file", notWasm); code == 0 || !strings.Contains(out, "not a WebAssembly binary") {
		t.Fatalf("upload of a shell script: exit %d\n%s", code, out)
	}

	// No secret in the API's output, the logs, the history or /metrics.
	var texts []string
	texts = append(texts, run(0, "definitions", "list", "-o", "json"))
	ids := run(0, "instances", "list", "-o", "json")
	texts = append(texts, ids)
	var list struct {
		Instances []struct {
			ID string `json:"id"`
		} `json:"instances"`
	}
	_ = json.Unmarshal([]byte(ids), &list)
	if len(list.Instances) < 11 {
		t.Fatalf("%d instances listed", len(list.Instances))
	}
	for _, i := range list.Instances {
		texts = append(texts, run(0, "instance", "logs", i.ID, "-o", "json"), run(0, "instance", "history", i.ID, "-o", "json"))
	}
	_, metrics, err := get(p.health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	texts = append(texts, metrics, p.logText())
	for _, s := range texts {
		if strings.Contains(s, e2eSignKey) || strings.Contains(s, e2eToken) {
			t.Fatalf("a secret's value was returned or logged:\n%s", s)
		}
	}
}

// groupAlive reports whether a live (not zombie) process is in group pgid.
func groupAlive(pgid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}
