package console_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// misaligned is a script returning, for every table of the page, the
// columns whose header is aligned otherwise than their first body cell
// (a number right-aligned under a left-aligned header reads as the
// neighbouring column's).
const misaligned = `(() => {
  const out = [];
  document.querySelectorAll("table").forEach((tbl, ti) => {
    const head = tbl.querySelector("thead tr"), row = tbl.querySelector("tbody tr");
    if (!head || !row) return;
    Array.from(head.cells).forEach((th, i) => {
      const td = row.cells[i];
      if (!td) return;
      const a = getComputedStyle(th).textAlign, b = getComputedStyle(td).textAlign;
      const norm = x => x === "start" ? "left" : x === "end" ? "right" : x;
      if (norm(a) !== norm(b)) out.push((tbl.id || "table " + ti) + ": " + th.innerText + " header " + a + ", cells " + b);
    });
  });
  return out.join("; ");
})()`

// TestConsoleLayoutDefects drives the pages a new operator reported
// (issue 33 item 9): number columns aligned with their headers on every
// page, an icon so no favicon.ico 404s, the Instances page no wider than a
// 390 px phone, error pages that do not refetch on live events, the
// state alias "failed", relative times that move on, a finished
// instance's node, a dead node's busy slots, and durations without
// nanoseconds.
func TestConsoleLayoutDefects(t *testing.T) {
	stores := map[string]store.Store{}
	e := newEnvOn(t, func(t *testing.T, ns string) store.Store {
		s := memdb(t, ns)
		stores[ns] = s
		return s
	})
	ctx := context.Background()
	m := e.mgrs["default"]
	if _, err := m.Admin().PutDefinition(ctx, job.Definition{Kind: "greet", MaxRetries: 2, Priority: 3}, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admin().PutCalendar(ctx, &store.Calendar{Name: "office", TimeZone: "Europe/Paris", Workdays: []time.Weekday{time.Monday, time.Friday}}, 0); err != nil {
		t.Fatal(err)
	}
	done := e.schedule(t, "greet", `["ada"]`)
	e.waitState(t, done.GetId(), pb.State_STATE_COMPLETED)
	// Work that waits: a lag on the overview and queues pages.
	if _, err := m.ScheduleJob(ctx, "tagged"); err != nil {
		t.Fatal(err)
	}
	// A node killed while busy: its last heartbeat said 1 of 4 busy.
	if _, err := stores["default"].Heartbeat(ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: "killed", Workers: 4, Busy: 1, Kinds: []string{"greet"}},
		Now: time.Now().Add(-time.Hour), DeadAfter: job.DefaultDeadAfter}); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	b.signIn(e, adminToken)
	for _, path := range []string{"/", "/queues", "/jobs", "/calendars", "/nodes", "/instances", "/instances/" + done.GetId()} {
		b.open(e, path)
		if bad := eval[string](b, misaligned); bad != "" {
			t.Errorf("%s: columns aligned apart from their headers: %s", path, bad)
		}
		if bad := eval[string](b, `(document.body.innerText.match(/\d\.\d{4,}s\b/) || [""])[0]`); bad != "" {
			t.Errorf("%s: a duration printed to the nanosecond: %q", path, bad)
		}
	}

	// An icon of the console's own, which the server serves.
	icon := eval[string](b, `(document.querySelector('link[rel="icon"]') || {}).href || ""`)
	if icon == "" {
		t.Error("no link rel=icon: every page load asks for /favicon.ico, a 404")
	} else if st := eval[int](b, fmt.Sprintf(`fetch(%q).then(r => r.status)`, icon)); st != 200 {
		t.Errorf("the icon %s answers %d", icon, st)
	}

	// A finished instance names the node that ran it.
	b.open(e, "/instances/"+done.GetId())
	if node := eval[string](b, `(() => { const dt = Array.from(document.querySelectorAll("dl.facts dt")).find(d => d.innerText === "Node"); return dt ? dt.nextElementSibling.innerText : "" })()`); node == "" || node == "—" {
		t.Errorf("a completed instance shows Node %q; want the node its history names", node)
	}

	// A dead node's busy slots are not shown as busy.
	b.open(e, "/nodes")
	if busy := eval[string](b, `document.querySelector('tr[data-node="killed"] td.num').innerText`); busy == "1/4" {
		t.Errorf("a dead node shows %q busy; its slots are not running anything this console can know of", busy)
	}

	// Relative times move on without a reload.
	b.open(e, "/instances")
	eval[bool](b, `(() => { const n = Date.now(); Date.now = () => n + 3 * 3600e3; return true })()`)
	b.until("the created time of an instance to read about three hours ago", `Array.from(document.querySelectorAll("#instances time")).some(t => /3 hours ago/.test(t.innerText))`)

	// The state alias jobctl accepts.
	b.open(e, "/instances?state=failed")
	if msg := eval[string](b, `(document.getElementById("error-message") || {}).innerText || ""`); msg != "" {
		t.Errorf("/instances?state=failed: %s", msg)
	}

	// An error page is not refreshed by live events.
	b.do("open a missing instance", chromedp.Navigate(e.console+"/instances/nope"))
	b.until("the not-found page", `document.getElementById("error-message") !== null`)
	if live := eval[string](b, `document.getElementById("live").dataset.live || ""`); live != "" {
		t.Errorf("the error page follows the live feed (%s): it refetches, and fails, at every event", live)
	}

	// The calendar form's working days sit in their box, left to right.
	b.open(e, "/calendars/office")
	if bad := eval[string](b, `(() => {
	  const fs = document.querySelector("fieldset.workdays"), boxes = fs && fs.querySelectorAll("label.check");
	  if (!boxes || boxes.length !== 7) return "want 7 working-day checkboxes, got " + (boxes ? boxes.length : 0);
	  const left = fs.getBoundingClientRect().left, first = boxes[0].getBoundingClientRect().left;
	  return first - left > 40 ? "the first checkbox sits " + Math.round(first - left) + " px from its box's left edge" : "";
	})()`); bad != "" {
		t.Errorf("calendar page: %s", bad)
	}
	b.shot("calendar")

	// A phone: the Instances page fits its width.
	b.do("phone width", chromedp.EmulateViewport(390, 844))
	b.open(e, "/instances")
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("the Instances page is %d px wide on a 390 px phone", w)
	}
}
