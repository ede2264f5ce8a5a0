package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/store"
)

// colorScheme emulates the system's prefers-color-scheme ("dark",
// "light").
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	})
}

// seriesSum is a script summing the values of the series named by the
// data-series of a chart's line.
func seriesSum(chart, series string) string {
	return fmt.Sprintf(`(() => { const l = document.querySelector('#%s polyline[data-series="%s"]'); return l ? l.dataset.values.split(",").map(Number).reduce((a, b) => a + b, 0) : -1 })()`, chart, series)
}

// TestQueueAndKindChartsInBrowser: the page of a queue and of a kind
// chart the instances run, over each window of the selector: the
// throughput chart's completed and failed add up to the instances that
// completed and failed, the failure rate and latency charts are drawn,
// and another queue's instances count on its page only.
func TestQueueAndKindChartsInBrowser(t *testing.T) {
	e := newEnvOn(t, memdb, withManager(job.WithQueues("default", "second")))
	var ids []string
	for i := range 4 {
		ids = append(ids, e.schedule(t, "greet", fmt.Sprintf(`["g%d"]`, i)).GetId())
	}
	for range 2 {
		ids = append(ids, e.schedule(t, "flaky", "").GetId())
	}
	// One in another queue: not in queue default's charts.
	other, err := e.jobs(adminToken, "default").Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "greet", ArgsJson: `["q2"]`, Queue: "second"}))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		want := pb.State_STATE_COMPLETED
		if i >= 4 {
			want = pb.State_STATE_TERMINATED
		}
		e.waitState(t, id, want)
	}
	e.waitState(t, other.Msg.GetInstance().GetId(), pb.State_STATE_COMPLETED)

	b := newBrowser(t)
	b.signIn(e, viewerToken)
	b.open(e, "/queues")
	b.click("open queue default", `tr[data-queue="default"] th a`)
	b.until("the queue's page", `location.pathname === "/console/queues/default" && document.querySelector("#chart-throughput") !== null`)
	for _, win := range []string{"1h", "24h", "7d"} {
		if win != "1h" {
			b.click("window "+win, fmt.Sprintf(`#windows a[data-window="%s"]`, win))
			b.until("the "+win+" charts", fmt.Sprintf(`document.querySelector('#series-charts[data-window="%s"]') !== null && document.querySelector('#windows a[aria-current]').dataset.window === "%s"`, win, win))
		}
		done, failed := eval[float64](b, seriesSum("chart-throughput", "completed")), eval[float64](b, seriesSum("chart-throughput", "failed"))
		if done != 4 || failed != 2 {
			t.Errorf("queue default, window %s: the throughput chart counts %v completed and %v failed; want the 4 and 2 run", win, done, failed)
		}
		if n := eval[int](b, `document.querySelectorAll("#chart-failures polyline, #chart-latency polyline").length`); n != 3 {
			t.Errorf("window %s: %d lines on the failure and latency charts, want 3 (failed %%, p50, p95)", win, n)
		}
		if rate := eval[string](b, `document.querySelector("#chart-failures .legend").innerText`); !strings.Contains(rate, "33.3% overall") {
			t.Errorf("window %s: the failure rate reads %q, want 33.3%% overall", win, rate)
		}
		if p50 := eval[float64](b, `Math.max(...document.querySelector('#chart-latency polyline[data-series="p50"]').dataset.values.split(",").map(Number))`); p50 <= 0 {
			t.Errorf("window %s: no latency drawn (p50 peak %v)", win, p50)
		}
	}
	b.shot("queue")
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open(e, "/queues/default?window=24h")
	b.shot("queue-phone")
	b.do("desktop width", chromedp.EmulateViewport(1280, 900))

	// The kind's page: flaky failed twice, completed none, in any queue.
	b.open(e, "/kinds/flaky?window=7d")
	if done, failed := eval[float64](b, seriesSum("chart-throughput", "completed")), eval[float64](b, seriesSum("chart-throughput", "failed")); done != 0 || failed != 2 {
		t.Errorf("kind flaky: %v completed, %v failed; want 0 and 2", done, failed)
	}
	b.open(e, "/kinds/greet")
	if done := eval[float64](b, seriesSum("chart-throughput", "completed")); done != 5 {
		t.Errorf("kind greet: %v completed; want 5 (4 in default, 1 in second)", done)
	}
	// An unknown window is refused, naming the ones there are.
	b.do("an unknown window", chromedp.Navigate(e.console+"/queues/default?window=2w"))
	if msg := eval[string](b, `document.getElementById("error-message").innerText`); !strings.Contains(msg, "use 1h, 24h or 7d") {
		t.Errorf("window=2w answers %q", msg)
	}
}

