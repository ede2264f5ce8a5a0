package alert_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestMissedTicksWithoutScheduler: no scheduler runs, so the trigger's
// ticks go unfired; the evaluator (on a clock of its own) sees the tick
// overdue and alerts; when a scheduler comes back and fires from now on
// (skipping what it missed), the jump over the unfired ticks is named,
// and the incident resolves once the trigger keeps time.
func TestMissedTicksWithoutScheduler(t *testing.T) {
	ctx := context.Background()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := &manualClock{t: t0}
	rec := newReceiver(t)
	t.Setenv("ALERT_TEST_SECRET", secret)
	svc, err := alert.New(alert.Config{Store: st, Node: "solo", Clock: clk, Guard: loopbackGuard(t)})
	if err != nil {
		t.Fatal(err)
	}
	trig, err := store.TriggersIn(st).PutTrigger(ctx, &store.PutTriggerParams{Trigger: &store.Trigger{Name: "every-minute", Kind: "report", Interval: time.Minute}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutChannel(ctx, &alert.Channel{Name: "hook", Type: alert.Webhook, URL: rec.srv.URL, SecretRef: "env:ALERT_TEST_SECRET"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutRule(ctx, &alert.Rule{Name: "missed", Condition: alert.MissedTick, Trigger: "every-minute", Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	step := func(at time.Time) {
		t.Helper()
		clk.t = at
		if err := svc.Step(ctx); err != nil {
			t.Fatal(err)
		}
		if err := svc.Deliver(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(t0.Add(30 * time.Second)) // the first tick (10:01) is not due
	step(t0.Add(70 * time.Second)) // 10 s late: within the grace
	if got := rec.events("missed"); len(got) != 0 {
		t.Fatalf("within the grace: %v", got)
	}
	step(t0.Add(80 * time.Second)) // 20 s late: missed
	if got := rec.events("missed"); !equal(got, alert.Firing) {
		t.Fatalf("a tick 20 s late: %v, want firing", got)
	}
	if p := rec.payloads()[0]; !strings.Contains(p.Detail, "no scheduler fired it") || p.Trigger != "every-minute" {
		t.Fatalf("payload %+v", p)
	}
	// A scheduler comes back at 10:05:10 and fires 10:06 on time, having
	// skipped 10:01 to 10:05.
	trig.LastTick = t0.Add(6 * time.Minute)
	if _, err := store.TriggersIn(st).PutTrigger(ctx, &store.PutTriggerParams{Trigger: trig, IfVersion: trig.Version, Now: t0}); err != nil {
		t.Fatal(err)
	}
	step(t0.Add(6*time.Minute + time.Second))
	if inc, err := svc.ListIncidents(ctx, alert.Open); err != nil || len(inc) != 1 {
		t.Fatalf("open incidents %+v, %v; want the one still open as the scheduler's jump is seen", inc, err)
	}
	step(t0.Add(6*time.Minute + 2*time.Second))
	if got := rec.events("missed"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("after the scheduler is back: %v, want firing, resolved", got)
	}

	// The whole cluster was down (no evaluator either) from 10:06 to
	// 10:12: the first step after sees the scheduler's jump over 10:07 to
	// 10:11 and alerts, then resolves.
	trig, err = store.TriggersIn(st).GetTrigger(ctx, "every-minute")
	if err != nil {
		t.Fatal(err)
	}
	trig.LastTick = t0.Add(12 * time.Minute)
	if _, err := store.TriggersIn(st).PutTrigger(ctx, &store.PutTriggerParams{Trigger: trig, IfVersion: trig.Version, Now: t0}); err != nil {
		t.Fatal(err)
	}
	step(t0.Add(12*time.Minute + time.Second))
	if got := rec.events("missed"); !equal(got, alert.Firing, alert.ResolvedEvent, alert.Firing) {
		t.Fatalf("after the outage: %v, want a second firing", got)
	}
	if p := rec.payloads()[2]; !strings.Contains(p.Detail, "5 tick(s) missed while no scheduler fired them") {
		t.Fatalf("payload %+v; want the 5 missed ticks named", p)
	}
	step(t0.Add(12*time.Minute + 2*time.Second))
	if got := rec.events("missed"); !equal(got, alert.Firing, alert.ResolvedEvent, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("after the outage: %v, want it resolved", got)
	}
}
