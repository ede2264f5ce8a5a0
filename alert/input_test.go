package alert_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/webhook"
)

func TestBadInputIsRefusedAndNothingStored(t *testing.T) {
	ctx := context.Background()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: "report", Queue: "reports"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	svc, err := alert.New(alert.Config{Store: st, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	rec := newReceiver(t)
	for _, tc := range []struct {
		name string
		rule alert.Rule
		is   error
		says string
	}{
		{"missing kind", alert.Rule{Name: "r", Condition: alert.Failed, Kind: "nightly-export"}, alert.ErrUnknown, `kind "nightly-export"`},
		{"missing queue", alert.Rule{Name: "r", Condition: alert.QueueLag, Queue: "imports", Threshold: time.Minute}, alert.ErrUnknown, `queue "imports"`},
		{"missing trigger", alert.Rule{Name: "r", Condition: alert.MissedTick, Trigger: "hourly"}, alert.ErrUnknown, `trigger "hourly"`},
		{"missing channel", alert.Rule{Name: "r", Condition: alert.Failed, Kind: "report", Channels: []string{"pager"}}, alert.ErrUnknown, `channel "pager"`},
		{"zero threshold", alert.Rule{Name: "r", Condition: alert.LongRun, Kind: "report"}, alert.ErrInvalid, "threshold 0s"},
		{"negative threshold", alert.Rule{Name: "r", Condition: alert.QueueLag, Queue: "reports", Threshold: -time.Second}, alert.ErrInvalid, "threshold -1s"},
		{"negative failures", alert.Rule{Name: "r", Condition: alert.Failed, Failures: -2}, alert.ErrInvalid, "failures -2"},
		{"negative repeat", alert.Rule{Name: "r", Condition: alert.Failed, RepeatEvery: -time.Minute}, alert.ErrInvalid, "repeat_every"},
		{"two scopes", alert.Rule{Name: "r", Condition: alert.Failed, Kind: "report", Queue: "reports"}, alert.ErrInvalid, "more than one"},
		{"no condition", alert.Rule{Name: "r"}, alert.ErrInvalid, "no condition"},
		{"bad name", alert.Rule{Name: "a b", Condition: alert.Failed}, alert.ErrInvalid, "letters, digits"},
	} {
		_, err := svc.PutRule(ctx, &tc.rule, 0)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v saying %q", tc.name, err, tc.is, tc.says)
		}
	}
	// The good forms of the same rules are stored.
	if _, err := svc.PutRule(ctx, &alert.Rule{Name: "ok-kind", Condition: alert.Failed, Kind: "report"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PutRule(ctx, &alert.Rule{Name: "ok-queue", Condition: alert.QueueLag, Queue: "reports", Threshold: time.Minute}, 0); err != nil {
		t.Fatal(err)
	}
	if rules, _ := svc.ListRules(ctx); len(rules) != 2 {
		t.Fatalf("stored %d rules, want the 2 good ones", len(rules))
	}

	// Channels: a forbidden address (the webhook executor's guard refuses
	// loopback unless allowed), malformed ones, and a secret given inline.
	for _, tc := range []struct {
		name string
		ch   alert.Channel
		is   error
		says string
	}{
		{"loopback", alert.Channel{Name: "c", Type: alert.Webhook, URL: rec.srv.URL}, webhook.ErrForbidden, "loopback"},
		{"metadata address", alert.Channel{Name: "c", Type: alert.Chat, URL: "http://169.254.169.254/latest"}, webhook.ErrForbidden, "link-local"},
		{"private", alert.Channel{Name: "c", Type: alert.Webhook, URL: "http://10.1.2.3/hook"}, webhook.ErrForbidden, "private"},
		{"scheme", alert.Channel{Name: "c", Type: alert.Webhook, URL: "ftp://example.com/x"}, alert.ErrInvalid, "http://"},
		{"inline secret", alert.Channel{Name: "c", Type: alert.Webhook, URL: "https://example.com/x", SecretRef: "hunter2"}, alert.ErrInvalid, "never the secret itself"},
		{"no recipients", alert.Channel{Name: "c", Type: alert.Email, SMTPAddr: "mail.example.com:587", From: "jobs@example.com"}, alert.ErrInvalid, "no recipients"},
		{"half a login", alert.Channel{Name: "c", Type: alert.Email, SMTPAddr: "mail.example.com:587", From: "jobs@example.com", To: []string{"ops@example.com"}, Username: "jobs"}, alert.ErrInvalid, "both username and password_ref"},
	} {
		_, err := svc.PutChannel(ctx, &tc.ch, 0)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("channel %s: %v; want %v saying %q", tc.name, err, tc.is, tc.says)
		}
	}
	if chs, _ := svc.ListChannels(ctx); len(chs) != 0 {
		t.Fatalf("stored %d channels, want none", len(chs))
	}

	// Silences: an end in the past, a missing rule.
	for _, tc := range []struct {
		sl   alert.Silence
		is   error
		says string
	}{
		{alert.Silence{Name: "s", Rule: "ok-kind", End: time.Now().Add(-time.Minute)}, alert.ErrInvalid, "not in the future"},
		{alert.Silence{Name: "s", Rule: "nope", End: time.Now().Add(time.Hour)}, alert.ErrUnknown, `rule "nope"`},
		{alert.Silence{Name: "s", Kind: "nope", End: time.Now().Add(time.Hour)}, alert.ErrUnknown, `kind "nope"`},
		{alert.Silence{Name: "s", End: time.Now().Add(time.Hour)}, alert.ErrInvalid, "exactly one"},
	} {
		_, err := svc.PutSilence(ctx, &tc.sl, 0)
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("silence %+v: %v; want %v saying %q", tc.sl, err, tc.is, tc.says)
		}
	}
	if list, err := svc.ListSilences(ctx); err != nil || len(list) != 0 {
		t.Fatalf("stored silences %v, %v; want none", list, err)
	}
}

func TestSilenceMutesAndKeepsHistory(t *testing.T) {
	bad, _ := job.NewJob(job.WithKind("bad"), job.WithMaxRetries(0), job.WithExecutor(func() error { return errors.New("nope") }))
	b := setup(t, nil, bad)
	ctx := b.ctx
	if _, err := b.svcs[0].PutRule(ctx, &alert.Rule{Name: "bad-fails", Condition: alert.Failed, Kind: "bad", Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svcs[0].PutSilence(ctx, &alert.Silence{Name: "maintenance", Kind: "bad", End: time.Now().Add(time.Hour), Comment: "migrating"}, 0); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b, 2)
	if _, err := b.mgr.ScheduleJob(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	var page *alert.NotificationPage
	waitFor(t, "a silenced notification in the history", 5*time.Second, func() bool {
		var err error
		page, err = b.svcs[1].ListNotifications(ctx, "", 0, "")
		return err == nil && len(page.Notifications) == 1
	})
	if n := page.Notifications[0]; n.Status != alert.Silenced || n.Silence != "maintenance" || n.Event != alert.Firing {
		t.Fatalf("notification %+v; want firing, silenced by maintenance", n)
	}
	waitSteps(t, b, 3)
	if got := b.recv.payloads(); len(got) != 0 {
		t.Fatalf("a silenced notification was sent: %+v", got)
	}
}

func TestFailingChannelRetriesAndShows(t *testing.T) {
	bad, _ := job.NewJob(job.WithKind("bad"), job.WithMaxRetries(0), job.WithExecutor(func() error { return errors.New("nope") }))
	b := setup(t, nil, bad)
	ctx := b.ctx
	b.recv.mu.Lock()
	b.recv.fail = 2
	b.recv.mu.Unlock()
	if _, err := b.svcs[0].PutRule(ctx, &alert.Rule{Name: "bad-fails", Condition: alert.Failed, Kind: "bad", Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b, 2)
	if _, err := b.mgr.ScheduleJob(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery after two refusals", 10*time.Second, func() bool {
		st, err := b.svcs[1].ChannelStatus(ctx, "hook")
		return err == nil && st.Delivered == 1
	})
	st, err := b.svcs[1].ChannelStatus(ctx, "hook")
	if err != nil || st.Failed != 2 || st.Delivered != 1 || st.ConsecutiveFailures != 0 || !strings.Contains(st.LastError, "500") {
		t.Fatalf("channel status %+v, %v; want 2 failed, 1 delivered, healthy again, the 500 kept", st, err)
	}
	page, err := b.svcs[1].ListNotifications(ctx, "", 0, "")
	if err != nil || len(page.Notifications) != 1 || page.Notifications[0].Attempts != 3 || page.Notifications[0].Status != alert.Delivered {
		t.Fatalf("history %+v, %v; want one delivered in 3 attempts", page.Notifications, err)
	}

	// A channel whose receiver is gone fails every attempt: it shows as
	// failing, and the notification ends failed in the history.
	gone := newReceiver(t)
	gone.srv.Close()
	if _, err := b.svcs[0].PutChannel(ctx, &alert.Channel{Name: "gone", Type: alert.Chat, URL: gone.srv.URL}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svcs[0].PutRule(ctx, &alert.Rule{Name: "bad-fails-2", Condition: alert.Failed, Kind: "bad", Channels: []string{"gone"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b, 2)
	if _, err := b.mgr.ScheduleJob(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the notification to fail for good", 20*time.Second, func() bool {
		page, err := b.svcs[0].ListNotifications(ctx, "", 0, "")
		if err != nil {
			return false
		}
		for _, n := range page.Notifications {
			if n.Channel == "gone" && n.Status == alert.Undelivered {
				return n.Attempts == 8
			}
		}
		return false
	})
	st, err = b.svcs[0].ChannelStatus(ctx, "gone")
	if err != nil || st.ConsecutiveFailures != 8 || !strings.Contains(st.LastError, "connection refused") {
		t.Fatalf("status %+v, %v; want 8 failures in a row, connection refused", st, err)
	}
}

// TestStateSurvivesRestart: services stopped after an incident opened and
// started again (new processes on the same store) resolve it, once.
func TestStateSurvivesRestart(t *testing.T) {
	fail := true
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	flaky, _ := job.NewJob(job.WithKind("flaky"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		<-mu
		f := fail
		mu <- struct{}{}
		if f {
			return errors.New("down")
		}
		return nil
	}))
	b := setup(t, nil, flaky)
	ctx := b.ctx
	if _, err := b.svcs[0].PutRule(ctx, &alert.Rule{Name: "flaky-fails", Condition: alert.Failed, Kind: "flaky", Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b, 2)
	if _, err := b.mgr.ScheduleJob(ctx, "flaky"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "firing", 5*time.Second, func() bool { return len(b.recv.events("flaky-fails")) == 1 })
	b.stopRun()
	<-mu
	fail = false
	mu <- struct{}{}
	in, err := b.mgr.ScheduleJob(ctx, "flaky") // while no evaluator runs
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the success", 5*time.Second, func() bool {
		got, err := b.mgr.GetInstance(ctx, in.ID)
		return err == nil && got.State == store.Completed
	})
	var fresh []*alert.Service
	for _, node := range []string{"jobd-c", "jobd-d"} {
		svc, err := alert.New(alert.Config{Store: b.st, Node: node, Interval: 50 * time.Millisecond, Guard: loopbackGuard(t)})
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, svc)
	}
	b.svcs = fresh
	var wg syncWG
	b.run(&wg.WaitGroup)
	defer func() { b.stopRun(); wg.Wait() }()
	waitFor(t, "resolved after the restart", 5*time.Second, func() bool { return len(b.recv.events("flaky-fails")) >= 2 })
	waitSteps(t, b, 3)
	if got := b.recv.events("flaky-fails"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("notifications %v; want firing, resolved", got)
	}
}
