package alert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/webhook"
)

const secret = "s3cret-for-tests"

// receiver is a webhook endpoint that checks each body's signature and
// keeps the payloads.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []alert.Payload
	bad  []string
	fail int // answer 500 to this many requests first
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail > 0 {
			r.fail--
			http.Error(w, "down for the test", http.StatusInternalServerError)
			return
		}
		if err := webhook.Verify([]byte(secret), req.Header, body, time.Now(), 0); err != nil {
			r.bad = append(r.bad, err.Error())
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var p alert.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			r.bad = append(r.bad, err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.got = append(r.got, p)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) payloads() []alert.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]alert.Payload(nil), r.got...)
}

// events returns the events received for rule, in order.
func (r *receiver) events(rule string) []alert.Event {
	var out []alert.Event
	for _, p := range r.payloads() {
		if p.Rule == rule {
			out = append(out, p.Event)
		}
	}
	return out
}

// bundle is one namespace's store with a worker manager and two alert
// services (two "jobd") sharing it.
type bundle struct {
	st     *memdbstore.Store
	mgr    *job.Manager
	svcs   []*alert.Service
	recv   *receiver
	ctx    context.Context
	cancel context.CancelFunc
	// stopRun ends the services' Run loops only.
	stopRun context.CancelFunc
}

func setup(t *testing.T, queues []string, jobs ...*job.Job) *bundle {
	t.Helper()
	t.Setenv("ALERT_TEST_SECRET", secret)
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{st: st, recv: newReceiver(t)}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	opts := []job.ManagerOption{job.WithStore(st), job.WithWorkers(2), job.WithNodeID("worker"), job.WithTriggerReload(100 * time.Millisecond)}
	if len(queues) > 0 {
		opts = append(opts, job.WithQueues(queues...))
	}
	mgr, err := job.NewManager(opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := mgr.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := mgr.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	b.mgr = mgr
	var wg sync.WaitGroup
	for _, node := range []string{"jobd-a", "jobd-b"} {
		svc, err := alert.New(alert.Config{
			Store: st, Node: node, Interval: 50 * time.Millisecond,
			RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond,
			ConsoleURL: "http://jobd.test/console", Guard: loopbackGuard(t), KindKnown: func(k string) bool { _, err := mgr.GetJob(k); return err == nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		b.svcs = append(b.svcs, svc)
	}
	t.Cleanup(func() {
		b.cancel()
		wg.Wait()
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = mgr.Stop(sctx)
	})
	b.run(&wg)
	if _, err := b.svcs[0].PutChannel(b.ctx, &alert.Channel{Name: "hook", Type: alert.Webhook, URL: b.recv.srv.URL, SecretRef: "env:ALERT_TEST_SECRET"}, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) run(wg *sync.WaitGroup) {
	ctx, cancel := context.WithCancel(b.ctx)
	b.stopRun = cancel
	for _, s := range b.svcs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(ctx) }()
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func equal(a []alert.Event, b ...alert.Event) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

func TestFailedAlertsOnceAndResolves(t *testing.T) {
	var fail sync.Map
	fail.Store("on", true)
	flaky, _ := job.NewJob(job.WithKind("flaky"), job.WithMaxRetries(0), job.WithExecutor(func() error {
		if v, _ := fail.Load("on"); v.(bool) {
			return errors.New("disk full")
		}
		return nil
	}))
	b := setup(t, nil, flaky)
	if _, err := b.svcs[1].PutRule(b.ctx, &alert.Rule{Name: "flaky-fails", Condition: alert.Failed, Kind: "flaky", Failures: 2, Channels: []string{"hook"}}, 0); err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b, 2) // a step that saw the rule
	schedule := func() {
		t.Helper()
		in, err := b.mgr.ScheduleJob(b.ctx, "flaky")
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "instance "+in.ID+" to end", 5*time.Second, func() bool {
			got, err := b.mgr.GetInstance(b.ctx, in.ID)
			return err == nil && got.State.Final()
		})
	}
	schedule()
	// One failure of two: nothing yet. Another evaluation at least.
	waitSteps(t, b, 3)
	if got := b.recv.events("flaky-fails"); len(got) != 0 {
		t.Fatalf("after one failure of 2: %v, want nothing", got)
	}
	schedule()
	waitFor(t, "the firing notification", 5*time.Second, func() bool { return len(b.recv.events("flaky-fails")) >= 1 })
	p := b.recv.payloads()[0]
	if p.Event != alert.Firing || p.Kind != "flaky" || p.Error != "disk full" || p.Instance == "" || !strings.HasPrefix(p.ConsoleURL, "http://jobd.test/console/instances/"+p.Instance) {
		t.Fatalf("firing payload %+v", p)
	}
	fail.Store("on", false)
	schedule()
	waitFor(t, "the resolved notification", 5*time.Second, func() bool { return len(b.recv.events("flaky-fails")) >= 2 })
	waitSteps(t, b, 5)
	if got := b.recv.events("flaky-fails"); !equal(got, alert.Firing, alert.ResolvedEvent) {
		t.Fatalf("notifications %v; want one firing then one resolved (two evaluators)", got)
	}
	incs, err := b.svcs[0].ListIncidents(b.ctx, "")
	if err != nil || len(incs) != 1 || incs[0].State != alert.Resolved {
		t.Fatalf("incidents %+v, %v; want one resolved", incs, err)
	}
	page, err := b.svcs[1].ListNotifications(b.ctx, "", 0, "")
	if err != nil || len(page.Notifications) != 2 || page.Notifications[0].Event != alert.ResolvedEvent || page.Notifications[0].Status != alert.Delivered {
		t.Fatalf("history %+v, %v; want resolved then firing, delivered", page, err)
	}
	if len(b.recv.bad) != 0 {
		t.Fatalf("receiver refused: %v", b.recv.bad)
	}
}

// waitSteps waits until the shared state was written n more times.
func waitSteps(t *testing.T, b *bundle, n int) {
	t.Helper()
	v := stateVersion(b)
	waitFor(t, fmt.Sprintf("%d evaluation steps", n), 5*time.Second, func() bool { return stateVersion(b) >= v+int64(n) })
}

func stateVersion(b *bundle) int64 {
	d, err := b.st.GetDocument(context.Background(), "alert-state", "evaluator")
	if err != nil {
		return 0
	}
	return d.Version
}

// loopbackGuard allows the test's servers on 127.0.0.1.
func loopbackGuard(t *testing.T) *webhook.Guard {
	t.Helper()
	a, err := webhook.ParseAllowlist("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return &webhook.Guard{Allow: a}
}

type syncWG struct{ sync.WaitGroup }
