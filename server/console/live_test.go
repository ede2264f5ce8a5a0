package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/store"
)

// press puts the mouse button down on the middle of the element sel
// selects, as the first half of a user's click, and returns where.
func (b *browser) press(what, sel string) (x, y float64) {
	b.t.Helper()
	js, _ := json.Marshal(sel)
	var at []float64
	b.until(what+": the element in view", fmt.Sprintf(`(() => { const el = document.querySelector(%s); if (!el) return false; el.scrollIntoView({block: "center"}); return true; })()`, js))
	at = eval[[]float64](b, fmt.Sprintf(`(() => { const r = document.querySelector(%s).getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`, js))
	b.do(what+": mouse down", chromedp.MouseEvent(chromedp.MousePressed, at[0], at[1], chromedp.ButtonLeft, chromedp.ClickCount(1)))
	return at[0], at[1]
}

// release lets the mouse button go at x, y: the second half of the click.
func (b *browser) release(what string, x, y float64) {
	b.t.Helper()
	b.do(what+": mouse up", chromedp.MouseEvent(chromedp.MouseReleased, x, y, chromedp.ButtonLeft, chromedp.ClickCount(1)))
}

// refreshes is how many live refreshes the page has applied.
func (b *browser) refreshes() int {
	b.t.Helper()
	return eval[int](b, `Number(document.body.dataset.refreshes || 0)`)
}

// TestLiveRefreshKeepsAClickInProgress: a user's click is a mouse down and
// a mouse up on the same element. When a live refresh lands between the
// two (a change elsewhere on the page), the click must still act: the
// button under the pointer stays the element it was. Each case presses a
// button, makes the server change something the page shows, waits until
// the page has applied that change, then releases.
func TestLiveRefreshKeepsAClickInProgress(t *testing.T) {
	e := newEnv(t)
	b := newBrowser(t)
	b.signIn(e, adminToken)
	ctx := context.Background()

	t.Run("queues", func(t *testing.T) {
		b.t = t
		e.schedule(t, "tagged", "") // never runs here: stays scheduled in queue default
		b.open(e, "/queues")
		b.until("one scheduled in default", `document.querySelector('tr[data-queue="default"] td:nth-child(3)').textContent === "1"`)
		before := b.refreshes()
		x, y := b.press("pause default", `tr[data-queue="default"] button[data-action="pause"]`)
		e.schedule(t, "tagged", "")
		b.until("the refreshed count, while the button is held", fmt.Sprintf(`document.querySelector('tr[data-queue="default"] td:nth-child(3)').textContent === "2" && Number(document.body.dataset.refreshes || 0) > %d`, before))
		b.release("pause default", x, y)
		b.until("queue default shown paused", `document.querySelector('tr[data-queue="default"] .status') && document.querySelector('tr[data-queue="default"] .status').textContent.includes("paused")`)
		if !paused(t, e) {
			t.Fatal("the server does not have queue default paused")
		}
		if _, err := e.queues(adminToken).ResumeQueue(ctx, connect.NewRequest(&pb.ResumeQueueRequest{Name: "default"})); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("instance", func(t *testing.T) {
		b.t = t
		inst := e.schedule(t, "steps", "")
		e.waitState(t, inst.GetId(), pb.State_STATE_PROCESSING)
		b.open(e, "/instances/"+inst.GetId())
		b.until("the first step logged", `document.querySelector("#logs") && document.querySelector("#logs").innerText.includes("step 1")`)
		before := b.refreshes()
		x, y := b.press("cancel the running instance", "#cancel")
		e.step <- struct{}{} // the executor logs "step 2": the page refreshes its logs
		b.until("the second step shown, while the button is held", fmt.Sprintf(`document.querySelector("#logs").innerText.includes("step 2") && Number(document.body.dataset.refreshes || 0) > %d`, before))
		b.release("cancel the running instance", x, y)
		e.waitState(t, inst.GetId(), pb.State_STATE_CANCELED)
		b.until("the canceled state shown", `document.querySelector("#state") && document.querySelector("#state").textContent === "canceled"`)
	})

	t.Run("triggers", func(t *testing.T) {
		b.t = t
		if _, err := e.triggers(adminToken).CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{
			Name: "race", Kind: "greet", ArgsJson: `["race"]`, Interval: durationpb.New(time.Second),
		}})); err != nil {
			t.Fatal(err)
		}
		b.open(e, "/jobs")
		b.until("the trigger's first tick shown", `document.querySelector('tr[data-trigger="race"] td.last-tick a') !== null`)
		tick := eval[string](b, `document.querySelector('tr[data-trigger="race"] td.last-tick time').getAttribute("datetime")`)
		x, y := b.press("pause the trigger", `tr[data-trigger="race"] button[data-action="pause"]`)
		b.until("the next tick shown in the same row, while the button is held", fmt.Sprintf(`document.querySelector('tr[data-trigger="race"] td.last-tick time').getAttribute("datetime") !== %q`, tick))
		b.release("pause the trigger", x, y)
		b.until("the trigger shown paused", `document.querySelector('tr[data-trigger="race"] td.status') && document.querySelector('tr[data-trigger="race"] td.status').textContent.includes("paused")`)
		got, err := e.triggers(adminToken).GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "race"}))
		if err != nil {
			t.Fatal(err)
		}
		if !got.Msg.GetTrigger().GetPaused() {
			t.Fatal("the server does not have trigger race paused")
		}
	})
}

// queues returns a QueueService client with token in namespace default.
func (e *env) queues(token string) jobkitv1connect.QueueServiceClient {
	return jobkitv1connect.NewQueueServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(auth{token, "default"}))
}

