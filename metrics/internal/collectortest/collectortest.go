// Package collectortest runs a Collector against a real Manager and
// checks what a Prometheus scrape returns: Run schedules work of every
// outcome on a store, then checks every metric against it. The metrics
// module's own tests use it on memdb, and internal/redistest (a module of
// its own, so that metrics' go.mod does not require the Redis plugin)
// runs the same checks on Redis. The helpers it is built from (a Scraper
// over HTTP, Families to read a scrape, StartManager, WaitFor) serve the
// other metrics tests too.
//
// It is a package of the metrics module, not a test file, so that the
// other module can import it; it imports nothing that the metrics
// module's go.mod does not already require.
package collectortest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
	"github.com/jobkit/job/store"
)

// quiet is the managers' logger: the tests read metrics, not logs.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// A Scraper serves a registry the test owns over HTTP, as an embedded
// user or jobd would, and parses what a scrape returns with the
// Prometheus text parser.
type Scraper struct {
	t   *testing.T
	url string
}

// Serve serves reg until the end of the test.
func Serve(t *testing.T, reg *prometheus.Registry) *Scraper {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close)
	return &Scraper{t: t, url: srv.URL + "/metrics"}
}

// Families is one scrape, by metric name.
type Families map[string]*dto.MetricFamily

// Scrape scrapes the registry once in the text format, failing the test
// on an error.
func (s *Scraper) Scrape() Families {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4") // the text format, not protobuf
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("scrape: %s: %s", resp.Status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		s.t.Fatalf("parse scrape: %v", err)
	}
	return fams
}

