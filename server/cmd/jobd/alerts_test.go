package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/webhook"
)

// alertSecret signs the webhook notifications of these tests; jobd reads
// it from its environment (secret_ref env:JOBKIT_TEST_ALERT_SECRET).
const alertSecret = "alert-secret-of-the-tests"

// alertReceiver is the real HTTP server notifications go to: it checks
// each one's signature (webhook.Verify) and keeps what it got.
type alertReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []alert.Payload
	bad []string
}

func newAlertReceiver(t *testing.T) *alertReceiver {
	r := &alertReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err := webhook.Verify([]byte(alertSecret), req.Header, body, time.Now(), 0); err != nil {
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

// of returns the payloads received for rule in namespace ns, in order.
func (r *alertReceiver) of(ns, rule string) []alert.Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []alert.Payload
	for _, p := range r.got {
		if p.Namespace == ns && p.Rule == rule {
			out = append(out, p)
		}
	}
	return out
}

func events(ps []alert.Payload) string {
	var s []string
	for _, p := range ps {
		s = append(s, string(p.Event))
	}
	return strings.Join(s, ",")
}

// waitEvents waits until rule has notified exactly want (events, comma
// separated) in ns.
func (r *alertReceiver) waitEvents(t *testing.T, ns, rule, want string) []alert.Payload {
	t.Helper()
	var got []alert.Payload
	waitFor(t, 30*time.Second, fmt.Sprintf("rule %s to notify %s", rule, want), func() (bool, string) {
		got = r.of(ns, rule)
		return events(got) == want, events(got)
	})
	return got
}

// mustCall makes a Connect JSON call that must succeed.
func mustCall(t *testing.T, base, ns, procedure, body string, out any) {
	t.Helper()
	if code, raw := callJSON(t, base, procedure, body, map[string]string{"Jobkit-Namespace": ns}, out); code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", procedure, body, code, raw)
	}
}

// alertArgs are the flags of a jobd that evaluates alerts quickly and may
// reach the test's receivers on loopback.
var alertArgs = []string{"--alert-interval", "200ms", "--alert-allow", "127.0.0.1", "--alert-console-url", "http://console.test/console"}

var alertEnv = []string{"JOBKIT_TEST_ALERT_SECRET=" + alertSecret}

// TestAlertsTwoJobdRedis: two jobd evaluate the same rules on one Redis
// and every alert reaches the receiver once: a failing job (resolved by a
// success), a job running past its threshold (while it runs), a trigger
// whose forbid policy skips, lag on a paused queue, and a kind whose only
// node is SIGKILLed.
func TestAlertsTwoJobdRedis(t *testing.T) {
	t.Parallel()
	testAlertsTwoJobd(t, []string{"--store", "redis", "--redis-addr", redisAddr(t)})
}

// TestAlertsTwoJobdEtcd is TestAlertsTwoJobdRedis on etcd.
func TestAlertsTwoJobdEtcd(t *testing.T) {
	t.Parallel()
	testAlertsTwoJobd(t, []string{"--store", "etcd", "--etcd-endpoints", etcdEndpoints(t)})
}