// TestInstancesSelectionInBrowser: ticking rows of the Instances list and
// pressing Retry selected retries those instances and no other; Cancel
// selected cancels the running ones ticked; Delete selected deletes; the
// header box ticks the whole page.
func TestInstancesSelectionInBrowser(t *testing.T) {
	e := newEnv(t)
	var failed []string
	for range 3 {
		failed = append(failed, e.schedule(t, "flaky", "").GetId())
	}
	for _, id := range failed {
		e.waitState(t, id, pb.State_STATE_TERMINATED)
	}
	b := newBrowser(t)
	b.signIn(e, adminToken)
	b.open(e, "/instances?kind=flaky")
	b.until("three rows", `document.querySelectorAll("#instances tbody tr").length === 3`)
	if got := eval[bool](b, `document.getElementById("sel-retry").disabled`); !got {
		t.Error("Retry selected is enabled with nothing selected")
	}
	e.failing.Store(false)
	for _, id := range failed[:2] {
		b.click("tick "+id, fmt.Sprintf(`#instances tr[data-id="%s"] input[type="checkbox"]`, id))
	}
	b.until("the count of the selection", `document.getElementById("selected-count").textContent === "2 selected" && !document.getElementById("sel-retry").disabled`)
	b.shot("instances-selected")
	b.click("retry the selected", "#sel-retry")
	b.until("the result", `document.querySelector("#flash") && document.querySelector("#flash").textContent.includes("Retry: 2 of 2 selected applied")`)
	for _, id := range failed[:2] {
		e.waitState(t, id, pb.State_STATE_COMPLETED)
	}
	if st := e.state(t, failed[2]); st != pb.State_STATE_TERMINATED {
		t.Errorf("the instance not selected is %v, want it left terminated", st)
	}
	if loc := eval[string](b, `location.search`); !strings.Contains(loc, "kind=flaky") {
		t.Errorf("after the action the list lost its filter: %q", loc)
	}

	// Cancel two running instances; retrying a running one is refused
	// with the server's reason.
	running := []string{e.schedule(t, "block", "").GetId(), e.schedule(t, "block", "").GetId()}
	for _, id := range running {
		e.waitState(t, id, pb.State_STATE_PROCESSING)
	}
	b.open(e, "/instances?kind=block")
	b.until("two rows", `document.querySelectorAll("#instances tbody tr").length === 2`)
	b.click("tick the page", "#select-all")
	b.until("both ticked", `document.getElementById("selected-count").textContent === "2 selected"`)
	b.click("retry the running", "#sel-retry")
	b.until("the refusal", `document.querySelector("#flash") && document.querySelector("#flash").textContent.includes("0 of 2 selected applied") && document.querySelector("#flash").textContent.includes("Not applied — 2:")`)
	b.click("tick the page", "#select-all")
	b.click("cancel the selected", "#sel-cancel")
	b.until("the cancel's result", `document.querySelector("#flash") && document.querySelector("#flash").textContent.includes("Cancel: 2 of 2 selected applied")`)
	for _, id := range running {
		e.waitState(t, id, pb.State_STATE_CANCELED)
	}

	// Delete one, after the confirmation.
	b.open(e, "/instances?kind=flaky")
	b.click("tick the one left failed", fmt.Sprintf(`#instances tr[data-id="%s"] input[type="checkbox"]`, failed[2]))
	eval[bool](b, `(() => { window.confirm = () => true; return true })()`)
	b.click("delete the selected", "#sel-delete")
	b.until("the delete's result", `document.querySelector("#flash") && document.querySelector("#flash").textContent.includes("Delete: 1 of 1 selected applied")`)
	if _, err := e.jobs(adminToken, "default").GetInstance(context.Background(), connect.NewRequest(&pb.GetInstanceRequest{Id: failed[2]})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the deleted instance: %v, want not found", err)
	}
}

