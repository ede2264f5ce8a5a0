package alert_test

import (
	"context"
	"strings"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
)

// blocker is a job that runs until released.
func blocker(t *testing.T, kind string) (*job.Job, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	j, err := job.NewJob(job.WithKind(kind), job.WithMaxRetries(0), job.WithExecutor(func(ctx context.Context) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return j, release
}

func TestLongRunAlertsWhileRunning(t *testing.T) {
	slow, release := blocker(t, "slow")
	b := setup(t, nil, slow)
	if _, err := b.svcs[0].PutRule(b.ctx, &alert.Rule{Name: "slow-runs", Condition: alert.LongRun, Kind: "slow", Threshold: 300 * time.Millisecond, Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	in, err := b.mgr.ScheduleJob(b.ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the long-run notification", 5*time.Second, func() bool { return len(b.recv.events("slow-runs")) >= 1 })
	got, err := b.mgr.GetInstance(b.ctx, in.ID)
	if err != nil || got.State != store.Processing {
		t.Fatalf("instance at the notification: %v, %v; want still Processing", got, err)
	}
	p := b.recv.payloads()[0]
	if p.Instance != in.ID || p.Condition != alert.LongRun || !strings.Contains(p.Detail, "above 300ms") {
		t.Fatalf("payload %+v", p)
	}
	close(release)
	waitFor(t, "the resolved notification", 5*time.Second, func() bool { return len(b.recv.events("slow-runs")) >= 2 })
	waitSteps(t, b, 4)
	if got := b.recv.events("slow-runs"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("notifications %v; want firing, resolved", got)
	}
}

func TestForbidSkipAlerts(t *testing.T) {
	slow, release := blocker(t, "nightly")
	b := setup(t, nil, slow)
	if _, err := b.mgr.Admin().PutTrigger(b.ctx, &store.Trigger{Name: "every-second", Kind: "nightly", Interval: time.Second, Overlap: store.OverlapForbid}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svcs[0].PutRule(b.ctx, &alert.Rule{Name: "skips", Condition: alert.MissedTick, Trigger: "every-second", Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the skipped-tick notification", 10*time.Second, func() bool { return len(b.recv.events("skips")) >= 1 })
	p := b.recv.payloads()[0]
	if p.Trigger != "every-second" || !strings.Contains(p.Detail, "skipped by the overlap policy") {
		t.Fatalf("payload %+v", p)
	}
	close(release)
	waitFor(t, "the resolved notification", 10*time.Second, func() bool { return len(b.recv.events("skips")) >= 2 })
	if got := b.recv.events("skips"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("notifications %v; want firing, resolved", got)
	}
}

func TestNoNodeAlerts(t *testing.T) {
	b := setup(t, nil)
	if _, err := b.st.PutDefinition(b.ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: "orphan", Queue: "default"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.mgr.ScheduleJob(b.ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svcs[0].PutRule(b.ctx, &alert.Rule{Name: "nobody", Condition: alert.NoNode, Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the no-node notification", 5*time.Second, func() bool { return len(b.recv.events("nobody")) >= 1 })
	if p := b.recv.payloads()[0]; p.Kind != "orphan" || !strings.Contains(p.Detail, "1 instance(s) scheduled") {
		t.Fatalf("payload %+v", p)
	}
	// A node that runs the kind comes: the incident resolves.
	orphan, _ := job.NewJob(job.WithKind("orphan"), job.WithExecutor(func() {}))
	m2, err := job.NewManager(job.WithStore(b.st), job.WithWorkers(1), job.WithNodeID("runner"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.RegisterJob(orphan); err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m2.Stop(context.Background()) }()
	waitFor(t, "the resolved notification", 5*time.Second, func() bool { return len(b.recv.events("nobody")) >= 2 })
	if got := b.recv.events("nobody"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("notifications %v; want firing, resolved", got)
	}
}

// manualClock is a clock the test moves.
type manualClock struct{ t time.Time }

func (c *manualClock) Now() time.Time { return c.t }

// TestLagOnPausedQueueRepeatsAndResolves drives one Service step by step
// on a clock of its own: the lag must stay above the threshold for the
// rule's duration, repeats come at the rule's interval, and the incident
// resolves when the queue is resumed and drained.
func TestLagOnPausedQueueRepeatsAndResolves(t *testing.T) {
	quick, _ := job.NewJob(job.WithKind("quick"), job.WithQueue("reports"), job.WithExecutor(func() {}))
	b := setup(t, []string{"reports"}, quick)
	b.stopRun() // no Run loops: this test steps by hand
	ctx := context.Background()
	clk := &manualClock{t: time.Now()}
	rec := newReceiver(t)
	svc, err := alert.New(alert.Config{Store: b.st, Node: "solo", Clock: clk, Guard: loopbackGuard(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutChannel(ctx, &alert.Channel{Name: "hook", Type: alert.Webhook, URL: rec.srv.URL, SecretRef: "env:ALERT_TEST_SECRET"}, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	m2 := b.mgr
	if err := m2.Admin().PauseQueue(ctx, "reports"); err != nil {
		t.Fatal(err)
	}
	if _, err := m2.ScheduleJob(ctx, "quick"); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutRule(ctx, &alert.Rule{Name: "lagging", Condition: alert.QueueLag, Queue: "reports", Threshold: time.Minute, For: 2 * time.Minute, RepeatEvery: 10 * time.Minute, Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	step := func(d time.Duration) {
		t.Helper()
		clk.t = clk.t.Add(d)
		if err := svc.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if err := svc.Deliver(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(30 * time.Second) // lag 30s: below
	step(time.Minute)      // lag 1m30s: above since now
	step(time.Minute)      // above for 1m: not yet
	if got := rec.events("lagging"); len(got) != 0 {
		t.Fatalf("before the duration: %v", got)
	}
	step(time.Minute) // above for 2m: fires
	if got := rec.events("lagging"); !equal(got, alert.Firing) {
		t.Fatalf("after the duration: %v, want firing", got)
	}
	step(5 * time.Minute) // still open, no repeat yet
	step(5 * time.Minute) // 10m after the notification: repeat
	step(time.Second)
	if got := rec.events("lagging"); !equal(got, alert.Firing, alert.Repeat) {
		t.Fatalf("after the repeat interval: %v, want firing, repeat", got)
	}
	if p := rec.payloads()[1]; p.Queue != "reports" || !strings.Contains(p.Detail, "above 1m0s") {
		t.Fatalf("repeat payload %+v", p)
	}
	if err := m2.Admin().ResumeQueue(ctx, "reports"); err != nil {
		t.Fatal(err)
	}
	// The worker manager (claiming from reports) runs it.
	b2 := b.mgr
	waitFor(t, "the instance to run", 10*time.Second, func() bool {
		rows, err := b2.Admin().CountInstances(ctx, "reports", "quick")
		return err == nil && len(rows) == 1 && rows[0].States[store.Completed] == 1
	})
	step(time.Second)
	if got := rec.events("lagging"); !equal(got, alert.Firing, alert.Repeat, alert.ResolvedEvent) {
		t.Fatalf("after the queue drained: %v, want firing, repeat, resolved", got)
	}
	// The history keeps 30 days.
	if page, err := svc.ListNotifications(ctx, "", 0, ""); err != nil || len(page.Notifications) != 3 {
		t.Fatalf("history %v, %v; want 3", page, err)
	}
	step(31 * 24 * time.Hour)
	if page, err := svc.ListNotifications(ctx, "", 0, ""); err != nil || len(page.Notifications) != 0 {
		t.Fatalf("history after 31 days: %d notifications, %v; want none", len(page.Notifications), err)
	}
}