// triggers returns a TriggerService client with token in namespace default.
func (e *env) triggers(token string) jobkitv1connect.TriggerServiceClient {
	return jobkitv1connect.NewTriggerServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(auth{token, "default"}))
}

// TestAPauseMadeInTheConsoleReachesOpenPages: a queue paused and a trigger
// created by one user show on another user's open pages within a second,
// though neither change is an event of the change feed.
func TestAPauseMadeInTheConsoleReachesOpenPages(t *testing.T) {
	e := newEnv(t)
	e.schedule(t, "tagged", "") // queue default exists, its instance waits for good
	admin := browserless(t)
	csrf := signIn(t, e, admin, adminToken)
	b := newBrowser(t)
	b.signIn(e, viewerToken)

	b.open(e, "/queues")
	b.until("queue default running", `document.querySelector('tr[data-queue="default"] .status').textContent.includes("running")`)
	start := time.Now()
	if p := post(t, admin, e.console+"/queues/default/pause", url.Values{"csrf": {csrf}}, nil); p.status != http.StatusSeeOther {
		t.Fatalf("pause: %d %s", p.status, p.body)
	}
	b.until("queue default shown paused on the viewer's open page", `document.querySelector('tr[data-queue="default"] .status').textContent.includes("paused")`)
	if d := time.Since(start); d > time.Second {
		t.Errorf("the pause showed after %v, want within 1 s", d)
	}

	b.open(e, "/jobs")
	form := url.Values{"csrf": {csrf}, "name": {"pushed"}, "kind": {"greet"}, "args": {`["x"]`}, "cron": {"@daily"}}
	if p := post(t, admin, e.console+"/triggers", form, nil); p.status != http.StatusSeeOther {
		t.Fatalf("create trigger: %d %s", p.status, p.body)
	}
	b.until("the new trigger on the viewer's open page", `document.querySelector('tr[data-trigger="pushed"]') !== null`)
}

// TestAPauseMadeElsewhereReachesOpenPages: a queue paused outside this
// console (another jobd, jobctl, a Manager of the user's own) shows on an
// open Queues page within about a second, though the change feed carries
// no event for it.
func TestAPauseMadeElsewhereReachesOpenPages(t *testing.T) {
	e := newEnv(t)
	e.schedule(t, "tagged", "") // queue default exists, its instance waits for good
	b := newBrowser(t)
	b.signIn(e, viewerToken)
	b.open(e, "/queues")
	b.until("queue default running", `document.querySelector('tr[data-queue="default"] .status').textContent.includes("running")`)
	start := time.Now()
	if err := e.mgrs["default"].Admin().PauseQueue(t.Context(), "default"); err != nil {
		t.Fatal(err)
	}
	b.until("queue default shown paused on the open page", `document.querySelector('tr[data-queue="default"] .status').textContent.includes("paused")`)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the pause showed after %v, want within about a second", d)
	}
	if err := e.mgrs["default"].Admin().ResumeQueue(t.Context(), "default"); err != nil {
		t.Fatal(err)
	}
	b.until("queue default shown running again", `document.querySelector('tr[data-queue="default"] .status').textContent.includes("running")`)
}

// TestATriggerMadeElsewhereReachesOpenPages: a trigger created or paused
// outside this console (jobctl, another jobd, a user's Manager) shows on
// an open Jobs page within about a second, though the change feed carries
// no event for it.
func TestATriggerMadeElsewhereReachesOpenPages(t *testing.T) {
	e := newEnv(t)
	b := newBrowser(t)
	b.signIn(e, viewerToken)
	b.open(e, "/jobs")
	m := e.mgrs["default"]
	start := time.Now()
	tr, err := m.Admin().PutTrigger(t.Context(), &store.Trigger{Name: "elsewhere", Kind: "greet", Args: []byte(`["x"]`), Cron: "@daily"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.until("the trigger made elsewhere on the open page", `document.querySelector('tr[data-trigger="elsewhere"]') !== null`)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the trigger showed after %v, want within about a second", d)
	}
	tr.Paused = true
	if _, err := m.Admin().PutTrigger(t.Context(), tr, tr.Version); err != nil {
		t.Fatal(err)
	}
	b.until("the trigger shown paused", `document.querySelector('tr[data-trigger="elsewhere"]').textContent.includes("paused")`)
}

// TestSearchPageRefreshesNoSoonerThanItAsks: a text search page asks for
// live refreshes at most every 5 s (each re-reads up to thousands of
// instances), and that holds for the refresh made when its live feed
// opens too: loading a search page runs the search once, not twice at
// once. An ordinary page refreshes as soon as its feed opens.
func TestSearchPageRefreshesNoSoonerThanItAsks(t *testing.T) {
	e := newEnv(t)
	b := newBrowser(t)
	b.signIn(e, adminToken)
	// firstFetch is when (ms after navigation start) the page's first
	// live refresh was requested, or -1.
	const firstFetch = `(() => { const f = performance.getEntriesByType("resource").filter(r => r.initiatorType === "fetch" && r.name === location.href); return f.length ? f[0].startTime : -1; })()`

	b.open(e, "/instances?kind=greet")
	b.until("the ordinary page's refresh on open", firstFetch+` >= 0`)

	b.open(e, "/instances?text=nothing-matches")
	b.until("the search page's first refresh (within 10 s)", firstFetch+` >= 0`)
	if at := eval[float64](b, firstFetch); at < 4500 {
		t.Errorf("the search page refreshed %.0f ms after it loaded, want no sooner than its 5 s", at)
	}
}
