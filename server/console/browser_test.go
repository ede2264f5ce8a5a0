package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// chromiumPath is Debian's chromium, unless $JOBKIT_CHROMIUM names another.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("JOBKIT_CHROMIUM"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("the console's browser test needs Chromium, which is not installed: run scripts/test.sh as root (it installs Debian's chromium), or `sudo apt-get install chromium`, or set JOBKIT_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// browser drives one headless Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string // where screenshots go
}

// newBrowser starts headless Chromium with a fresh profile.
//
// A Chromium that exits before it listens (seen about once in 25 starts
// on a loaded 2-CPU machine, with nothing in its output but the usual
// D-Bus complaints) is started again, up to three times in all: the tests
// are about the console, and each failed start is logged.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	shots := os.Getenv("JOBKIT_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		opts := []chromedp.ExecAllocatorOption{
			chromedp.ExecPath(chromiumPath(t)),
			chromedp.Flag("headless", true),
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true),
			chromedp.NoFirstRun,
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.Flag("disable-dev-shm-usage", true),
			// Overlay scrollbars, as on a phone: a page fills the width emulated.
			chromedp.Flag("hide-scrollbars", true),
			chromedp.UserDataDir(t.TempDir()),
			chromedp.WindowSize(1280, 900),
		}
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx)
		if err = chromedp.Do(ctx, chromedp.Navigate("about:blank")); err == nil {
			t.Cleanup(func() { cancel(); acancel() })
			return &browser{t: t, ctx: ctx, shots: shots}
		}
		cancel()
		acancel()
		t.Logf("starting Chromium, attempt %d of 3: %v", attempt, err)
	}
	t.Fatalf("starting Chromium: %v", err)
	return nil
}

// do runs steps, each bounded by 15 s, failing the test with what step
// says on an error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		loc, _ := chromedp.Run(b.ctx, chromedp.Location())
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.t.Fatalf("%s: %v\nat %s, the page reads:\n%s", what, err, loc, body)
	}
}

// until waits up to 10 s until the JavaScript expression is truthy,
// evaluating it every 20 ms (across page loads, which end a poll inside
// the page).
func (b *browser) until(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		if err == nil && ok {
			return
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	loc, _ := chromedp.Run(b.ctx, chromedp.Location())
	body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	// The live state: the feed's (open, reconnecting) and the number of
	// refreshes.
	live, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? JSON.stringify(document.body.dataset) : ""`))
	b.t.Fatalf("%s: not within 10 s (%s; last error %v)\nat %s, live state %s, the page reads:\n%s", what, expr, last, loc, live, body)
}

// eval returns the value of a JavaScript expression.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// shot writes a PNG screenshot of the whole page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn signs in with token from the sign-in page.
func (b *browser) signIn(e *env, token string) {
	b.t.Helper()
	b.do("open the sign-in page", chromedp.Navigate(e.console+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Click(chromedp.CSS("#signin")))
	b.until("the overview after signing in", `location.pathname === "/console/" && document.querySelector("#role") !== null`)
}

// click clicks the element sel selects, as a user would, retrying while a
// live refresh replaces it under the pointer.
func (b *browser) click(what, sel string) {
	b.t.Helper()
	js, _ := json.Marshal(sel)
	b.until(what, fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false; el.click(); return true; })()`, js))
}

// open navigates to a console page and waits for its live feed to open.
func (b *browser) open(e *env, path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(e.console+path))
	b.until("the live feed of "+path, `document.body.dataset.live === "open"`)
}

