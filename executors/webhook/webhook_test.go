package webhook_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/internal/xtest"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/store"
	guard "github.com/jobkit/job/webhook"
)

const (
	signKey = "sign-key-value-7f3a"
	token   = "api-token-value-91c2"
)

var nodeSecrets = secrets.Map(map[string]string{"hook-key": signKey, "api-token": token})

func loopbackType(t *testing.T) *webhook.Type {
	allow, err := guard.ParseAllowlist("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return webhook.New(webhook.Options{Guard: &guard.Guard{Allow: allow}, Secrets: nodeSecrets})
}

type received struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
	at   []time.Time
}

func (r *received) add(req *http.Request, b []byte) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs, r.body, r.at = append(r.reqs, req), append(r.body, b), append(r.at, time.Now())
	return len(r.reqs)
}

func (r *received) n() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func TestWebhookSuccessSignedAndLogged(t *testing.T) {
	t.Parallel()
	var got received
	verr := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.add(r, b)
		verr <- guard.Verify([]byte(signKey), r.Header, b, time.Now(), time.Minute)
		w.Header().Set("X-Build", "77")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"queued":true}`))
	}))
	defer srv.Close()
	m := xtest.Manager(t, loopbackType(t))
	xtest.Define(t, m, "build", store.ExecutorWebhook, map[string]any{
		"method":     "PUT",
		"url":        srv.URL + "/build/{{index .Args 0 | urlquery}}",
		"headers":    map[string]string{"Authorization": `Bearer {{secret "api-token"}}`},
		"body":       `{"ref": {{json (index .Args 1)}}, "id": "{{.ID}}"}`,
		"secret_ref": "hook-key",
	}, 2, 0)
	inst := xtest.Run(t, m, "build", "my/repo", map[string]any{"branch": "main"})
	if inst.State != job.Completed {
		t.Fatalf("state %v, error %v", inst.State, inst.Error)
	}
	if err := <-verr; err != nil {
		t.Fatalf("the receiver could not verify the signature: %v", err)
	}
	req := got.reqs[0]
	if req.Method != "PUT" || req.URL.RawPath+req.URL.Path == "" || req.URL.EscapedPath() != "/build/my%2Frepo" || req.Header.Get("Authorization") != "Bearer "+token ||
		req.Header.Get("Idempotency-Key") != inst.ID || req.Header.Get("Jobkit-Kind") != "build" {
		t.Fatalf("request %s %s headers %v", req.Method, req.URL, req.Header)
	}
	if want := `{"ref": {"branch":"main"}, "id": "` + inst.ID + `"}`; string(got.body[0]) != want {
		t.Fatalf("body %s, want %s", got.body[0], want)
	}
	var res webhook.Result
	if err := inst.ResultsInto(&res); err != nil {
		t.Fatal(err)
	}
	if res.Status != 202 || res.Body != `{"queued":true}` || res.Headers["X-Build"] != "77" {
		t.Fatalf("result %+v", res)
	}
	logs := xtest.Logs(t, m, inst.ID)
	if !strings.Contains(logs, "PUT "+srv.URL+"/build/my%2Frepo → 202") {
		t.Fatalf("logs %q, want the exchange", logs)
	}
	if all := xtest.Everything(t, m, inst.ID); strings.Contains(all, token) || strings.Contains(all, signKey) {
		t.Fatalf("a secret reached the instance's records: %s", all)
	}
}

func TestWebhookRetriesAfter503(t *testing.T) {
	t.Parallel()
	var got received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got.add(r, nil) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	m := xtest.Manager(t, loopbackType(t))
	// The backoff is 10 ms: only Retry-After can make the retry wait 1 s.
	xtest.Define(t, m, "flaky", store.ExecutorWebhook, map[string]any{"url": srv.URL, "unsigned": true}, 3, 0)
	inst := xtest.Run(t, m, "flaky")
	if inst.State != job.Completed || inst.Attempt != 2 || got.n() != 2 {
		t.Fatalf("state %v attempt %d requests %d (error %v); want completed at attempt 2", inst.State, inst.Attempt, got.n(), inst.Error)
	}
	if gap := got.at[1].Sub(got.at[0]); gap < 900*time.Millisecond {
		t.Fatalf("retried %v after a 503 with Retry-After: 1", gap)
	}
	if logs := xtest.Logs(t, m, inst.ID); !strings.Contains(logs, "→ 503") || !strings.Contains(logs, "retry after 1s") {
		t.Fatalf("logs %q", logs)
	}
}

func TestWebhookPermanentOn400(t *testing.T) {
	t.Parallel()
	var got received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.add(r, nil)
		http.Error(w, "bad field x", http.StatusBadRequest)
	}))
	defer srv.Close()
	m := xtest.Manager(t, loopbackType(t))
	xtest.Define(t, m, "bad", store.ExecutorWebhook, map[string]any{"url": srv.URL, "unsigned": true}, 5, 0)
	inst := xtest.Run(t, m, "bad")
	if inst.State != job.Terminated || inst.Attempt != 1 || got.n() != 1 || !strings.Contains(inst.Error, "status 400") {
		t.Fatalf("state %v attempt %d requests %d error %v; want Terminated after one request", inst.State, inst.Attempt, got.n(), inst.Error)
	}
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	m := xtest.Manager(t, loopbackType(t))
	xtest.Define(t, m, "slow", store.ExecutorWebhook, map[string]any{"url": srv.URL, "unsigned": true, "timeout": "200ms"}, 1, 0)
	start := time.Now()
	inst := xtest.Run(t, m, "slow")
	if inst.State != job.Terminated || inst.Attempt != 2 || !strings.Contains(inst.Error, "no response within") {
		t.Fatalf("state %v attempt %d error %v; want two timed-out requests", inst.State, inst.Attempt, inst.Error)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v", took)
	}
	// The job's own timeout ends the attempt TimedOut.
	xtest.Define(t, m, "slow-job", store.ExecutorWebhook, map[string]any{"url": srv.URL, "unsigned": true}, 0, 300*time.Millisecond)
	if inst := xtest.Run(t, m, "slow-job"); inst.State != job.TimedOut {
		t.Fatalf("job timeout: state %v error %v", inst.State, inst.Error)
	}
}

func TestWebhookSSRFRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	// No allowlist: loopback by address and by name are refused.
	open := webhook.New(webhook.Options{Secrets: nodeSecrets})
	m := xtest.Manager(t, open)
	for kind, u := range map[string]string{"ip": srv.URL, "name": "http://localhost:" + itoa(port), "metadata": "http://169.254.169.254/latest/meta-data/"} {
		xtest.Define(t, m, kind, store.ExecutorWebhook, map[string]any{"url": u, "unsigned": true}, 3, 0)
		inst := xtest.Run(t, m, kind)
		if inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "destination forbidden") {
			t.Fatalf("%s: state %v attempt %d error %v; want Terminated, forbidden", kind, inst.State, inst.Attempt, inst.Error)
		}
	}
	// A URL template rendering something that is no URL, or another scheme.
	xtest.Define(t, m, "scheme", store.ExecutorWebhook, map[string]any{"url": "{{index .Args 0}}", "unsigned": true}, 3, 0)
	for _, u := range []string{"file:///etc/passwd", "http://[::1", "gopher://x"} {
		if inst := xtest.Run(t, m, "scheme", u); inst.State != job.Terminated || !strings.Contains(inst.Error, "forbidden") {
			t.Fatalf("url %q: state %v error %v", u, inst.State, inst.Error)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the server was reached %d times", hits.Load())
	}

	// Redirect from an allowed server to a loopback address not allowed.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })}}
	forbidden.Start()
	defer forbidden.Close()
	redirector := httptest.NewServer(http.RedirectHandler(forbidden.URL+"/internal", http.StatusTemporaryRedirect))
	defer redirector.Close()
	ml := xtest.Manager(t, loopbackType(t))
	xtest.Define(t, ml, "redirect", store.ExecutorWebhook, map[string]any{"url": redirector.URL, "unsigned": true}, 3, 0)
	if inst := xtest.Run(t, ml, "redirect"); inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "forbidden") {
		t.Fatalf("redirect: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Error)
	}
	// Header injection through an argument.
	xtest.Define(t, ml, "inject", store.ExecutorWebhook, map[string]any{"url": srv.URL, "unsigned": true, "headers": map[string]string{"X-User": "{{index .Args 0}}"}}, 3, 0)
	if inst := xtest.Run(t, ml, "inject", "bob\r\nX-Admin: true"); inst.State != job.Terminated || !strings.Contains(inst.Error, "header injection") {
		t.Fatalf("header injection: state %v error %v", inst.State, inst.Error)
	}
	// ... and through the URL: a CR/LF in the rendered URL never reaches
	// the request line.
	xtest.Define(t, ml, "inject-url", store.ExecutorWebhook, map[string]any{"url": "{{index .Args 0}}", "unsigned": true}, 3, 0)
	if inst := xtest.Run(t, ml, "inject-url", srv.URL+"/a\r\nX-Admin: true"); inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "not a URL") {
		t.Fatalf("CR/LF in the URL: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Error)
	}
	// A body over the limit.
	small := webhook.New(webhook.Options{Guard: &guard.Guard{Allow: mustAllow(t, "127.0.0.1")}, MaxBodyBytes: 100})
	ms := xtest.Manager(t, small)
	xtest.Define(t, ms, "big", store.ExecutorWebhook, map[string]any{"url": srv.URL, "unsigned": true}, 3, 0)
	if inst := xtest.Run(t, ms, "big", strings.Repeat("x", 200)); inst.State != job.Terminated || !strings.Contains(inst.Error, "too large") {
		t.Fatalf("big body: state %v error %v", inst.State, inst.Error)
	}
	if hits.Load() != 0 {
		t.Fatalf("a forbidden request reached a server %d times", hits.Load())
	}
}

func TestWebhookConfigRefused(t *testing.T) {
	t.Parallel()
	m := xtest.Manager(t, loopbackType(t))
	for name, cfg := range map[string]map[string]any{
		"no url":           {"unsigned": true},
		"unsigned":         {"url": "https://x.example"},
		"literal secret":   {"url": "https://x.example", "unsigned": true, "headers": map[string]string{"Authorization": "Bearer abc"}},
		"secret in url":    {"url": `https://x.example/{{secret "api-token"}}`, "unsigned": true},
		"secret in body":   {"url": "https://x.example", "unsigned": true, "body": `{{secret "api-token"}}`},
		"unknown field":    {"url": "https://x.example", "unsigned": true, "secret": "abc"},
		"bad method":       {"url": "https://x.example", "unsigned": true, "method": "TRACE"},
		"bad template":     {"url": "https://x.example/{{", "unsigned": true},
		"bad header name":  {"url": "https://x.example", "unsigned": true, "headers": map[string]string{"X Y": "1"}},
		"bad timeout":      {"url": "https://x.example", "unsigned": true, "timeout": "soon"},
		"response too big": {"url": "https://x.example", "unsigned": true, "max_response_bytes": 1 << 30},
	} {
		if err := xtest.TryDefine(m, "k", store.ExecutorWebhook, cfg, 0, 0); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("%s: PutDefinition = %v, want the config refused", name, err)
		}
	}
}

