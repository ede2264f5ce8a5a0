package console_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobkit/job/server"
)

// startJobdArgs runs a real jobd process (built once, jobdBinary) with args (plus a loopback listener,
// JSON logs and the test tokens), waits until it answers, stops it
// (SIGTERM) when the test ends, and returns its base URL.
func startJobdArgs(t *testing.T, args ...string) string {
	t.Helper()
	bin := jobdBinary(t)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	var y strings.Builder
	for _, tk := range []struct{ name, secret, role string }{{"admin", adminToken, "admin"}, {"operator", operatorToken, "operator"}, {"viewer", viewerToken, "viewer"}} {
		fmt.Fprintf(&y, "- name: %s\n  sha256: %s\n  role: %s\n  namespaces: [\"*\"]\n", tk.name, server.HashToken(tk.secret), tk.role)
	}
	if err := os.WriteFile(tokens, []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--log-format", "json", "--tokens-file", tokens}, args...)...)
	cmd.Env = os.Environ()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		log strings.Builder
	)
	listening := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "jobd listening" {
				if a, ok := rec["listen"].(string); ok {
					listening <- a
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	logText := func() string {
		mu.Lock()
		defer mu.Unlock()
		return log.String()
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("jobd did not stop within 30 s of SIGTERM; killed. Its log:\n%s", logText())
		}
	})
	select {
	case addr := <-listening:
		if !strings.HasPrefix(addr, "http") {
			addr = "http://" + addr
		}
		return addr
	case <-exited:
		t.Fatalf("jobd exited before listening; its log:\n%s", logText())
	case <-time.After(60 * time.Second):
		t.Fatalf("jobd did not listen within 60 s; its log:\n%s", logText())
	}
	return ""
}