// state returns the state of instance id.
func (e *env) state(t *testing.T, id string) pb.State {
	t.Helper()
	res, err := e.jobs(adminToken, "default").GetInstance(context.Background(), connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetInstance().GetState()
}

// TestJSONTreeInBrowser: arguments (of a kind defined in a queue nobody
// claims, so it waits) and results show as foldable trees,
// keys in their order, each kind of value marked; a fold the user made
// stays through live refreshes; the raw JSON is there to copy.
func TestJSONTreeInBrowser(t *testing.T) {
	e := newEnv(t)
	if _, err := e.mgrs["default"].Admin().PutDefinition(context.Background(), job.Definition{Kind: "payload", Queue: "unclaimed"}, 0); err != nil {
		t.Fatal(err)
	}
	args := `[{"zeta": "last <b>", "alpha": [1, 2.5, true, null], "deep": {"a": {"b": {"c": {"d": 1}}}}}]`
	waiting, err := e.jobs(adminToken, "default").Schedule(context.Background(), connect.NewRequest(&pb.ScheduleRequest{Kind: "payload", ArgsJson: args}))
	if err != nil {
		t.Fatal(err)
	}
	id := waiting.Msg.GetInstance().GetId()
	b := newBrowser(t)
	b.signIn(e, adminToken)
	b.open(e, "/instances/"+id)
	keys := eval[[]string](b, `Array.from(document.querySelectorAll("#args > details > ul > li:first-child > details > ul > li > .j-key")).map(k => k.textContent)`)
	if strings.Join(keys, " ") != `"zeta" "alpha" "deep"` {
		t.Errorf("the keys read %v, want them in their order", keys)
	}
	for sel, want := range map[string]string{".j-str": `"last <b>"`, ".j-num": "1", ".j-bool": "true", ".j-null": "null"} {
		if got := eval[string](b, `document.querySelector("#args `+sel+`").textContent`); got != want {
			t.Errorf("first %s reads %q, want %q", sel, got, want)
		}
	}
	if n := eval[int](b, `document.querySelectorAll("#args details:not([open])").length`); n != 3 {
		t.Errorf("%d folded values, want 3 (from the fourth level down: deep.a, .b, .c)", n)
	}
	if raw := eval[string](b, `document.getElementById("args-raw").textContent`); !json.Valid([]byte(raw)) || !strings.Contains(raw, "\n  ") {
		t.Errorf("the raw JSON %q is not indented JSON", raw)
	}
	// Fold the first argument, then make the page refresh: it stays folded.
	b.click("fold the first argument", `#args > details > ul > li:first-child > details > summary`)
	b.until("folded", `!document.querySelector("#args > details > ul > li:first-child > details").open`)
	before := eval[int](b, `Number(document.body.dataset.refreshes || 0)`)
	if _, err := e.jobs(adminToken, "default").CancelInstance(context.Background(), connect.NewRequest(&pb.CancelInstanceRequest{Id: id})); err != nil {
		t.Fatal(err)
	}
	b.until("the canceled state, live", `document.getElementById("state").textContent === "canceled"`)
	b.until("a live refresh", fmt.Sprintf(`Number(document.body.dataset.refreshes || 0) > %d`, before))
	if open := eval[bool](b, `document.querySelector("#args > details > ul > li:first-child > details").open`); open {
		t.Error("a live refresh unfolded what the user folded")
	}
	b.click("unfold it again", `#args > details > ul > li:first-child > details > summary`)
	b.shot("instance-json")

	// A result: a completed greet's.
	done := e.schedule(t, "greet", `["ada"]`)
	e.waitState(t, done.GetId(), pb.State_STATE_COMPLETED)
	b.open(e, "/instances/"+done.GetId())
	if got := eval[string](b, `document.querySelector("#result .j-str").textContent`); got != `"hi ada"` {
		t.Errorf("the result reads %q", got)
	}
}

// TestCommandProgressInBrowser: a command job that writes progress lines
// (doc/executors.md) shows a progress bar on its page and in the list
// that follows them while it runs.
func TestCommandProgressInBrowser(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "go")
	e := newEnvOn(t, memdb, withManager(job.WithExecutorTypes(command.New(command.Options{Allow: []string{"/bin/sh"}}))))
	cfg := fmt.Sprintf(`{"argv": ["echo '::progress 2/5 copying'; while [ ! -e %[1]s ]; do sleep 0.05; done; echo '::progress 90%% almost'; while [ ! -e %[1]s.2 ]; do sleep 0.05; done"], "shell": true}`, gate)
	if _, err := e.mgrs["default"].Admin().PutDefinition(context.Background(), job.Definition{Kind: "copy", Queue: "default", Executor: &store.ExecutorSpec{Type: store.ExecutorCommand, Config: []byte(cfg)}}, 0); err != nil {
		t.Fatal(err)
	}
	inst := e.schedule(t, "copy", "")
	b := newBrowser(t)
	b.signIn(e, viewerToken)
	b.open(e, "/instances/"+inst.GetId())
	b.until("the bar at 40%", `document.querySelector("#progress progress[data-running]") && document.querySelector("#progress progress").value === 0.4 && document.querySelector("#progress").textContent.includes("copying")`)
	b.open(e, "/instances?kind=copy")
	b.until("the bar in the list", `document.querySelector("#instances td.progress progress") && document.querySelector("#instances td.progress").textContent.includes("40%")`)
	b.shot("instances-progress")
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b.until("the list's bar at 90%, live", `document.querySelector("#instances td.progress progress").value === 0.9`)
	if err := os.WriteFile(gate+".2", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, inst.GetId(), pb.State_STATE_COMPLETED)
	b.until("the finished bar, no longer running", `document.querySelector('#instances tr[data-state="completed"]') && !document.querySelector("progress[data-running]")`)
}

