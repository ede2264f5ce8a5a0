package console_test

import (
	"strings"
	"testing"
	"time"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestProgressBarInListAndDetail: the progress a running instance reports
// shows as a <progress> bar (no inline style: the CSP forbids it) with its
// percentage and message in the instances list and on the detail page.
func TestProgressBarInListAndDetail(t *testing.T) {
	e := newEnv(t)
	c := browserless(t)
	signIn(t, e, c, viewerToken)
	inst := e.schedule(t, "steps", "")
	e.waitState(t, inst.GetId(), pb.State_STATE_PROCESSING)
	detail := e.console + "/instances/" + inst.GetId()
	bar := `<progress max="1" value="0.5"`
	deadline := time.Now().Add(10 * time.Second)
	for p := get(t, c, detail); !strings.Contains(p.body, bar); p = get(t, c, detail) {
		if time.Now().After(deadline) {
			t.Fatalf("the detail page shows no %s within 10 s:\n%s", bar, p.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p := get(t, c, detail); !strings.Contains(p.body, "50%") || !strings.Contains(p.body, "step 1 of 2") || strings.Contains(p.body, "style=") {
		t.Fatalf("detail page: want 50%%, the message and no inline style:\n%s", p.body)
	}
	list := get(t, c, e.console+"/instances?kind=steps")
	if !strings.Contains(list.body, bar) || !strings.Contains(list.body, "step 1 of 2") {
		t.Fatalf("the instances list shows no progress bar:\n%s", list.body)
	}
	e.step <- struct{}{}
	e.step <- struct{}{}
	e.waitState(t, inst.GetId(), pb.State_STATE_COMPLETED)
	if p := get(t, c, detail); !strings.Contains(p.body, `<progress max="1" value="1"`) || !strings.Contains(p.body, "step 2 of 2") {
		t.Fatalf("a completed instance's detail does not keep its last progress:\n%s", p.body)
	}
}

// TestProgressBarFollowsLiveInBrowser: on the detail page of a running
// instance, the progress bar follows a report that comes with no event
// (no state change, no log) within a few seconds, and the refreshes stop
// once the instance is final.
func TestProgressBarFollowsLiveInBrowser(t *testing.T) {
	e := newEnv(t)
	b := newBrowser(t)
	b.signIn(e, viewerToken)
	inst := e.schedule(t, "creep", "")
	e.waitState(t, inst.GetId(), pb.State_STATE_PROCESSING)
	b.open(e, "/instances/"+inst.GetId())
	b.until("the bar at 25%", `document.querySelector("#progress progress") && document.querySelector("#progress progress").value === 0.25`)
	e.step <- struct{}{} // the executor reports 0.75: no event
	b.until("the bar at 75%", `document.querySelector("#progress progress").value === 0.75 && document.querySelector("#progress").textContent.includes("75% crept")`)
	e.step <- struct{}{}
	e.waitState(t, inst.GetId(), pb.State_STATE_COMPLETED)
	b.until("the completed state", `document.querySelector("#state").textContent === "completed" && !document.querySelector("progress[data-running]")`)
}