func mustAllow(t *testing.T, entries ...string) *guard.Allowlist {
	a, err := guard.ParseAllowlist(entries...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// TestWebhookSecretRotated: the node resolves the signing secret on every
// attempt, so a rotated secret signs the next request (the executor keeps
// the keyed HMAC of a secret between requests, never past its rotation).
func TestWebhookSecretRotated(t *testing.T) {
	t.Parallel()
	var cur atomic.Value
	cur.Store("first-secret")
	verr := make(chan error, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		verr <- guard.Verify([]byte(cur.Load().(string)), r.Header, b, time.Now(), time.Minute)
	}))
	defer srv.Close()
	allow := mustAllow(t, "127.0.0.1")
	typ := webhook.New(webhook.Options{Guard: &guard.Guard{Allow: allow}, Secrets: func(name string) ([]byte, error) {
		return []byte(cur.Load().(string)), nil
	}})
	m := xtest.Manager(t, typ)
	xtest.Define(t, m, "rotate", store.ExecutorWebhook, map[string]any{"url": srv.URL, "secret_ref": "hook-key"}, 0, 0)
	for _, s := range []string{"first-secret", "second-secret"} {
		cur.Store(s)
		if inst := xtest.Run(t, m, "rotate"); inst.State != job.Completed {
			t.Fatalf("state %v, error %v", inst.State, inst.Error)
		}
		if err := <-verr; err != nil {
			t.Fatalf("signed with %q: the receiver could not verify: %v", s, err)
		}
	}
}
