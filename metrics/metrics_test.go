package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
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
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/metrics"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/redisstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testserver.StopAll()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func memStore(t *testing.T) store.Store {
	t.Helper()
	s, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// redisStore opens a store on the test binary's redis-server
// ($JOBKIT_REDIS_ADDR, or one started for the run) in a namespace of the
// test's own.
func redisStore(t *testing.T) store.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testserver.Redis(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	ns := fmt.Sprintf("metrics-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	s, err := redisstore.New(c, redisstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// scraper serves a registry the test owns over HTTP, as an embedded user
// or jobd would, and parses what a scrape returns with the Prometheus text
// parser.
type scraper struct {
	t   *testing.T
	url string
}

func serve(t *testing.T, reg *prometheus.Registry) *scraper {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close)
	return &scraper{t: t, url: srv.URL + "/metrics"}
}

// families is one scrape, by metric name.
type families map[string]*dto.MetricFamily

func (s *scraper) scrape() families {
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

// find returns the series of name whose labels include labels (given as
// name, value pairs).
func (f families) find(name string, labels ...string) *dto.Metric {
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

// value is a counter's or a gauge's value, or a histogram's sample count;
// -1 when the series is absent.
func (f families) value(name string, labels ...string) float64 {
	m := f.find(name, labels...)
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

// total is the sum of the values of every series of name (counters and
// gauges), or -1 when the scrape has no such metric.
func (f families) total(name string) float64 {
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

func (f families) histSum(name string, labels ...string) float64 {
	if m := f.find(name, labels...); m != nil && m.Histogram != nil {
		return m.Histogram.GetSampleSum()
	}
	return -1
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustJob(t *testing.T, opts ...job.JobOption) *job.Job {
	t.Helper()
	j, err := job.NewJob(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func startManager(t *testing.T, opts ...job.ManagerOption) *job.Manager {
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

// Work done by runWork, by kind, on the default queue unless said:
//
//	ok     3 completed at the first attempt
//	flaky  1 completed at the second attempt (1 retry)
//	bad    1 terminated after 2 attempts (1 retry)
//	slow   1 timed out (30 ms timeout, no retries)
//	block  1 canceled while running
//	later  2 due in an hour in queue q2, one canceled before it ran
//	stuck  1 ready in queue q2, which no manager claims
func runWork(t *testing.T, st store.Store, col *metrics.Collector) *job.Manager {
	t.Helper()
	ctx := context.Background()
	m := startManager(t, job.WithStore(st), job.WithObserver(col), job.WithWorkers(4))
	var flakyRuns atomic.Int32
	running := make(chan struct{}, 1)
	for _, j := range []*job.Job{
		mustJob(t, job.WithKind("ok"), job.WithExecutor(func() error { return nil })),
		mustJob(t, job.WithKind("flaky"), job.WithMaxRetries(2), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(func() error {
				if flakyRuns.Add(1) == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			})),
		mustJob(t, job.WithKind("bad"), job.WithMaxRetries(1), job.WithBackoff(job.ConstantBackoff(time.Millisecond)),
			job.WithExecutor(func() error { return errors.New("always fails") })),
		mustJob(t, job.WithKind("slow"), job.WithMaxRetries(0), job.WithTimeout(30*time.Millisecond),
			job.WithExecutor(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })),
		mustJob(t, job.WithKind("block"), job.WithExecutor(func(ctx context.Context) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})),
		mustJob(t, job.WithKind("later"), job.WithQueue("q2"), job.WithExecutor(func() {})),
		mustJob(t, job.WithKind("stuck"), job.WithQueue("q2"), job.WithExecutor(func() {})),
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

// checkWork checks a scrape against the work runWork did.
func checkWork(t *testing.T, f families, workers int) {
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
		if got := f.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Nothing lost, no scrape failed: the series exist, all at 0.
	for _, name := range []string{"jobkit_lease_lost_total", "jobkit_scrape_errors_total"} {
		if got := f.total(name); got != 0 {
			t.Errorf("%s summed over its series = %v, want 0 (series present, nothing counted)", name, got)
		}
	}
	if got := f.histSum("jobkit_execution_duration_seconds", "kind", "slow"); got < 0.03 {
		t.Errorf("slow's execution took %vs by the histogram, want at least its 30ms timeout", got)
	}
	if got := f.value("jobkit_queue_lag_seconds", "queue", "q2"); !(got > 0) {
		t.Errorf("lag of q2 (stuck is ready and unclaimed) = %v, want > 0", got)
	}
	if got := f.value("jobkit_kind_lag_seconds", "kind", "stuck"); !(got > 0) {
		t.Errorf("lag of kind stuck = %v, want > 0", got)
	}
	if got := f.value("jobkit_kind_lag_seconds", "kind", "later"); got != 0 {
		t.Errorf("lag of kind later (not due) = %v, want 0", got)
	}
	for _, op := range []string{"enqueue", "claim", "finish", "cancel", "counts", "lag", "list_nodes", "heartbeat"} {
		if got := f.value("jobkit_store_call_duration_seconds", "op", op); !(got >= 1) {
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

// checkRescues makes an attempt lose its lease (another rescuer takes it
// back while it runs: its outcome is refused), and leaves an attempt of a
// crashed owner for the manager's rescuer, and one of a dead node; then
// checks the counters.
func checkRescues(t *testing.T, st store.Store, s *scraper, m *job.Manager) {
	t.Helper()
	ctx := context.Background()
	release := make(chan struct{})
	held := make(chan struct{}, 2)
	if err := m.RegisterJob(mustJob(t, job.WithKind("hold"), job.WithExecutor(func() {
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

	var f families
	waitFor(t, "the lost lease and both rescues to be counted", func() bool {
		f = s.scrape()
		return f.value("jobkit_completed_total", "kind", "hold") == 1 &&
			f.value("jobkit_rescued_total", "cause", "lease", "kind", "stuck", "state", "scheduled") == 1 &&
			f.value("jobkit_rescued_total", "cause", "node", "kind", "stuck", "state", "scheduled") == 1 &&
			// A scrape reads the node registry before the counters: the
			// rescue can be counted in one whose registry read came just
			// before the ghost was declared dead.
			f.value("jobkit_nodes", "status", "dead") == 1
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
		if got := f.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func testCollector(t *testing.T, st store.Store) {
	col, err := metrics.New(metrics.WithScrapeTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry() // checks what Collect sends against Describe
	reg.MustRegister(col)
	s := serve(t, reg)
	m := runWork(t, st, col)
	checkWork(t, s.scrape(), 4)
	checkRescues(t, st, s, m)
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// TestCollectorMemdb runs work of every outcome on a real Manager on memdb
// and checks every metric a scrape returns against it.
func TestCollectorMemdb(t *testing.T) {
	t.Parallel()
	testCollector(t, memStore(t))
}

// TestCollectorRedis does the same on Redis ($JOBKIT_REDIS_ADDR, or a
// redis-server the test starts).
func TestCollectorRedis(t *testing.T) {
	t.Parallel()
	testCollector(t, redisStore(t))
}

// TestGoJobNaming: with GoJobNaming the seed's metrics carry go-job's
// names and kind label, the others go_job_ names, and none is jobkit_.
func TestGoJobNaming(t *testing.T) {
	t.Parallel()
	col, err := metrics.New(metrics.WithNaming(metrics.GoJobNaming), metrics.WithScrapeTTL(0))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry() // checks what Collect sends against Describe
	reg.MustRegister(col)
	s := serve(t, reg)
	runWork(t, memStore(t), col)
	f := s.scrape()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"go_job_registered", nil, 7},
		{"go_job_workers", nil, 4},
		{"go_job_queued", []string{"kind", "later"}, 1},
		{"go_job_executed_total", []string{"kind", "bad"}, 2},
		{"go_job_completed_total", []string{"kind", "ok"}, 3},
		{"go_job_terminated_total", []string{"kind", "bad"}, 1},
		{"go_job_canceled_total", []string{"kind", "block"}, 1},
		{"go_job_timedout_total", []string{"kind", "slow"}, 1},
		{"go_job_duration_seconds", []string{"kind", "flaky"}, 2},
		{"go_job_retries_total", []string{"queue", job.DefaultQueue, "kind", "flaky"}, 1},
		{"go_job_queue_depth", []string{"queue", job.DefaultQueue, "state", "completed"}, 4},
		{"go_job_nodes", []string{"status", "live"}, 1},
	} {
		if got := f.value(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name := range f {
		if !strings.HasPrefix(name, "go_job_") {
			t.Errorf("metric %s outside the go_job_ prefix", name)
		}
	}
	for _, name := range []string{"go_job_executed_total", "go_job_completed_total", "go_job_duration_seconds", "go_job_queued"} {
		for _, m := range f[name].GetMetric() {
			if len(m.Label) != 1 || m.Label[0].GetName() != "kind" {
				t.Errorf("%s has labels %v; go-job's has kind alone", name, m.Label)
			}
		}
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

// TestScrapeTTL: the store figures cost one Counts, one Lag and one
// ListNodes call per scrape (not per queue or kind), and none at all while
// the TTL holds, whatever the number of scrapes.
func TestScrapeTTL(t *testing.T) {
	t.Parallel()
	calls := func(f families, op string) float64 {
		return f.value("jobkit_store_call_duration_seconds", "op", op)
	}
	for _, c := range []struct {
		ttl     time.Duration
		perRead float64 // store reads of 3 scrapes after the first
	}{{0, 3}, {time.Hour, 0}} {
		col, err := metrics.New(metrics.WithScrapeTTL(c.ttl))
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewPedanticRegistry() // checks what Collect sends against Describe
		reg.MustRegister(col)
		s := serve(t, reg)
		// A heartbeat interval far beyond the test: ListNodes is the
		// scrape's alone.
		m := startManager(t, job.WithObserver(col), job.WithQueues("a", "b", "c"))
		for _, k := range []string{"x", "y", "z"} {
			if err := m.RegisterJob(mustJob(t, job.WithKind(k), job.WithExecutor(func() {}))); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"a", "b", "c"} {
				if _, err := m.ScheduleJob(context.Background(), k, job.WithQueue(q), job.WithScheduleAfter(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
		}
		first := s.scrape()
		if got := first.value("jobkit_queued", "kind", "y"); got != 3 {
			t.Fatalf("ttl %v: queued y = %v, want 3", c.ttl, got)
		}
		counts0, lag0 := calls(first, "counts"), calls(first, "lag")
		var last families
		for range 3 {
			last = s.scrape()
		}
		// A scrape reads the store before it collects the histograms, so
		// each shows its own calls.
		if got := calls(last, "counts") - counts0; got != c.perRead {
			t.Errorf("ttl %v: %v Counts calls for 3 more scrapes (9 queue×kind pairs), want %v", c.ttl, got, c.perRead)
		}
		if got := calls(last, "lag") - lag0; got != c.perRead {
			t.Errorf("ttl %v: %v Lag calls for 3 more scrapes, want %v", c.ttl, got, c.perRead)
		}
	}
}

// TestOneCollectorPerManager: a Collector observes one manager, once; two
// Collectors with distinct const labels share one registry.
func TestOneCollectorPerManager(t *testing.T) {
	t.Parallel()
	col, err := metrics.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.NewManager(job.WithObserver(col), job.WithLogger(quiet)); err != nil {
		t.Fatal(err)
	}
	twice, err := metrics.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.NewManager(job.WithObserver(twice), job.WithObserver(twice), job.WithLogger(quiet)); !errors.Is(err, metrics.ErrInvalidOption) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("one collector given twice: %v, want ErrInvalidOption saying so", err)
	}
	if _, err := job.NewManager(job.WithObserver(col), job.WithLogger(quiet)); !errors.Is(err, metrics.ErrInvalidOption) || !strings.Contains(err.Error(), "one Collector per Manager") {
		t.Errorf("second manager on one collector: %v, want ErrInvalidOption naming the fix", err)
	}

	reg := prometheus.NewPedanticRegistry() // checks what Collect sends against Describe
	s := serve(t, reg)
	for _, ns := range []string{"blue", "green"} {
		c, err := metrics.New(metrics.WithConstLabels(prometheus.Labels{"namespace": ns}))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(c); err != nil {
			t.Fatalf("register the %s collector: %v", ns, err)
		}
		m := startManager(t, job.WithObserver(c), job.WithWorkers(2+len(ns)))
		if err := m.RegisterJob(mustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ScheduleJob(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		if err := m.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f := s.scrape()
	if got := f.value("jobkit_workers", "namespace", "blue"); got != 6 {
		t.Errorf("blue workers %v, want 6", got)
	}
	if got := f.value("jobkit_workers", "namespace", "green"); got != 7 {
		t.Errorf("green workers %v, want 7", got)
	}
	if got := f.value("jobkit_completed_total", "namespace", "green", "kind", "k"); got != 1 {
		t.Errorf("green completed %v, want 1", got)
	}
}

// TestOptions: bad options are refused with ErrInvalidOption.
func TestOptions(t *testing.T) {
	t.Parallel()
	for name, opt := range map[string]metrics.Option{
		"naming":       metrics.WithNaming(9),
		"own label":    metrics.WithConstLabels(prometheus.Labels{"kind": "x"}),
		"no buckets":   metrics.WithDurationBuckets(),
		"unsorted":     metrics.WithWaitBuckets(1, 0.5),
		"zero bucket":  metrics.WithStoreBuckets(0, 1),
		"negative ttl": metrics.WithScrapeTTL(-time.Second),
		"zero timeout": metrics.WithScrapeTimeout(0),
		"nil option":   nil,
	} {
		if _, err := metrics.New(opt); !errors.Is(err, metrics.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}
