package console_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// TestLimitsPageInBrowser shows a rate limit and a concurrency limit in headless Chromium
// against a jobd process on Redis: its use (running of max) and the work
// waiting for it change live, on the same page, as instances start and
// end.
func TestLimitsPageInBrowser(t *testing.T) {
	e := newJobdEnv(t)
	ctx := context.Background()
	ls := jobkitv1connect.NewLimitServiceClient(http.DefaultClient, e.url, connect.WithInterceptors(auth{adminToken, "default"}))
	one := int32(1)
	if _, err := ls.SetConcurrencyLimit(ctx, connect.NewRequest(&pb.SetConcurrencyLimitRequest{Kind: "steps", Max: &one})); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.SetRateLimit(ctx, connect.NewRequest(&pb.SetRateLimitRequest{Kind: "mail", Rate: 100, Period: durationpb.New(time.Second), Burst: 10})); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)
	b.signIn(e, viewerToken)
	b.open(e, "/limits")
	rate := `document.querySelector('#rate-limits tr[data-kind="mail"][data-queue=""]')`
	b.until("the rate limit of mail", rate+` !== null && `+rate+`.querySelector(".rate").textContent === "100 per 1s" && `+rate+`.dataset.burst === "10"`)
	row := `document.querySelector('#concurrency-limits tr[data-kind="steps"][data-queue=""]')`
	b.until("the limit of steps, nothing running", row+` !== null && `+row+`.dataset.running === "0" && `+row+`.dataset.waiting === "0" && `+row+`.querySelector(".use").textContent === "0/1"`)
	eval[bool](b, `(window.__sameDocument = true)`)
	for range 3 {
		if _, err := e.jobs(adminToken, "default").Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{Kind: "steps"})); err != nil {
			t.Fatal(err)
		}
	}
	b.until("1/1 running, 2 waiting, full, on the same page", row+`.querySelector(".use").textContent === "1/1" && `+row+`.dataset.waiting === "2" && `+
		row+`.querySelector(".status").textContent === "full" && window.__sameDocument === true`)
	b.shot("limits-full")
	// The first ends; the next starts in its slot.
	e.step <- struct{}{}
	e.step <- struct{}{}
	b.until("1/1 running, 1 waiting, on the same page", row+`.querySelector(".use").textContent === "1/1" && `+row+`.dataset.waiting === "1" && window.__sameDocument === true`)
	if got := eval[string](b, `document.querySelector('a[href$="/limits"][aria-current="page"]').textContent`); got != "Limits" {
		t.Errorf("the navigation's current page is %q, want Limits", got)
	}
}