// TestConsoleInBrowser drives the console in headless Chromium against a
// jobd process on Redis, whose executors run on worker nodes (the env's
// managers) beside it.
func TestConsoleInBrowser(t *testing.T) {
	e := newJobdEnv(t)
	b := newBrowser(t)

	// Sign in.
	b.do("open the console signed out", chromedp.Navigate(e.console+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.shot("signin")
	b.signIn(e, adminToken)
	if got := eval[string](b, `document.querySelector("#role").textContent`); got != "admin" {
		t.Fatalf("role shown: %q, want admin", got)
	}

	// A job scheduled through the API appears on the open page, live.
	b.open(e, "/instances")
	start := time.Now()
	inst := e.schedule(t, "greet", `["live"]`)
	b.until("the scheduled instance on the instances page", fmt.Sprintf(`document.querySelector('#instances tr[data-id="%s"]') !== null`, inst.GetId()))
	appeared := time.Since(start)
	b.until("the instance shown completed", fmt.Sprintf(`document.querySelector('#instances tr[data-id="%s"][data-state="completed"]') !== null`, inst.GetId()))
	t.Logf("scheduled through the API → shown on the open page: %v", appeared)
	if appeared > 2*time.Second {
		t.Errorf("the scheduled instance took %v to appear, want well within 1 s (2 s allowed for a loaded machine)", appeared)
	}

	// Failed instances of one kind among thousands, by a server-side filter.
	const others = 3000
	e.scheduleMany(t, "greet", others)
	var failed []string
	for range 5 {
		failed = append(failed, e.schedule(t, "flaky", "").GetId())
	}
	e.scheduleMany(t, "greet", 1000)
	for _, id := range failed {
		e.waitState(t, id, pb.State_STATE_TERMINATED)
	}
	b.open(e, "/instances")
	b.do("type kind flaky in the filter", chromedp.SendKeys(chromedp.CSS("#f-kind"), "flaky"))
	b.click("tick state terminated", `input[name="state"][value="terminated"]`)
	b.click("apply the filter", "#apply")
	b.until("the filtered list", `location.search.includes("kind=flaky") && document.querySelector("#instances") !== null`)
	rows := eval[[]string](b, `Array.from(document.querySelectorAll("#instances tbody tr")).map(r => r.querySelector("td:nth-child(2)").textContent + "/" + r.dataset.state)`)
	if len(rows) != len(failed) {
		t.Fatalf("the filter shows %d rows (%v), want the %d failed flaky instances", len(rows), rows, len(failed))
	}
	for _, r := range rows {
		if r != "flaky/terminated" {
			t.Fatalf("the filter shows %q, want only flaky/terminated", r)
		}
	}
	b.shot("instances")

	// The same five by a search in errors, on the server, among all.
	b.open(e, "/instances")
	b.do("search the errors", chromedp.SendKeys(chromedp.CSS("#f-text"), "on PURPOSE"))
	b.click("apply the search", "#apply")
	b.until("the search's answer", `location.search.includes("text=on+PURPOSE") && document.querySelector("#search-info") !== null`)
	rows = eval[[]string](b, `Array.from(document.querySelectorAll("#instances tbody tr")).map(r => r.querySelector("td:nth-child(2)").textContent + "/" + r.dataset.state)`)
	if len(rows) != len(failed) || rows[0] != "flaky/terminated" {
		t.Fatalf("the search shows %v, want the %d failed flaky instances", rows, len(failed))
	}
	if info := eval[string](b, `document.querySelector("#search-info").textContent`); !strings.Contains(info, "every instance this filter selects") {
		t.Errorf("the search says %q, want it to have searched every instance", info)
	}
	b.shot("instances-search")

	// Open one: its logs and history; retry it and see it complete.
	id := failed[0]
	b.click("open a failed instance", fmt.Sprintf(`#instances tr[data-id="%s"] a`, id))
	b.until("the instance page", fmt.Sprintf(`location.pathname.endsWith("%s") && document.body.dataset.live === "open"`, id))
	if logs := eval[string](b, `document.querySelector("#logs").innerText`); !strings.Contains(logs, "flaky attempt 1") {
		t.Errorf("the logs read %q, want the executor's line", logs)
	}
	hist := eval[[]string](b, `Array.from(document.querySelectorAll("#history li")).map(l => l.dataset.state)`)
	if len(hist) < 3 || hist[len(hist)-1] != "terminated" {
		t.Errorf("the history reads %v, want scheduled … processing, terminated", hist)
	}
	if errText := eval[string](b, `document.querySelector("#instance-error").textContent`); !strings.Contains(errText, "flaky failed on purpose") {
		t.Errorf("the error reads %q", errText)
	}
	b.shot("instance-failed")
	e.failing.Store(false)
	b.click("retry it", "#retry")
	b.until("the retried instance completed, live", `document.querySelector("#state") && document.querySelector("#state").textContent === "completed"`)
	b.until("the second attempt's log line", `document.querySelector("#logs").innerText.includes("flaky attempt 2")`)
	b.shot("instance")

	// Create a cron trigger from the page and see it fire, live; pause it.
	b.open(e, "/jobs")
	b.do("create a trigger",
		chromedp.SendKeys(chromedp.CSS("#t-name"), "every-second"),
		chromedp.SendKeys(chromedp.CSS("#t-kind"), "greet"),
		chromedp.SendKeys(chromedp.CSS("#t-args"), `["tick"]`),
		chromedp.SendKeys(chromedp.CSS("#t-cron"), "* * * * * *"))
	b.until("the next fire times previewed as the spec is typed", `document.querySelectorAll("#t-preview time").length === 5`)
	b.click("submit the trigger", "#t-create")
	b.until("the trigger listed with its next fire times", `document.querySelectorAll('tr[data-trigger="every-second"] td.next time').length > 0`)
	b.until("the live feed of /jobs", `document.body.dataset.live === "open"`)
	b.until("the trigger's first tick shown", `document.querySelector('tr[data-trigger="every-second"] td.last-tick a') !== null`)
	b.shot("jobs")
	b.click("pause the trigger", `tr[data-trigger="every-second"] button[data-action="pause"]`)
	b.until("the trigger shown paused", `document.querySelector('tr[data-trigger="every-second"] td.status').textContent.includes("paused")`)

	// Pause a queue: its work stops; bulk-cancel what waits in it.
	b.open(e, "/queues")
	b.click("pause queue default", `tr[data-queue="default"] button[data-action="pause"]`)
	b.until("queue default shown paused", `document.querySelector('tr[data-queue="default"] .status').textContent.includes("paused")`)
	if !paused(t, e) {
		t.Fatal("the server does not have queue default paused")
	}
	var waiting []string
	for range 3 {
		waiting = append(waiting, e.schedule(t, "flaky", "").GetId())
	}
	b.shot("queues")
	b.open(e, "/instances?kind=flaky&state=scheduled")
	b.until("the waiting instances listed", `document.querySelectorAll("#instances tbody tr").length === 3`)
	for _, id := range waiting {
		e.waitState(t, id, pb.State_STATE_SCHEDULED) // the paused queue runs nothing
	}
	b.click("bulk cancel", `#bulk button[value="cancel"]`)
	b.until("the confirmation with its count", `document.querySelector("#confirm-count") !== null`)
	if got := eval[string](b, `document.querySelector("#confirm-count strong").textContent`); got != "3" {
		t.Fatalf("the confirmation counts %q, want 3", got)
	}
	b.shot("confirm")
	b.click("confirm", "#confirm")
	b.until("the result", `document.querySelector("#flash") && document.querySelector("#flash").textContent.includes("3 applied")`)
	for _, id := range waiting {
		e.waitState(t, id, pb.State_STATE_CANCELED)
	}

	// The other pages.
	b.open(e, "/")
	b.until("the throughput chart with the attempts of the hour", `document.querySelector('#chart-throughput polyline[data-series="completed"]') !== null && /completed \(now \d+\/min, peak [1-9]/.test(document.querySelector("#chart-throughput").innerText)`)
	// overview.png is TestJobdOverviewChartsInBrowser's: a jobd process's
	// charts of the whole cluster, lag included.
	b.open(e, "/nodes")
	b.until("this node listed", `document.querySelector("#nodes").innerText.includes("node-default")`)
	b.shot("nodes")

	// A phone-width screen.
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open(e, "/queues")
	b.shot("queues-phone")
	b.do("desktop width", chromedp.EmulateViewport(1280, 900))

	// A viewer: no action buttons; the server refuses its forged action.
	b.click("sign out", `form[action="/console/signout"] button`)
	b.until("the sign-in page", `document.querySelector("#token") !== null`)
	b.signIn(e, viewerToken)
	for _, path := range []string{"/queues", "/instances", "/instances/" + id, "/jobs"} {
		b.open(e, path)
		if n := eval[int](b, `document.querySelectorAll("button.action, form[action*='/bulk']").length`); n != 0 {
			t.Errorf("a viewer sees %d action buttons on %s", n, path)
		}
	}
	forged := eval[string](b, `fetch("/console/queues/default/resume", {method: "POST", body: new URLSearchParams({csrf: document.querySelector('input[name="csrf"]').value}), redirect: "manual"}).then(r => r.text().then(t => r.status + " " + t))`)
	if !strings.HasPrefix(forged, "403 ") || !strings.Contains(forged, "needs role operator") {
		t.Errorf("the viewer's forged resume answered %.300q, want 403 with the server's refusal", forged)
	}
	if !paused(t, e) {
		t.Error("the viewer's forged POST resumed the queue")
	}
}
