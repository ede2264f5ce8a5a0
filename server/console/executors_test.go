package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
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