// TestDarkModeInBrowser: with the system in dark mode
// (prefers-color-scheme: dark) the console's colours are dark, text
// light, and back in light mode light again.
func TestDarkModeInBrowser(t *testing.T) {
	e := newEnv(t)
	e.schedule(t, "greet", `["dark"]`)
	b := newBrowser(t)
	b.signIn(e, adminToken)
	const colours = `[getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color, getComputedStyle(document.querySelector("thead th") || document.body).backgroundColor].join(" / ")`
	b.open(e, "/instances")
	if got := eval[string](b, colours); got != "rgb(255, 255, 255) / rgb(27, 31, 36) / rgb(246, 248, 250)" {
		t.Errorf("light mode: %s", got)
	}
	b.do("the system in dark mode", colorScheme("dark"))
	b.until("dark colours", `getComputedStyle(document.body).backgroundColor === "rgb(13, 17, 23)"`)
	if got := eval[string](b, colours); got != "rgb(13, 17, 23) / rgb(230, 237, 243) / rgb(22, 27, 34)" {
		t.Errorf("dark mode: %s", got)
	}
	b.shot("instances-dark")
	b.open(e, "/")
	b.shot("overview-dark")
	b.do("the system in light mode", colorScheme("light"))
	b.until("light colours again", `getComputedStyle(document.body).backgroundColor === "rgb(255, 255, 255)"`)
}

// TestKeyboardInBrowser: the first Tab reaches a visible skip link that
// moves the focus to the content; the focus is outlined; g then a letter
// goes to a page, / focuses the search, ? opens the shortcuts' help and
// Escape closes it; j moves between rows and Enter opens one.
func TestKeyboardInBrowser(t *testing.T) {
	e := newEnv(t)
	inst := e.schedule(t, "greet", `["keys"]`)
	e.waitState(t, inst.GetId(), pb.State_STATE_COMPLETED)
	b := newBrowser(t)
	b.signIn(e, adminToken)
	b.open(e, "/")
	b.do("Tab", chromedp.KeyEvent("\t"))
	if got := eval[string](b, `(() => { const a = document.activeElement, r = a.getBoundingClientRect(); return a.className + " " + (r.left >= 0 && r.width > 0) + " " + getComputedStyle(a).outlineStyle })()`); got != "skip true solid" {
		t.Errorf("after the first Tab: %q, want the skip link visible and outlined", got)
	}
	b.do("Enter on the skip link", chromedp.KeyEvent("\r"))
	b.until("the focus on the content", `document.activeElement && document.activeElement.id === "live"`)
	b.do("g i", chromedp.KeyEvent("g"), chromedp.KeyEvent("i"))
	b.until("the Instances page", `location.pathname === "/console/instances" && document.body.dataset.live === "open"`)
	b.do("/", chromedp.KeyEvent("/"))
	b.until("the search focused", `document.activeElement && document.activeElement.id === "f-kind"`)
	b.do("type a filter", chromedp.KeyEvent("greet\r"))
	b.until("the filtered list", `location.search.includes("kind=greet") && document.body.dataset.live === "open"`)
	b.do("j", chromedp.KeyEvent("j"))
	b.until("the first row focused", fmt.Sprintf(`document.activeElement && document.activeElement.dataset.id === "%s"`, inst.GetId()))
	b.do("Enter", chromedp.KeyEvent("\r"))
	b.until("the instance page, its script running", fmt.Sprintf(`location.pathname.endsWith("%s") && document.body.dataset.live === "open"`, inst.GetId()))
	b.do("?", chromedp.KeyEvent("?"))
	b.until("the help open", `document.getElementById("keys").open`)
	b.shot("shortcuts")
	b.do("Escape", chromedp.KeyEvent("\u001b"))
	b.until("the help closed", `!document.getElementById("keys").open`)
	b.do("g q", chromedp.KeyEvent("g"), chromedp.KeyEvent("q"))
	b.until("the Queues page", `location.pathname === "/console/queues"`)
}

