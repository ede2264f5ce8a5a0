package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// defs returns a DefinitionService client with token in namespace default.
func (e *env) defs(token string) jobkitv1connect.DefinitionServiceClient {
	return jobkitv1connect.NewDefinitionServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(auth{token, "default"}))
}

var wasRE = regexp.MustCompile(`name="was" value="([^"]+)"`)

// TestEditTriggerAndDefinition: an admin changes a trigger's schedule and
// policies and a definition's policy through the console's forms; a save
// over another person's change is refused and changes nothing, as is an
// operator's (the server's refusal) and bad input (named).
func TestEditTriggerAndDefinition(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	trig := e.triggers(adminToken)
	if _, err := trig.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{
		Name: "nightly", Kind: "greet", ArgsJson: `["night"]`, Cron: "0 3 * * *",
	}})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.defs(adminToken).CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: &pb.Definition{
		Kind: "report", Queue: "default", MaxRetries: 3, Description: "monthly report",
		Unique: &pb.UniquePolicy{By: pb.UniqueBy_UNIQUE_BY_ARGS, Ttl: durationpb.New(time.Hour)},
	}})); err != nil {
		t.Fatal(err)
	}
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)

	p := get(t, c, e.console+"/triggers/nightly/edit")
	was := wasRE.FindStringSubmatch(p.body)
	if p.status != http.StatusOK || was == nil || !strings.Contains(p.body, `value="0 3 * * *"`) {
		t.Fatalf("edit page: status %d:\n%s", p.status, p.body)
	}
	form := url.Values{"csrf": {csrf}, "was": {was[1]}, "kind": {"greet"}, "args": {`["day"]`}, "cron": {"30 9 * * 1-5"},
		"tz": {"Europe/Paris"}, "interval": {""}, "overlap": {"forbid"}, "missed": {"catch_up_once"}, "catchup": {"1h"}}
	// Bad input first: named, nothing changed.
	for field, bad := range map[string]string{"args": `{"a":1}`, "catchup": "soon", "overlap": "sometimes"} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		f.Set(field, bad)
		if p := post(t, c, e.console+"/triggers/nightly/edit", f, nil); p.status != http.StatusBadRequest {
			t.Errorf("%s %q: status %d, want 400:\n%s", field, bad, p.status, p.body)
		}
	}
	p = post(t, c, e.console+"/triggers/nightly/edit", form, nil)
	if p.status != http.StatusSeeOther {
		t.Fatalf("save: status %d:\n%s", p.status, p.body)
	}
	got, err := trig.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "nightly"}))
	if err != nil {
		t.Fatal(err)
	}
	tr := got.Msg.GetTrigger()
	if tr.GetCron() != "30 9 * * 1-5" || tr.GetTimeZone() != "Europe/Paris" || tr.GetArgsJson() != `["day"]` || tr.GetOverlap() != pb.OverlapPolicy_OVERLAP_POLICY_FORBID ||
		tr.GetMissed() != pb.MissedTickPolicy_MISSED_TICK_POLICY_CATCH_UP_ONCE || tr.GetCatchUpWithin().AsDuration() != time.Hour {
		t.Fatalf("saved trigger: %v", tr)
	}
	// The same form again: the trigger changed since it was shown.
	form.Set("cron", "0 0 * * *")
	if p := post(t, c, e.console+"/triggers/nightly/edit", form, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, "changed by someone else") {
		t.Fatalf("a stale save: status %d:\n%s", p.status, p.body)
	}
	// An operator: the server refuses.
	oc := browserless(t)
	ocsrf := signIn(t, e, oc, operatorToken)
	p = get(t, oc, e.console+"/triggers/nightly/edit")
	if strings.Contains(p.body, `id="edit-trigger"`) {
		t.Error("an operator is shown the trigger edit form")
	}
	form.Set("csrf", ocsrf)
	form.Set("was", wasRE.FindStringSubmatch(get(t, c, e.console+"/triggers/nightly/edit").body)[1])
	if p := post(t, oc, e.console+"/triggers/nightly/edit", form, nil); p.status != http.StatusForbidden || !strings.Contains(p.body, "needs role admin") {
		t.Fatalf("an operator's save: status %d:\n%s", p.status, p.body)
	}
	if got, _ := trig.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "nightly"})); got.Msg.GetTrigger().GetCron() != "30 9 * * 1-5" {
		t.Fatalf("refused saves changed the trigger: %v", got.Msg.GetTrigger())
	}

	// A definition's policy; what the form does not show is kept.
	p = get(t, c, e.console+"/definitions/report/edit")
	if p.status != http.StatusOK || !strings.Contains(p.body, `name="version" value="1"`) {
		t.Fatalf("definition page: status %d:\n%s", p.status, p.body)
	}
	dform := url.Values{"csrf": {csrf}, "version": {"1"}, "queue": {"reports"}, "priority": {"5"}, "retries": {"-1"}, "timeout": {"2m"},
		"backoff": {"exponential"}, "backoff_base": {"2s"}, "backoff_limit": {"1m"}, "jitter": {"0.1"}, "labels": {"gpu, region=eu"}, "description": {"the monthly report"}}
	if p := post(t, c, e.console+"/definitions/report/edit", dform, nil); p.status != http.StatusSeeOther {
		t.Fatalf("save the definition: status %d:\n%s", p.status, p.body)
	}
	dg, err := e.defs(adminToken).GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: "report"}))
	if err != nil {
		t.Fatal(err)
	}
	d := dg.Msg.GetDefinition()
	if d.GetQueue() != "reports" || d.GetPriority() != 5 || d.GetMaxRetries() != -1 || d.GetTimeout().AsDuration() != 2*time.Minute ||
		d.GetBackoff().GetKind() != pb.BackoffKind_BACKOFF_KIND_EXPONENTIAL || d.GetBackoff().GetLimit().AsDuration() != time.Minute ||
		strings.Join(d.GetLabels(), ",") != "gpu,region=eu" || d.GetDescription() != "the monthly report" ||
		d.GetUnique().GetBy() != pb.UniqueBy_UNIQUE_BY_ARGS || d.GetVersion() != 2 {
		t.Fatalf("saved definition: %v", d)
	}
	// The same form again is at version 1, no longer stored.
	if p := post(t, c, e.console+"/definitions/report/edit", dform, nil); p.status != http.StatusBadRequest || !strings.Contains(p.body, "changed by someone else") {
		t.Fatalf("a stale definition save: status %d:\n%s", p.status, p.body)
	}
	dform.Set("version", "2")
	dform.Set("jitter", "2")
	if p := post(t, c, e.console+"/definitions/report/edit", dform, nil); p.status != http.StatusBadRequest || !strings.Contains(strings.ToLower(p.body), "jitter") {
		t.Fatalf("jitter 2: status %d:\n%s", p.status, p.body)
	}
}

