package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobkit/job"
	"github.com/jobkit/job/metrics"
	"github.com/jobkit/job/metrics/internal/collectortest"
)

// TestSeriesAtZeroFromTheStart: before anything happened, a scrape already
// has every documented counter of the registered kinds at 0 (on each
// kind's queue, for every reason, cause and state), so that an alert on
// increase(jobkit_lease_lost_total[10m]) > 0 sees the first lease lost;
// and the scrape error counter at 0 for each source.
func TestSeriesAtZeroFromTheStart(t *testing.T) {
	t.Parallel()
	s, _ := observedManager(t, collectortest.MustJob(t, job.WithKind("k"), job.WithQueue("q1"), job.WithExecutor(func() {})))
	f := s.Scrape()
	want := [][]string{
		{"jobkit_scrape_errors_total", "source", "counts"},
		{"jobkit_scrape_errors_total", "source", "lag"},
		{"jobkit_scrape_errors_total", "source", "nodes"},
		{"jobkit_executed_total", "kind", "k"},
		{"jobkit_completed_total", "kind", "k"},
		{"jobkit_terminated_total", "kind", "k"},
		{"jobkit_canceled_total", "kind", "k"},
		{"jobkit_timed_out_total", "kind", "k"},
		{"jobkit_scheduled_total", "queue", "q1", "kind", "k"},
		{"jobkit_retries_total", "queue", "q1", "kind", "k"},
	}
	for _, r := range []string{"renew", "fence", "node", "finish"} {
		want = append(want, []string{"jobkit_lease_lost_total", "queue", "q1", "kind", "k", "reason", r})
	}
	for _, c := range []string{"lease", "node"} {
		for _, st := range []string{"scheduled", "terminated", "canceled"} {
			want = append(want, []string{"jobkit_rescued_total", "queue", "q1", "kind", "k", "cause", c, "state", st})
		}
	}
	for _, w := range want {
		if got := f.Value(w[0], w[1:]...); got != 0 {
			t.Errorf("%s%v = %v before anything happened, want a series at 0", w[0], w[1:], got)
		}
	}
}

// TestAlertChannelsAtZero: a channel the alerting service knows has its
// delivery series at 0 before its first notification.
func TestAlertChannelsAtZero(t *testing.T) {
	a := metrics.NewAlerts()
	a.ChannelKnown("prod", "pager", "webhook")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a)
	s := collectortest.Serve(t, reg)
	f := s.Scrape()
	for _, name := range []string{"jobkit_alert_delivery_failures_total", "jobkit_alert_deliveries_total"} {
		if got := f.Value(name, "namespace", "prod", "channel", "pager", "type", "webhook"); got != 0 {
			t.Errorf("%s = %v for a known channel, want a series at 0", name, got)
		}
	}
}

// observedManager starts a manager on memdb with jobs registered, observed
// by a Collector on a registry of its own, and returns the registry's
// scraper and the manager (stopped at the end of the test).
func observedManager(t *testing.T, jobs ...*job.Job) (*collectortest.Scraper, *job.Manager) {
	t.Helper()
	col, err := metrics.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	s := collectortest.Serve(t, reg)
	m, err := job.NewManager(job.WithLogger(quiet), job.WithStore(memStore(t)), job.WithObserver(col))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := m.RegisterJob(j); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return s, m
}
