package console_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// TestWorkflowPageInBrowser draws a workflow's DAG in headless Chromium
// against a jobd process on Redis: each task's box shows its state and
// changes live as the tasks run, and clicking a box opens its instance.
func TestWorkflowPageInBrowser(t *testing.T) {
	e := newJobdEnv(t)
	wfs := jobkitv1connect.NewWorkflowServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(auth{adminToken, "default"}))
	task := func(name, kind, args string, after ...string) *pb.WorkflowTaskSpec {
		return &pb.WorkflowTaskSpec{Name: name, Job: &pb.ScheduleRequest{Kind: kind, ArgsJson: args}, DependsOn: after}
	}
	res, err := wfs.CreateWorkflow(context.Background(), connect.NewRequest(&pb.CreateWorkflowRequest{Name: "pipeline", Tasks: []*pb.WorkflowTaskSpec{
		task("fetch", "greet", `["fetch"]`),
		task("resize", "steps", "", "fetch"),
		task("check", "flaky", "", "fetch"),
		task("publish", "greet", `["publish"]`, "resize"),
		task("report", "greet", `["report"]`, "check"),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	wf := res.Msg.GetWorkflow()
	ids := map[string]string{}
	for _, in := range wf.GetTasks() {
		ids[in.GetTask()] = in.GetId()
	}
	b := newBrowser(t)
	b.signIn(e, viewerToken)
	b.open(e, "/workflows/"+wf.GetId())
	node := func(name, state string) string {
		return fmt.Sprintf(`document.querySelector('#dag a.dag-node[data-task="%s"][data-state="%s"]') !== null`, name, state)
	}
	b.until("five boxes and four edges", `document.querySelectorAll("#dag a.dag-node").length === 5 && document.querySelectorAll("#dag path.dag-edge").length === 4`)
	// The columns follow the dependencies: fetch first, publish last.
	if got := eval[bool](b, `(() => { const x = n => document.querySelector('#dag a.dag-node[data-task="'+n+'"] rect').x.baseVal.value;
		return x("fetch") < x("resize") && x("resize") === x("check") && x("resize") < x("publish"); })()`); !got {
		t.Error("the graph's columns do not follow the dependencies (fetch, then resize and check, then publish)")
	}
	b.until("fetch completed, resize running, check failed and its dependent canceled",
		node("fetch", "completed")+" && "+node("resize", "processing")+" && "+node("check", "terminated")+" && "+node("report", "canceled"))
	b.shot("workflow-running")
	// Live: the page is not reloaded while resize and publish complete.
	eval[bool](b, `(window.__sameDocument = true)`)
	e.step <- struct{}{}
	e.step <- struct{}{}
	b.until("resize and publish completed, the workflow failed, on the same page",
		node("resize", "completed")+" && "+node("publish", "completed")+` && document.querySelector("#workflow-state").textContent === "failed" && window.__sameDocument === true`)
	if got := eval[string](b, `document.querySelector('#dag path.dag-edge[data-from="fetch"][data-to="resize"]').getAttribute("class")`); got != "dag-edge completed" {
		t.Errorf("the edge from a completed task has class %q, want \"dag-edge completed\"", got)
	}
	b.shot("workflow-done")
	// A box links to its task's instance page.
	// (an SVG link has no click(): the mouse clicks it, as a person would).
	b.do("click the publish box", chromedp.Click(chromedp.CSS(`#dag a.dag-node[data-task="publish"] rect`)))
	b.until("publish's instance page", fmt.Sprintf(`location.pathname === "/console/instances/%s"`, ids["publish"]))
	// The list shows it, with its state.
	b.open(e, "/workflows")
	b.until("the workflow in the list, failed", fmt.Sprintf(`document.querySelector('#workflows tr[data-id="%s"][data-state="failed"]') !== null`, wf.GetId()))
	b.open(e, "/workflows?state=completed")
	b.until("none completed", `document.querySelector("#workflows") === null && document.querySelector(".empty") !== null`)
	b.shot("workflows-list")
}
