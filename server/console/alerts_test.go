package console_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/server/console"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/webhook"
)

// alertEnv serves one namespace with alerting (a real alert.Service
// evaluating on the namespace's store) and the console, and a receiver
// that counts the notifications it gets.
func alertEnv(t *testing.T) (e *env, got *atomic.Int64, m *job.Manager, recvURL string) {
	t.Helper()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err = job.NewManager(job.WithStore(st), job.WithWorkers(2), job.WithNodeID("node"))
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := job.NewJob(job.WithKind("bad"), job.WithExecutor(func() error { return job.Permanent(errors.New("bad on purpose")) }))
	if err := m.RegisterJob(bad); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	allow, _ := webhook.ParseAllowlist("127.0.0.1")
	svc, err := alert.New(alert.Config{
		Store: st, Node: "node", Interval: 50 * time.Millisecond, Guard: &webhook.Guard{Allow: allow},
		KindKnown: func(k string) bool { _, err := m.GetJob(k); return err == nil }, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = svc.Run(ctx) }()
	got = new(atomic.Int64)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	t.Cleanup(recv.Close)
	srv, err := server.New(server.Config{
		Namespaces: map[string]*job.Manager{"default": m}, Alerts: map[string]*alert.Service{"default": svc},
		Logger: slog.New(slog.DiscardHandler), Tokens: []server.Token{
			{Name: "admin", SHA256: server.HashToken(adminToken), Role: server.RoleAdmin, Namespaces: []string{"*"}},
			{Name: "viewer", SHA256: server.HashToken(viewerToken), Role: server.RoleViewer, Namespaces: []string{"*"}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	con, err := console.New(console.Config{API: srv, Prefix: "/console", Namespaces: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	mux := http.NewServeMux()
	mux.Handle("/console/", con)
	mux.Handle("/", srv)
	hs := httptest.NewUnstartedServer(mux)
	hs.Config.Protocols = server.Protocols()
	hs.Start()
	t.Cleanup(hs.Close)
	return &env{url: hs.URL, console: hs.URL + "/console"}, got, m, recv.URL
}

func TestAlertPages(t *testing.T) {
	e, got, m, recvURL := alertEnv(t)
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)
	if p := get(t, c, e.console+"/alerts"); p.status != http.StatusOK || !strings.Contains(p.body, "No open incident.") || !strings.Contains(p.body, `id="new-rule"`) {
		t.Fatalf("empty alerts page: %d\n%s", p.status, p.body)
	}
	// A channel and a rule through the forms.
	if p := post(t, c, e.console+"/alerts/channels", url.Values{"csrf": {csrf}, "name": {"hook"}, "type": {"webhook"}, "url": {recvURL}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("create channel: %d\n%s", p.status, p.body)
	}
	// A rule about a kind nobody knows is refused with its name.
	p := post(t, c, e.console+"/alerts/rules", url.Values{"csrf": {csrf}, "name": {"r"}, "condition": {"failed"}, "scope": {"kind"}, "scope_name": {"nightly-export"}}, nil)
	if p.status != http.StatusNotFound || !strings.Contains(p.body, "nightly-export") {
		t.Fatalf("rule on a missing kind: %d\n%s", p.status, p.body)
	}
	p = post(t, c, e.console+"/alerts/rules", url.Values{"csrf": {csrf}, "name": {"bad-fails"}, "condition": {"failed"}, "scope": {"kind"}, "scope_name": {"bad"}, "channel": {"hook"}}, nil)
	if p.status != http.StatusSeeOther {
		t.Fatalf("create rule: %d\n%s", p.status, p.body)
	}
	waitPage(t, c, e.console+"/alerts", `data-rule="bad-fails"`)
	if _, err := m.ScheduleJob(context.Background(), "bad"); err != nil {
		t.Fatal(err)
	}
	page := waitPage(t, c, e.console+"/alerts", `id="open-incidents"`)
	if !strings.Contains(page, "bad-fails") || !strings.Contains(page, "delivered") {
		t.Fatalf("alerts page after the failure:\n%s", page)
	}
	// The incident's page, as notifications link to it.
	id := between(page, `data-incident="`, `"`)
	if p := get(t, c, e.console+"/alerts/incidents/"+id); p.status != http.StatusOK || !strings.Contains(p.body, "bad on purpose") || !strings.Contains(p.body, "firing") {
		t.Fatalf("incident page: %d\n%s", p.status, p.body)
	}
	// Send test notification.
	before := got.Load()
	if p := post(t, c, e.console+"/alerts/channels/hook/test", url.Values{"csrf": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("test notification: %d\n%s", p.status, p.body)
	}
	if got.Load() != before+1 {
		t.Fatalf("the receiver got %d notifications after the test, want %d", got.Load(), before+1)
	}
	// A viewer sees the page and no form.
	v := browserless(t)
	signIn(t, e, v, viewerToken)
	if p := get(t, v, e.console+"/alerts"); p.status != http.StatusOK || strings.Contains(p.body, `id="new-rule"`) || strings.Contains(p.body, "Send test notification") || !strings.Contains(p.body, "bad-fails") {
		t.Fatalf("viewer's alerts page: %d\n%s", p.status, p.body)
	}
}

// waitPage reads u until its body holds want.
func waitPage(t *testing.T, c *http.Client, u, want string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := get(t, c, u)
		if p.status == http.StatusOK && strings.Contains(p.body, want) {
			return p.body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %q; last (%d):\n%s", u, want, p.status, p.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// between returns what s holds between the first from and the next to.
func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}