// overflowing is a script returning the elements of the page that reach
// past the viewport's right edge, other than those inside a box that
// scrolls sideways (a wide table in its .scroll box) and fits itself.
const overflowing = `(() => {
  const vw = document.documentElement.clientWidth, out = [];
  if (document.documentElement.scrollWidth > vw) out.push("the page is " + document.documentElement.scrollWidth + " px wide");
  const scrolls = el => { for (let p = el.parentElement; p; p = p.parentElement) { const o = getComputedStyle(p).overflowX; if (o === "auto" || o === "scroll" || o === "hidden") return p.getBoundingClientRect().right <= vw + 0.5; } return false; };
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= vw + 0.5 || getComputedStyle(el).position === "fixed") continue;
    if (el.closest("dialog:not([open])")) continue;
    if (!scrolls(el)) out.push((el.id ? "#" + el.id : el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined ? "." + el.className.split(" ")[0] : "")) + " to " + Math.round(r.right) + " px");
  }
  return out.slice(0, 8).join("; ");
})()`

// TestEveryPageAtDesktopAndPhone opens every page of the console at a
// desktop width and at 390 px: no element reaches past a phone's width
// (outside a box that scrolls sideways), and each page's screenshot is
// taken at both widths (doc/console/page-*.png with
// JOBKIT_SCREENSHOTS=$PWD/../doc/console).
func TestEveryPageAtDesktopAndPhone(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.mgrs["default"]
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "greet", MaxRetries: 2, Priority: 3, Description: "says hi"}, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().PutCalendar(ctx, &store.Calendar{Name: "office", TimeZone: "Europe/Paris", Workdays: []time.Weekday{time.Monday, time.Tuesday}}, 0); err != nil {
		t.Fatal(err)
	}
	done := e.schedule(t, "greet", `["ada"]`)
	for i := range 6 {
		e.schedule(t, "greet", fmt.Sprintf(`["n%d"]`, i))
	}
	failed := e.schedule(t, "flaky", "")
	running := e.schedule(t, "steps", "")
	e.waitState(t, failed.GetId(), pb.State_STATE_TERMINATED)
	e.waitState(t, running.GetId(), pb.State_STATE_PROCESSING)
	if _, err := m.ScheduleJob(ctx, "tagged"); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().SetConcurrencyLimit(ctx, job.ConcurrencyLimit{Kind: "steps", Max: 4}); err != nil {
		t.Fatal(err)
	}
	// Made before the browser, so the browser (its open pages) ends first.
	ae, _, _, _ := alertEnv(t)
	b := newBrowser(t)
	b.do("the sign-in page", chromedp.Navigate(e.console+"/signin"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.signIn(e, adminToken)
	b.open(e, "/jobs")
	b.do("create a trigger",
		chromedp.SendKeys(chromedp.CSS("#t-name"), "nightly"),
		chromedp.SendKeys(chromedp.CSS("#t-kind"), "greet"),
		chromedp.SendKeys(chromedp.CSS("#t-args"), `["night"]`),
		chromedp.SendKeys(chromedp.CSS("#t-cron"), "0 3 * * *"))
	b.click("submit the trigger", "#t-create")
	b.until("the trigger listed", `document.querySelector('tr[data-trigger="nightly"]') !== null`)

	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"queues", "/queues"},
		{"queue", "/queues/default"},
		{"kind", "/kinds/greet?window=24h"},
		{"instances", "/instances"},
		{"instance", "/instances/" + done.GetId()},
		{"instance-failed", "/instances/" + failed.GetId()},
		{"instance-running", "/instances/" + running.GetId()},
		{"jobs", "/jobs"},
		{"trigger-edit", "/triggers/nightly/edit"},
		{"definition-edit", "/definitions/greet/edit"},
		{"executors", "/executors"},
		{"nodes", "/nodes"},
		{"calendars", "/calendars"},
		{"calendar", "/calendars/office"},
		{"limits", "/limits"},
	}
	for _, width := range []int64{1280, 390} {
		b.do("the width", chromedp.EmulateViewport(width, 900))
		suffix := ""
		if width == 390 {
			suffix = "-phone"
		}
		// page-<name>.png and page-<name>-phone.png: the other tests'
		// screenshots keep their names.
		for _, p := range pages {
			b.do("open "+p.path, chromedp.Navigate(e.console+p.path))
			b.until("the page "+p.path+" loaded, its live feed open", `document.readyState === "complete" && (document.body.dataset.live === "open" || !document.getElementById("live").dataset.live)`)
			if msg := eval[string](b, `(document.getElementById("error-message") || {}).innerText || ""`); msg != "" {
				t.Errorf("%s: %s", p.path, msg)
			}
			if bad := eval[string](b, overflowing); bad != "" && width == 390 {
				t.Errorf("%s at %d px: wider than the screen: %s", p.path, width, bad)
			}
			if bad := eval[string](b, misaligned); bad != "" {
				t.Errorf("%s at %d px: columns aligned apart from their headers: %s", p.path, width, bad)
			}
			b.shot("page-" + p.name + suffix)
		}
	}
	// The sign-in page, at both widths.
	b.click("sign out", `form[action="/console/signout"] button`)
	b.until("the sign-in page", `document.querySelector("#token") !== null`)
	if bad := eval[string](b, overflowing); bad != "" {
		t.Errorf("the sign-in page at 390 px: %s", bad)
	}
	b.shot("page-signin-phone")
	b.do("desktop width", chromedp.EmulateViewport(1280, 900))
	b.shot("page-signin")
	e.step <- struct{}{}
	e.step <- struct{}{}

	// Alerts, on a server that evaluates them.
	b.signIn(ae, adminToken)
	for _, width := range []int64{1280, 390} {
		b.do("the width", chromedp.EmulateViewport(width, 900))
		b.open(ae, "/alerts")
		if bad := eval[string](b, overflowing); bad != "" && width == 390 {
			t.Errorf("/alerts at 390 px: wider than the screen: %s", bad)
		}
		if width == 390 {
			b.shot("page-alerts-phone")
		} else {
			b.shot("page-alerts")
		}
	}
}

