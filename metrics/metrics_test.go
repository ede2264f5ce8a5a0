package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
	"github.com/jobkit/job/metrics/internal/collectortest"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

func TestMain(m *testing.M) {
	code := m.Run()
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

// TestCollectorMemdb runs work of every outcome on a real Manager on memdb
// and checks every metric a scrape returns against it.
func TestCollectorMemdb(t *testing.T) {
	t.Parallel()
	collectortest.Run(t, memStore(t))
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
	s := collectortest.Serve(t, reg)
	collectortest.RunWork(t, memStore(t), col)
	f := s.Scrape()
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
		if got := f.Value(c.name, c.labels...); got != c.want {
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
	calls := func(f collectortest.Families, op string) float64 {
		return f.Value("jobkit_store_call_duration_seconds", "op", op)
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
		s := collectortest.Serve(t, reg)
		// A heartbeat interval far beyond the test: ListNodes is the
		// scrape's alone.
		m := collectortest.StartManager(t, job.WithObserver(col), job.WithQueues("a", "b", "c"))
		for _, k := range []string{"x", "y", "z"} {
			if err := m.RegisterJob(collectortest.MustJob(t, job.WithKind(k), job.WithExecutor(func() {}))); err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"a", "b", "c"} {
				if _, err := m.ScheduleJob(context.Background(), k, job.WithQueue(q), job.WithScheduleAfter(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
		}
		first := s.Scrape()
		if got := first.Value("jobkit_queued", "kind", "y"); got != 3 {
			t.Fatalf("ttl %v: queued y = %v, want 3", c.ttl, got)
		}
		counts0, lag0 := calls(first, "counts"), calls(first, "lag")
		var last collectortest.Families
		for range 3 {
			last = s.Scrape()
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
	s := collectortest.Serve(t, reg)
	for _, ns := range []string{"blue", "green"} {
		c, err := metrics.New(metrics.WithConstLabels(prometheus.Labels{"namespace": ns}))
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(c); err != nil {
			t.Fatalf("register the %s collector: %v", ns, err)
		}
		m := collectortest.StartManager(t, job.WithObserver(c), job.WithWorkers(2+len(ns)))
		if err := m.RegisterJob(collectortest.MustJob(t, job.WithKind("k"), job.WithExecutor(func() {}))); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ScheduleJob(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		if err := m.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	f := s.Scrape()
	if got := f.Value("jobkit_workers", "namespace", "blue"); got != 6 {
		t.Errorf("blue workers %v, want 6", got)
	}
	if got := f.Value("jobkit_workers", "namespace", "green"); got != 7 {
		t.Errorf("green workers %v, want 7", got)
	}
	if got := f.Value("jobkit_completed_total", "namespace", "green", "kind", "k"); got != 1 {
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
