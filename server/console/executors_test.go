package console_test

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/wasm"
	xwebhook "github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/webhook"
)

// withWebhook enables the webhook executor type on the managers, allowed
// to reach loopback (where the tests' receivers listen).
func withWebhook(t *testing.T) envOption {
	t.Helper()
	allow, err := webhook.ParseAllowlist("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return withManager(job.WithExecutorTypes(xwebhook.New(xwebhook.Options{Guard: &webhook.Guard{Allow: allow}})))
}

// receiver is an HTTP server that answers every request 202 with a small
// JSON body and counts them.
func receiver(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Receiver", "test")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"path":"` + r.URL.Path + `","got":` + string(b) + `}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestExecutorFormsCheckSaveAndTestRun: an admin checks and creates a
// webhook definition with the form (a bad URL template refused at its
// field, nothing stored), test-runs it and reads the response; a viewer
// sees no form and the server refuses its forged post.
func TestExecutorFormsCheckSaveAndTestRun(t *testing.T) {
	e := newEnvOn(t, memdb, withWebhook(t))
	recv, hits := receiver(t)
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)

	form := url.Values{"csrf": {csrf}, "type": {"webhook"}, "kind": {"hook"}, "queue": {"default"}, "retries": {"0"},
		"method": {"POST"}, "url": {recv.URL + "/build/{{index .Args 0"}, "unsigned": {"on"}, "action": {"check"}}
	p := post(t, c, e.console+"/executors/new", form, nil)
	if p.status != http.StatusBadRequest || !strings.Contains(p.body, `id="x-url-error"`) || !strings.Contains(p.body, "template url") {
		t.Fatalf("a bad URL template: status %d, want 400 with the error at the url field:\n%s", p.status, p.body)
	}
	if _, err := e.defs(adminToken).GetDefinition(context.Background(), connect.NewRequest(&pb.GetDefinitionRequest{Kind: "hook"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("after a refused check, GetDefinition = %v, want NotFound", err)
	}
	// A form line the console cannot read is named before the server sees it.
	form.Set("url", recv.URL+"/build/{{index .Args 0}}")
	form.Set("headers", "no colon here")
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, `id="x-headers-error"`) {
		t.Fatalf("a header line without a colon: status %d:\n%s", p.status, p.body)
	}
	form.Set("headers", "X-Team: ops")
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusOK || !strings.Contains(p.body, `id="x-checked"`) || !strings.Contains(p.body, "X-Team") {
		t.Fatalf("check of a good definition: status %d:\n%s", p.status, p.body)
	}
	form.Set("action", "save")
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/executors/hook" {
		t.Fatalf("save: status %d location %q:\n%s", p.status, p.header.Get("Location"), p.body)
	}

	// Test-run: the response status, headers and body, from its result.
	p = post(t, c, e.console+"/executors/hook/test", url.Values{"csrf": {csrf}, "args": {`["b7"]`}}, nil)
	loc := p.header.Get("Location")
	if p.status != http.StatusSeeOther || !strings.Contains(loc, "/console/executors/hook?run=") {
		t.Fatalf("test run: status %d location %q:\n%s", p.status, loc, p.body)
	}
	id := strings.TrimSuffix(strings.SplitN(loc, "run=", 2)[1], "#run")
	e.waitState(t, id, pb.State_STATE_COMPLETED)
	p = get(t, c, e.url+loc)
	for _, want := range []string{`id="run-status">202<`, "X-Receiver", "/build/b7", `href="/console/instances/` + id + `"`} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the test run's page lacks %q:\n%s", want, p.body)
		}
	}
	if hits.Load() != 1 {
		t.Errorf("the receiver got %d requests, want 1", hits.Load())
	}
	// The list: type, queue, last run.
	p = get(t, c, e.console+"/executors")
	if !strings.Contains(p.body, `data-definition="hook"`) || !strings.Contains(p.body, "202 Accepted") {
		t.Errorf("the executors list lacks hook's last run:\n%s", p.body)
	}
	// The Jobs page's definitions link the executor type to this page.
	if p := get(t, c, e.console+"/jobs"); !strings.Contains(p.body, `href="/console/executors/hook" class="badge"`) {
		t.Errorf("the Jobs page does not link hook's executor to its page:\n%s", p.body)
	}
	// Bad arguments are refused before anything is scheduled.
	if p := post(t, c, e.console+"/executors/hook/test", url.Values{"csrf": {csrf}, "args": {`{"not": "an array"}`}}, nil); p.status != http.StatusBadRequest {
		t.Errorf("test run with an object for arguments: status %d, want 400", p.status)
	}

	// Edit: the URL changes, the version moves on.
	p = get(t, c, e.console+"/executors/hook")
	form = url.Values{"csrf": {csrf}, "version": {"1"}, "queue": {"default"}, "retries": {"2"}, "method": {"PUT"},
		"url": {recv.URL + "/v2/{{.ID}}"}, "unsigned": {"on"}, "action": {"save"}}
	if p := post(t, c, e.console+"/executors/hook", form, nil); p.status != http.StatusSeeOther {
		t.Fatalf("edit: status %d:\n%s", p.status, p.body)
	}
	got, err := e.defs(adminToken).GetDefinition(context.Background(), connect.NewRequest(&pb.GetDefinitionRequest{Kind: "hook"}))
	if err != nil || got.Msg.GetDefinition().GetVersion() != 2 || got.Msg.GetDefinition().GetMaxRetries() != 2 ||
		!strings.Contains(got.Msg.GetDefinition().GetExecutor().GetConfigJson(), `"method":"PUT"`) {
		t.Fatalf("after the edit: %v %v", got, err)
	}
	// A save over another's change (the form's version 1) is refused.
	if p := post(t, c, e.console+"/executors/hook", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, "changed by someone else") {
		t.Fatalf("a stale save: status %d:\n%s", p.status, p.body)
	}

	// A definition without an executor type has its own form.
	if _, err := e.defs(adminToken).CreateDefinition(context.Background(), connect.NewRequest(&pb.CreateDefinitionRequest{Definition: &pb.Definition{Kind: "plain", Queue: "default"}})); err != nil {
		t.Fatal(err)
	}
	if p := get(t, c, e.console+"/executors/plain"); p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/definitions/plain/edit" {
		t.Errorf("the executor page of a definition without one: status %d location %q", p.status, p.header.Get("Location"))
	}

	// A viewer: no forms, and its forged posts are refused by the server.
	v := browserless(t)
	vcsrf := signIn(t, e, v, viewerToken)
	for _, path := range []string{"/executors", "/executors/hook"} {
		p := get(t, v, e.console+path)
		if p.status != http.StatusOK || strings.Contains(p.body, "<form method=\"post\" action=\"/console/executors") || strings.Contains(p.body, `class="action`) {
			t.Errorf("a viewer's %s: status %d, shows a form or an action:\n%s", path, p.status, p.body)
		}
	}
	form.Set("csrf", vcsrf)
	form.Set("version", "2")
	form.Set("url", "https://elsewhere.example/")
	if p := post(t, v, e.console+"/executors/hook", form, nil); p.status != http.StatusForbidden || !strings.Contains(p.body, "needs role admin") {
		t.Fatalf("a viewer's forged edit: status %d, want 403 with the server's refusal:\n%s", p.status, p.body)
	}
	if p := post(t, v, e.console+"/executors/hook/test", url.Values{"csrf": {vcsrf}, "args": {"[]"}}, nil); p.status != http.StatusForbidden {
		t.Fatalf("a viewer's forged test run: status %d, want 403", p.status)
	}
	if got, _ := e.defs(adminToken).GetDefinition(context.Background(), connect.NewRequest(&pb.GetDefinitionRequest{Kind: "hook"})); got.Msg.GetDefinition().GetVersion() != 2 {
		t.Fatal("the viewer's forged edit changed the definition")
	}
}