// TestExecutorFormsInBrowser drives the executor definition pages in
// headless Chromium against a real jobd process (embedded store, webhook
// type enabled): create a webhook definition against a test HTTP server,
// test-run it and see the response status, edit it, see the server's
// refusal of a bad URL template at its field; a viewer sees no forms and
// the server refuses its forged post.
func TestExecutorFormsInBrowser(t *testing.T) {
	var hits sync.Map
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hits.Store(r.Method+" "+r.URL.Path, true)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Build", "queued")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"queued": true, "got": %s}`, b)
	}))
	defer recv.Close()
	base := startJobdArgs(t, "--workers", "2", "--webhook", "--webhook-allow", "127.0.0.1")
	e := &env{url: base, console: base + "/console"}
	b := newBrowser(t)
	b.signIn(e, adminToken)

	// Create: the form of the webhook type, checked, then saved.
	b.open(e, "/executors")
	b.until("the empty list", `document.querySelector("#executors-list .empty") !== null`)
	b.click("new webhook", "#new-webhook")
	b.until("the webhook form", `document.querySelector("#x-url") !== null`)
	b.do("fill the form",
		chromedp.SendKeys(chromedp.CSS("#x-kind"), "build-hook"),
		chromedp.SendKeys(chromedp.CSS("#x-labels"), "region=eu"),
		chromedp.SendKeys(chromedp.CSS("#x-url"), recv.URL+"/build/{{index .Args 0 | urlquery}}"),
		chromedp.SendKeys(chromedp.CSS("#x-headers"), "Content-Type: application/json"),
		chromedp.SendKeys(chromedp.CSS("#x-body"), `{"ref": {{json (index .Args 1)}}, "instance": "{{.ID}}"}`),
		chromedp.SendKeys(chromedp.CSS("#x-xtimeout"), "5s"),
		chromedp.Click(chromedp.CSS("#x-unsigned")))
	b.click("check", "#x-check")
	b.until("the server's acceptance", `document.querySelector("#x-checked") !== null`)
	if cfg := eval[string](b, `document.querySelector("#x-checked pre").textContent`); !strings.Contains(cfg, `"timeout": "5s"`) {
		t.Errorf("the checked config reads %q", cfg)
	}
	b.shot("executor-new")
	b.click("create", "#x-save")
	b.until("the definition's page", `location.pathname === "/console/executors/build-hook" && document.body.dataset.live === "open"`)

	// Labels a node needs: this jobd has none, so a run would wait; drop
	// them to test-run here (an edit).
	b.do("edit: no labels", chromedp.Clear(chromedp.CSS("#x-labels")))
	b.until("method PUT chosen", `(() => { const s = document.querySelector("#x-method"); s.value = "PUT"; return s.value === "PUT"; })()`)
	b.click("save", "#x-save")
	b.until("saved", `document.querySelector("#flash") && document.querySelector("#flash").textContent.includes("saved")`)
	b.until("the live feed", `document.body.dataset.live === "open"`)

	// Test-run: the response's status, headers and body, live.
	b.do("arguments", chromedp.SendKeys(chromedp.CSS("#x-test-args"), `["api v2", {"branch": "main"}]`))
	b.click("run once now", "#x-test")
	b.until("the run's response status", `document.querySelector("#run-status") && document.querySelector("#run-status").textContent === "201"`)
	if body := eval[string](b, `document.querySelector("#run-body").textContent`); !strings.Contains(body, `"queued": true`) || !strings.Contains(body, `"branch":"main"`) {
		t.Errorf("the response body shown: %q", body)
	}
	if h := eval[string](b, `document.querySelector("#run-headers").innerText`); !strings.Contains(h, "X-Build") {
		t.Errorf("the response headers shown: %q", h)
	}
	if _, ok := hits.Load("PUT /build/api+v2"); !ok {
		t.Errorf("the receiver did not get PUT /build/api+v2")
	}
	id := eval[string](b, `document.querySelector("#run-link").textContent`)
	b.shot("executor-test-run")
	b.open(e, "/executors")
	b.until("the list with the last run", `document.querySelector('tr[data-definition="build-hook"] td.last-run').textContent.includes("201 Created")`)
	if href := eval[string](b, `document.querySelector('tr[data-definition="build-hook"] td.last-run a').getAttribute("href")`); href != "/console/instances/"+id {
		t.Errorf("the last run links to %q, want the instance %s", href, id)
	}
	b.shot("executors")

	// Edit with a bad URL template: refused at the field, nothing saved.
	b.open(e, "/executors/build-hook")
	b.do("a bad URL template", chromedp.SetValue(chromedp.CSS("#x-url"), recv.URL+"/build/{{index .Args 0"))
	b.click("save", "#x-save")
	b.until("the error at the url field", `document.querySelector("#x-url-error") !== null && document.querySelector("#x-url").getAttribute("aria-invalid") === "true"`)
	if msg := eval[string](b, `document.querySelector("#x-url-error").textContent`); !strings.Contains(msg, "template url") {
		t.Errorf("the url field's error reads %q", msg)
	}
	b.shot("executor-invalid")
	b.open(e, "/executors/build-hook")
	if u := eval[string](b, `document.querySelector("#x-url").value`); !strings.HasSuffix(u, "{{index .Args 0 | urlquery}}") {
		t.Errorf("after the refused save the stored URL template is %q", u)
	}

	// A viewer: no forms, and the server refuses its forged post.
	b.click("sign out", `form[action="/console/signout"] button`)
	b.until("the sign-in page", `document.querySelector("#token") !== null`)
	b.signIn(e, viewerToken)
	for _, path := range []string{"/executors", "/executors/build-hook"} {
		b.open(e, path)
		if n := eval[int](b, `document.querySelectorAll("button.action, form[action*='/executors'], a.button").length`); n != 0 {
			t.Errorf("a viewer sees %d forms or actions on %s", n, path)
		}
	}
	if cfg := eval[string](b, `document.querySelector("#x-config").textContent`); !strings.Contains(cfg, "/build/") {
		t.Errorf("a viewer reads the config as %q", cfg)
	}
	forged := eval[string](b, `fetch("/console/executors/build-hook", {method: "POST", body: new URLSearchParams({csrf: document.querySelector('input[name="csrf"]').value, version: "2", queue: "default", url: "https://elsewhere.example/", unsigned: "on", action: "save"}), redirect: "manual"}).then(r => r.text().then(t => r.status + " " + t))`)
	if !strings.HasPrefix(forged, "403 ") || !strings.Contains(forged, "needs role admin") {
		t.Errorf("the viewer's forged save answered %.300q, want 403 with the server's refusal", forged)
	}
	forged = eval[string](b, `fetch("/console/executors/build-hook/test", {method: "POST", body: new URLSearchParams({csrf: document.querySelector('input[name="csrf"]').value, args: "[]"}), redirect: "manual"}).then(r => String(r.status))`)
	if forged != "403" {
		t.Errorf("the viewer's forged test run answered %s, want 403", forged)
	}
}