// Find returns the series of name whose labels include labels (given as
// name, value pairs).
func (f Families) Find(name string, labels ...string) *dto.Metric {
	fam := f[name]
	if fam == nil {
		return nil
	}
next:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// Value is a counter's or a gauge's value, or a histogram's sample count;
// -1 when the series is absent.
func (f Families) Value(name string, labels ...string) float64 {
	m := f.Find(name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// Total is the sum of the values of every series of name (counters and
// gauges), or -1 when the scrape has no such metric.
func (f Families) Total(name string) float64 {
	fam := f[name]
	if fam == nil || len(fam.GetMetric()) == 0 {
		return -1
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// HistSum is a histogram's sum of observations, or -1 when the series is
// absent.
func (f Families) HistSum(name string, labels ...string) float64 {
	if m := f.Find(name, labels...); m != nil && m.Histogram != nil {
		return m.Histogram.GetSampleSum()
	}
	return -1
}

// WaitFor polls cond until it holds, failing the test after 20 s with
// what it waited for.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// MustJob is job.NewJob, failing the test on an error.
func MustJob(t *testing.T, opts ...job.JobOption) *job.Job {
	t.Helper()
	j, err := job.NewJob(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// StartManager starts a manager with opts (and a quiet logger), stopped at
// the end of the test.
func StartManager(t *testing.T, opts ...job.ManagerOption) *job.Manager {
	t.Helper()
	m, err := job.NewManager(append([]job.ManagerOption{job.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return m
}

// RunWork starts a manager on st observed by col, with 4 workers, and does
// this work, by kind, on the default queue unless said:
//
//	ok     3 completed at the first attempt
//	flaky  1 completed at the second attempt (1 retry)
//	bad    1 terminated after 2 attempts (1 retry)
//	slow   1 timed out (30 ms timeout, no retries)
//	block  1 canceled while running
//	later  2 due in an hour in queue q2, one canceled before it ran
//	stuck  1 ready in queue q2, which no manager claims
//
// It returns the manager once the default queue is done.
func RunWork(t *testing.T, st store.Store, col *metrics.Collector) *job.Manager {
	t.Helper()
	ctx := context.Background()
	m := StartManager(t, job.WithStore(st), job.WithObserver(col), job.WithWorkers(4))
	var flakyRuns atomic.Int32
	running := make(chan struct{}, 1)
	for _, j := range []*job.Job{
		MustJob(t, job.WithKind("ok"), job.WithExecutor(func() error { return nil })),
		MustJob(t, job.WithKind("flaky"), job.WithMaxRetries(2), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(func() error {
				if flakyRuns.Add(1) == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})),
		MustJob(t, job.WithKind("bad"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(func() error { return errors.New("always fails") })),
		MustJob(t, job.WithKind("slow"), job.WithMaxRetries(0), job.WithTimeout(30*time.Millisecond),
			job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })),
		MustJob(t, job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})),
		MustJob(t, job.WithKind("later"), job.WithQueue("q2"), job.WithExecutor(func() {})),
		MustJob(t, job.WithKind("stuck"), job.WithQueue("q2"), job.WithExecutor(func() {})),
	} {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	schedule := func(kind string, opts ...job.ScheduleOption) *job.InstanceInfo {
		t.Helper()
		ji, err := m.ScheduleJob(ctx, kind, opts...)
		if err != nil {
			t.Fatalf("schedule %s: %v", kind, err)
		}
		return ji
	}
	for range 3 {
		schedule("ok")
	}
	schedule("flaky")
	schedule("bad")
	schedule("slow")
	schedule("later", job.WithScheduleAfter(time.Hour))
	if _, err := m.CancelInstance(ctx, schedule("later", job.WithScheduleAfter(time.Hour)).ID); err != nil {
		t.Fatal(err)
	}
	schedule("stuck")
	blocked := schedule("block")
	<-running
	if _, err := m.CancelInstance(ctx, blocked.ID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := m.Wait(wctx); err != nil { // the default queue is done and every outcome observed
		t.Fatal(err)
	}
	return m
}

// CheckWork checks a scrape against the work RunWork did.
func CheckWork(t *testing.T, f Families, workers int) {
	t.Helper()
	const dq = job.DefaultQueue
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"jobkit_registered_jobs", nil, 7},
		{"jobkit_workers", nil, float64(workers)},
		{"jobkit_workers_busy", nil, 0},
		{"jobkit_executed_total", []string{"kind", "ok"}, 3},
		{"jobkit_executed_total", []string{"kind", "flaky"}, 2},
		{"jobkit_executed_total", []string{"kind", "bad"}, 2},
		{"jobkit_executed_total", []string{"kind", "slow"}, 1},
		{"jobkit_executed_total", []string{"kind", "block"}, 1},
		{"jobkit_completed_total", []string{"kind", "ok"}, 3},
		{"jobkit_completed_total", []string{"kind", "flaky"}, 1},
		{"jobkit_completed_total", []string{"kind", "bad"}, 0},
		{"jobkit_terminated_total", []string{"kind", "bad"}, 1},
		{"jobkit_timed_out_total", []string{"kind", "slow"}, 1},
		{"jobkit_canceled_total", []string{"kind", "block"}, 1},
		{"jobkit_canceled_total", []string{"kind", "later"}, 1},
		{"jobkit_retries_total", []string{"queue", dq, "kind", "flaky"}, 1},
		{"jobkit_retries_total", []string{"queue", dq, "kind", "bad"}, 1},
		{"jobkit_retries_total", []string{"queue", dq, "kind", "ok"}, 0},
		{"jobkit_scheduled_total", []string{"queue", dq, "kind", "ok"}, 3},
		{"jobkit_scheduled_total", []string{"queue", "q2", "kind", "later"}, 2},
		{"jobkit_scheduled_total", []string{"queue", "q2", "kind", "stuck"}, 1},
		{"jobkit_execution_duration_seconds", []string{"kind", "ok"}, 3},
		{"jobkit_execution_duration_seconds", []string{"kind", "flaky"}, 2},
		{"jobkit_execution_duration_seconds", []string{"kind", "bad"}, 2},
		{"jobkit_execution_duration_seconds", []string{"kind", "slow"}, 1},
		{"jobkit_wait_duration_seconds", []string{"queue", dq, "kind", "ok"}, 3},
		{"jobkit_wait_duration_seconds", []string{"queue", dq, "kind", "flaky"}, 2},
		{"jobkit_queued", []string{"kind", "later"}, 1},
		{"jobkit_queued", []string{"kind", "stuck"}, 1},
		{"jobkit_queued", []string{"kind", "ok"}, 0},
		{"jobkit_queue_depth", []string{"queue", dq, "state", "completed"}, 4},
		{"jobkit_queue_depth", []string{"queue", dq, "state", "terminated"}, 1},
		{"jobkit_queue_depth", []string{"queue", dq, "state", "timedout"}, 1},
		{"jobkit_queue_depth", []string{"queue", dq, "state", "canceled"}, 1},
		{"jobkit_queue_depth", []string{"queue", dq, "state", "processing"}, 0},
		{"jobkit_queue_depth", []string{"queue", "q2", "state", "scheduled"}, 2},
		{"jobkit_queue_depth", []string{"queue", "q2", "state", "canceled"}, 1},
		{"jobkit_queue_lag_seconds", []string{"queue", dq}, 0},
		{"jobkit_nodes", []string{"status", "live"}, 1},
	} {
		if got := f.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Nothing lost, no scrape failed: the series exist, all at 0.
	for _, name := range []string{"jobkit_lease_lost_total", "jobkit_scrape_errors_total"} {
		if got := f.Total(name); got != 0 {
			t.Errorf("%s summed over its series = %v, want 0 (series present, nothing counted)", name, got)
		}
	}
	if got := f.HistSum("jobkit_execution_duration_seconds", "kind", "slow"); got < 0.03 {
		t.Errorf("slow's execution took %vs by the histogram, want at least its 30ms timeout", got)
	}
	if got := f.Value("jobkit_queue_lag_seconds", "queue", "q2"); !(got > 0) {
		t.Errorf("lag of q2 (stuck is ready and unclaimed) = %v, want > 0", got)
	}
	if got := f.Value("jobkit_kind_lag_seconds", "kind", "stuck"); !(got > 0) {
		t.Errorf("lag of kind stuck = %v, want > 0", got)
	}
	if got := f.Value("jobkit_kind_lag_seconds", "kind", "later"); got != 0 {
		t.Errorf("lag of kind later (not due) = %v, want 0", got)
	}
	for _, op := range []string{"enqueue", "claim", "finish", "cancel", "counts", "lag", "list_nodes", "heartbeat"} {
		if got := f.Value("jobkit_store_call_duration_seconds", "op", op); !(got >= 1) {
			t.Errorf("store calls %q observed: %v, want some", op, got)
		}
	}
	for name, fam := range f {
		if !strings.HasPrefix(name, "jobkit_") {
			t.Errorf("metric %s outside the jobkit_ prefix", name)
		}
		for _, m := range fam.Metric {
			for _, l := range m.Label {
				if l.GetName() == "id" || l.GetName() == "instance_id" {
					t.Errorf("%s has an instance label", name)
				}
			}
		}
	}
}

// CheckRescues makes an attempt lose its lease (another rescuer takes it
// back while it runs: its outcome is refused), and leaves an attempt of a
// crashed owner for the manager's rescuer, and one of a dead node; then
// checks the counters.
func CheckRescues(t *testing.T, st store.Store, s *Scraper, m *job.Manager) {
	t.Helper()
	ctx := context.Background()
	release := make(chan struct{})
	held := make(chan struct{}, 2)
	if err := m.RegisterJob(MustJob(t, job.WithKind("hold"), job.WithExecutor(func() {
		held <- struct{}{}
		<-release
	}))); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ScheduleJob(ctx, "hold"); err != nil {
		t.Fatal(err)
	}
	<-held
	moved, err := st.Rescue(ctx, &store.RescueParams{Now: time.Now().Add(time.Hour), Limit: 10, Node: "other"})
	if err != nil || len(moved) != 1 {
		t.Fatalf("rescue under the manager: %d moved, %v", len(moved), err)
	}
	close(release)

	// A crashed owner's attempt, in a queue nobody claims, lease ended.
	if _, err := m.ScheduleJob(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if c, err := st.Claim(ctx, &store.ClaimParams{Queue: "q2", Owner: "crashed", Limit: 1, Now: now, LeaseUntil: now.Add(time.Millisecond)}); err != nil || len(c.Instances) != 1 {
		t.Fatalf("claim as the crashed owner: %v, %v", c, err)
	}
	// A dead node's attempt: it heartbeats once, claims with a long lease
	// and is heard from no more.
	if _, err := st.Heartbeat(ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: "ghost"}, Now: time.Now(), DeadAfter: job.DefaultDeadAfter}); err != nil {
		t.Fatal(err)
	}
	if c, err := st.Claim(ctx, &store.ClaimParams{Queue: "q2", Owner: "ghost", Limit: 1, Now: time.Now(), LeaseUntil: time.Now().Add(time.Hour)}); err != nil || len(c.Instances) != 1 {
		t.Fatalf("claim as the ghost: %v, %v", c, err)
	}

	var f Families
	WaitFor(t, "the lost lease and both rescues to be counted", func() bool {
		f = s.Scrape()
		return f.Value("jobkit_completed_total", "kind", "hold") == 1 &&
			f.Value("jobkit_rescued_total", "cause", "lease", "kind", "stuck", "state", "scheduled") == 1 &&
			f.Value("jobkit_rescued_total", "cause", "node", "kind", "stuck", "state", "scheduled") == 1 &&
			// A scrape reads the node registry before the counters: the
			// rescue can be counted in one whose registry read came just
			// before the ghost was declared dead.
			f.Value("jobkit_nodes", "status", "dead") == 1
	})
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"jobkit_lease_lost_total", []string{"queue", job.DefaultQueue, "kind", "hold", "reason", "finish"}, 1},
		{"jobkit_executed_total", []string{"kind", "hold"}, 2},
		{"jobkit_rescued_total", []string{"queue", "q2", "kind", "stuck", "cause", "lease", "state", "scheduled"}, 1},
		{"jobkit_rescued_total", []string{"queue", "q2", "kind", "stuck", "cause", "node", "state", "scheduled"}, 1},
		{"jobkit_nodes", []string{"status", "dead"}, 1},
		{"jobkit_nodes", []string{"status", "live"}, 1},
	} {
		if got := f.Value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// Run runs work of every outcome on a real Manager on st, observed by a
// Collector on a pedantic registry, and checks every metric a scrape
// returns against it (RunWork, CheckWork, CheckRescues), then lints the
// Collector.
func Run(t *testing.T, st store.Store) {
	col, err := metrics.New(metrics.WithScrapeTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry() // checks what Collect sends against Describe
	reg.MustRegister(col)
	s := Serve(t, reg)
	m := RunWork(t, st, col)
	CheckWork(t, s.Scrape(), 4)
	CheckRescues(t, st, s, m)
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}