// TestExecutorFormsOfCommandAndWasm: the command form builds argv, the
// environment and permanent exit codes, and its test run shows the exit
// code and the output; the wasm form's module reference and upload are
// checked by the server, refused at the module field.
func TestExecutorFormsOfCommandAndWasm(t *testing.T) {
	mods, err := wasm.NewDirModules(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := wasm.New(wasm.Options{Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wt.Close(context.Background()) })
	e := newEnvOn(t, memdb, withManager(job.WithExecutorTypes(command.New(command.Options{Allow: []string{"/bin/sh"}}), wt)))
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)
	if p := get(t, c, e.console+"/executors/new?type=command"); !strings.Contains(p.body, `id="x-argv"`) || !strings.Contains(p.body, `id="x-shell"`) {
		t.Fatalf("the command form:\n%s", p.body)
	}

	// Shell only when ticked: a script as argv[0] without it is refused
	// at the argv field.
	form := url.Values{"csrf": {csrf}, "type": {"command"}, "kind": {"say"}, "queue": {"default"}, "retries": {"0"},
		"argv": {"echo \"$GREETING, $1\"; echo to stderr >&2\r\n{{index .Args 0}}"}, "env": {"GREETING=hello"},
		"permanent_exit_codes": {"2, 64"}, "grace": {"1s"}, "action": {"save"}}
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, `id="x-argv-error"`) {
		t.Fatalf("a script without shell ticked: status %d:\n%s", p.status, p.body)
	}
	form.Set("permanent_exit_codes", "2, x")
	form.Set("shell", "on")
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, `id="x-permanent_exit_codes-error"`) {
		t.Fatalf("an exit code that is not a number: status %d:\n%s", p.status, p.body)
	}
	form.Set("permanent_exit_codes", "2, 64")
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusSeeOther {
		t.Fatalf("save: status %d:\n%s", p.status, p.body)
	}
	got, err := e.defs(adminToken).GetDefinition(context.Background(), connect.NewRequest(&pb.GetDefinitionRequest{Kind: "say"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg := got.Msg.GetDefinition().GetExecutor().GetConfigJson(); cfg != `{"argv":["echo \"$GREETING, $1\"; echo to stderr \u003e\u00262","{{index .Args 0}}"],"env":{"GREETING":"hello"},"grace":"1s","permanent_exit_codes":[2,64],"shell":true}` {
		t.Fatalf("the stored config: %s", cfg)
	}
	p := post(t, c, e.console+"/executors/say/test", url.Values{"csrf": {csrf}, "args": {`["world"]`}}, nil)
	loc := p.header.Get("Location")
	id := strings.TrimSuffix(strings.SplitN(loc, "run=", 2)[1], "#run")
	e.waitState(t, id, pb.State_STATE_COMPLETED)
	p = get(t, c, e.url+loc)
	for _, want := range []string{`id="run-exit">0<`, "hello, world", "to stderr"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the command's test run page lacks %q:\n%s", want, p.body)
		}
	}
	// The edit form shows the stored config back as it was typed.
	p = get(t, c, e.console+"/executors/say")
	if !strings.Contains(p.body, "GREETING=hello") || !strings.Contains(p.body, `value="2, 64"`) || !strings.Contains(p.body, `name="shell" id="x-shell" checked`) {
		t.Errorf("the edit form does not show the stored config:\n%s", p.body)
	}

	// Wasm: a reference that is not one, refused at the module field.
	form = url.Values{"csrf": {csrf}, "type": {"wasm"}, "kind": {"mod"}, "queue": {"default"}, "retries": {"0"},
		"module": {"sha256:nothex"}, "memory_mb": {"16"}, "action": {"check"}}
	if p := post(t, c, e.console+"/executors/new", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, `id="x-module-error"`) {
		t.Fatalf("a bad module reference: status %d:\n%s", p.status, p.body)
	}
	// An upload (multipart), to a server that keeps no modules: refused
	// at the module field too, saying how to enable them.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range map[string]string{"csrf": csrf, "type": "wasm", "kind": "mod", "queue": "default", "memory_mb": "16", "action": "check"} {
		_ = mw.WriteField(k, v)
	}
	fw, _ := mw.CreateFormFile("module_file", "m.wasm")
	_, _ = fw.Write([]byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00})
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, e.console+"/executors/new", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `id="x-module-error"`) || !strings.Contains(string(b), "--wasm") {
		t.Fatalf("an upload to a server without a module store: status %d:\n%s", res.StatusCode, b)
	}
}