// TestEditTriggerInBrowser: the trigger's edit page previews the next fire
// times of the spec as it is typed; saved, the list shows them.
func TestEditTriggerInBrowser(t *testing.T) {
	e := newEnv(t)
	if _, err := e.triggers(adminToken).CreateTrigger(context.Background(), connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{
		Name: "hourly", Kind: "greet", ArgsJson: `["h"]`, Cron: "@hourly",
	}})); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	b.signIn(e, adminToken)
	b.open(e, "/jobs")
	b.click("edit the trigger", `tr[data-trigger="hourly"] a.edit`)
	b.until("the edit page with its preview", `location.pathname.endsWith("/triggers/hourly/edit") && document.querySelectorAll("#e-preview time").length === 5`)
	eval[bool](b, `(document.querySelector("#e-cron").value = "") === ""`)
	b.do("type a new spec", chromedp.SendKeys(chromedp.CSS("#e-cron"), "0 0 1 1 *"))
	b.until("the preview of the new spec: every 1 January", `Array.from(document.querySelectorAll("#e-preview time")).length === 5 && Array.from(document.querySelectorAll("#e-preview time")).every(t => t.getAttribute("datetime").includes("-01-01T00:00:00Z"))`)
	b.do("type a wrong spec", chromedp.SendKeys(chromedp.CSS("#e-cron"), " junk"))
	b.until("the preview says what is wrong", `document.querySelector("#e-preview .error") !== null`)
	eval[bool](b, `(document.querySelector("#e-cron").value = "") === ""`)
	b.do("fix it", chromedp.SendKeys(chromedp.CSS("#e-cron"), "0 0 1 1 *"))
	b.until("the preview again", `document.querySelectorAll("#e-preview time").length === 5`)
	b.shot("trigger-edit")
	b.click("save", "#e-save")
	b.until("the list with the new spec", `location.pathname.endsWith("/jobs") && document.querySelector('tr[data-trigger="hourly"] td.mono').textContent.includes("0 0 1 1 *")`)
	if n := eval[int](b, `Array.from(document.querySelectorAll('tr[data-trigger="hourly"] td.next time')).filter(t => t.getAttribute("datetime").includes("-01-01T00:00:00Z")).length`); n != 5 {
		t.Fatalf("the list shows %d next fire times on 1 January, want 5", n)
	}
}