func testAlertsTwoJobd(t *testing.T, common []string) {
	ns, solo := uniqueNS(t), uniqueNS(t)+"-solo"
	rec := newAlertReceiver(t)
	// The worker of ns runs echo, sleep and block; the only node of solo
	// runs them there. Neither evaluates alerts.
	startJobd(t, testjobdBin(), nil, append(common, "--namespace", ns, "--publish-definitions", "--workers", "4", "--alerts=false", "--node-id", "worker")...)
	soloProc := startJobd(t, testjobdBin(), nil, append(common, "--namespace", solo, "--publish-definitions", "--workers", "1", "--alerts=false", "--node-id", "solo")...)
	var jobds []*proc
	for _, id := range []string{"jobd-a", "jobd-b"} {
		args := append(append(append([]string{}, common...), "--namespace", ns, "--namespace", solo, "--node-id", id), alertArgs...)
		jobds = append(jobds, startJobd(t, jobdBin(), alertEnv, args...))
	}
	a, b := jobds[0].api, jobds[1].api
	t.Cleanup(func() {
		if t.Failed() {
			for _, j := range jobds {
				t.Logf("jobd log:\n%s", lastLines(j.logText(), 40))
			}

		}
	})
	for _, n := range []string{ns, solo} {
		mustCall(t, a, n, jobkitv1connect.AlertServiceCreateChannelProcedure,
			fmt.Sprintf(`{"channel":{"name":"hook","type":"webhook","url":%q,"secretRef":"env:JOBKIT_TEST_ALERT_SECRET"}}`, rec.srv.URL), nil)
	}
	flag := filepath.Join(t.TempDir(), "release")
	mustCall(t, b, ns, jobkitv1connect.TriggerServiceCreateTriggerProcedure,
		fmt.Sprintf(`{"trigger":{"name":"tick","kind":"block","argsJson":%q,"interval":"1s","overlap":"OVERLAP_POLICY_FORBID"}}`, fmt.Sprintf("[%q]", flag)), nil)
	mustCall(t, a, ns, jobkitv1connect.QueueServicePauseQueueProcedure, `{"name":"paused-q"}`, nil)
	scheduleJSON(t, a, `{"kind":"echo","argsJson":"[\"late\"]","queue":"paused-q"}`, map[string]string{"Jobkit-Namespace": ns})
	for _, r := range []string{
		`{"name":"fails","condition":"failed","kind":"echo","channels":["hook"]}`,
		`{"name":"slow","condition":"long_run","kind":"sleep","threshold":"1s","channels":["hook"]}`,
		`{"name":"skips","condition":"missed_tick","trigger":"tick","channels":["hook"]}`,
		`{"name":"lag","condition":"queue_lag","queue":"paused-q","threshold":"0.5s","channels":["hook"]}`,
	} {
		mustCall(t, b, ns, jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":`+r+`}`, nil)
	}
	hdr := map[string]string{"Jobkit-Namespace": ns}

	// A failing job alerts once; a success resolves it.
	bad := scheduleJSON(t, a, `{"kind":"echo","argsJson":"[123]"}`, hdr)
	waitStateJSON(t, a, bad.ID, "STATE_TERMINATED", hdr)
	p := rec.waitEvents(t, ns, "fails", "firing")[0]
	if p.Instance != bad.ID || p.Error == "" || p.ConsoleURL != "http://console.test/console/instances/"+bad.ID+"?ns="+ns {
		t.Errorf("firing payload %+v", p)
	}
	good := scheduleJSON(t, b, `{"kind":"echo","argsJson":"[\"fine\"]"}`, hdr)
	waitStateJSON(t, a, good.ID, "STATE_COMPLETED", hdr)
	rec.waitEvents(t, ns, "fails", "firing,resolved")

	// A job past its threshold alerts while it runs.
	slow := scheduleJSON(t, a, `{"kind":"sleep","argsJson":"[4000]"}`, hdr)
	rec.waitEvents(t, ns, "slow", "firing")
	if in, _, raw := getInstanceJSON(t, b, slow.ID, hdr); in.State != "STATE_PROCESSING" {
		t.Errorf("at the long-run alert the instance is %s; want still PROCESSING", raw)
	}
	rec.waitEvents(t, ns, "slow", "firing,resolved")

	// The forbid policy skips a tick while the first blocks: an alert;
	// released, the trigger fires again and it resolves.
	p = rec.waitEvents(t, ns, "skips", "firing")[0]
	if p.Trigger != "tick" || !strings.Contains(p.Detail, "skipped") {
		t.Errorf("skipped-tick payload %+v", p)
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	rec.waitEvents(t, ns, "skips", "firing,resolved")

	// Lag on the paused queue.
	p = rec.waitEvents(t, ns, "lag", "firing")[0]
	if p.Queue != "paused-q" {
		t.Errorf("lag payload %+v", p)
	}

	// A kind whose only node is SIGKILLed: work waits (a delayed instance)
	// and no live node runs echo in namespace solo.
	scheduleJSON(t, a, `{"kind":"echo","argsJson":"[\"later\"]","delay":"3600s"}`, map[string]string{"Jobkit-Namespace": solo})
	mustCall(t, a, solo, jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"orphaned","condition":"no_node","kind":"echo","channels":["hook"]}}`, nil)
	var incidents struct {
		Incidents []struct {
			Rule  string `json:"rule"`
			State string `json:"state"`
		} `json:"incidents"`
	}
	mustCall(t, b, solo, jobkitv1connect.AlertServiceListIncidentsProcedure, `{}`, &incidents)
	if len(incidents.Incidents) != 0 {
		t.Fatalf("incidents in %s while its node lives: %+v", solo, incidents)
	}
	if err := soloProc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p = rec.waitEvents(t, solo, "orphaned", "firing")[0]
	if p.Kind != "echo" || !strings.Contains(p.Detail, "no live node") {
		t.Errorf("no-node payload %+v", p)
	}

	// Each alert reached the receiver once (two jobd evaluated them), with
	// a good signature; the history says the same on either jobd.
	for _, want := range []struct{ ns, rule, events string }{
		{ns, "fails", "firing,resolved"}, {ns, "slow", "firing,resolved"}, {ns, "skips", "firing,resolved"},
		{ns, "lag", "firing"}, {solo, "orphaned", "firing"},
	} {
		if got := events(rec.of(want.ns, want.rule)); got != want.events {
			t.Errorf("rule %s notified %s; want %s", want.rule, got, want.events)
		}
	}
	rec.mu.Lock()
	if len(rec.bad) > 0 {
		t.Errorf("refused by the receiver: %v", rec.bad)
	}
	rec.mu.Unlock()
	var hist struct {
		Notifications []struct {
			Rule, Event, Status string
		} `json:"notifications"`
	}
	mustCall(t, b, ns, jobkitv1connect.AlertServiceListNotificationsProcedure, `{}`, &hist)
	if len(hist.Notifications) != 7 {
		t.Errorf("history of %s on jobd-b: %+v; want the 7 notifications", ns, hist.Notifications)
	}
	for _, n := range hist.Notifications {
		if n.Status != "delivered" {
			t.Errorf("notification %+v not delivered", n)
		}
	}
	// jobctl shows the incidents.
	code, out := jobctl(t, nil, "--addr", a, "-n", ns, "alert", "incidents", "list")
	if code != 0 || !strings.Contains(out, "fails") || !strings.Contains(out, "lag") || !strings.Contains(out, "open") {
		t.Errorf("jobctl alert incidents list: %d\n%s", code, out)
	}
	// Fired once in the cluster: the counters of both jobd sum to one per
	// incident opened.
	var fired float64
	for _, j := range jobds {
		v, _ := value(scrape(t, j.health), "jobkit_alerts_fired_total", map[string]string{"namespace": ns, "rule": "fails"})
		fired += v
	}
	if fired != 1 {
		t.Errorf("jobkit_alerts_fired_total{rule=fails} summed over both jobd: %v; want 1", fired)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