// TestQueuePage: a queue's page shows its counts, pausing it there comes
// back to it, a queue with no instances is a 404 naming where to look,
// and a viewer sees no pause button.
func TestQueuePage(t *testing.T) {
	e := newEnv(t)
	e.waitState(t, e.schedule(t, "greet", `["q"]`).GetId(), pb.State_STATE_COMPLETED)
	c := browserless(t)
	csrf := signIn(t, e, c, operatorToken)
	p := get(t, c, e.console+"/queues/default")
	if p.status != 200 || !strings.Contains(p.body, `id="series-counts"`) || !strings.Contains(p.body, `data-action="pause"`) {
		t.Fatalf("the queue's page: %d\n%s", p.status, p.body)
	}
	p = post(t, c, e.console+"/queues/default/pause", url.Values{"csrf": {csrf}, "back": {"queue"}}, nil)
	if loc := p.header.Get("Location"); p.status != 303 || loc != "/console/queues/default" {
		t.Fatalf("pause from the queue's page: %d to %q", p.status, loc)
	}
	if p := get(t, c, e.console+"/queues/default"); !strings.Contains(p.body, `id="series-status">paused`) {
		t.Fatalf("the queue's page after the pause:\n%s", p.body)
	}
	if p := get(t, c, e.console+"/queues/nowhere"); p.status != 404 || !strings.Contains(p.body, "Queues page") {
		t.Fatalf("a queue with no instances: %d\n%s", p.status, p.body)
	}
	v := browserless(t)
	signIn(t, e, v, viewerToken)
	if p := get(t, v, e.console+"/queues/default"); p.status != 200 || strings.Contains(p.body, `data-action=`) {
		t.Fatalf("a viewer's queue page: %d\n%s", p.status, p.body)
	}
}
