package metrics

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	job "github.com/jobkit/job"
)

// limitMetrics are the metrics of the cluster's concurrency limits
// (issue 36), each labelled by the limit's kind and queue ("" for every
// kind or queue): its max, running and waiting read at scrape time, and
// the wait of the instances it matches observed as they start here.
type limitMetrics struct {
	maxDesc, runningDesc, waitingDesc *prometheus.Desc
	wait                              *prometheus.HistogramVec // kind, queue

	// known are the limits the manager last read, with their wait
	// observers; read again once older than a second.
	known atomic.Pointer[knownLimits]

	mu   sync.Mutex // one scrape reads the limits at a time
	read time.Time  // when uses was read; guarded by mu
	uses []job.LimitUse
	ok   bool
}

// knownLimits are the limits as the manager last read them.
type knownLimits struct {
	at  time.Time
	ls  []job.ConcurrencyLimit
	obs []prometheus.Observer
}

// newLimitMetrics makes the limit metrics, named after naming.
func newLimitMetrics(naming Naming, cl prometheus.Labels, buckets []float64) limitMetrics {
	prefix := "jobkit_"
	if naming == GoJobNaming {
		prefix = "go_job_"
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, help, []string{"kind", "queue"}, cl)
	}
	return limitMetrics{
		maxDesc:     desc("concurrency_limit_max", "Each cluster concurrency limit's max: how many of the instances it matches may run at once, by its kind and queue (empty: every one)."),
		runningDesc: desc("concurrency_limit_running", "Instances each cluster concurrency limit matches that are running (Processing) in the store, by the limit's kind and queue."),
		waitingDesc: desc("concurrency_limit_waiting", "Instances each cluster concurrency limit matches that wait (Scheduled, due or not) in the store, by the limit's kind and queue."),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: prefix + "concurrency_limit_wait_seconds",
			Help:    "How long the instances each cluster concurrency limit matches were ready before an attempt started on this manager (waiting for the limit, and for a worker), in seconds, by the limit's kind and queue.",
			Buckets: buckets, ConstLabels: cl}, []string{"kind", "queue"}),
	}
}

// limitStarted observes the wait of a started attempt for every limit
// that matches it.
func (c *Collector) limitStarted(ev *job.AttemptStartedEvent) {
	m := c.mgr.Load()
	if m == nil {
		return
	}
	k := c.lim.known.Load()
	if now := time.Now(); k == nil || now.Sub(k.at) > time.Second || now.Before(k.at) {
		k = c.knowLimits(m, k, now)
	}
	for i, l := range k.ls {
		if (l.Kind == "" || l.Kind == ev.Kind) && (l.Queue == "" || l.Queue == ev.Queue) {
			k.obs[i].Observe(ev.Wait.Seconds())
		}
	}
}

// knowLimits reads the manager's limits (its copy, not the store) and
// keeps them with their observers, reusing old's when they did not
// change.
func (c *Collector) knowLimits(m *job.Manager, old *knownLimits, now time.Time) *knownLimits {
	ls := m.ConcurrencyLimits()
	k := &knownLimits{at: now, ls: ls}
	if old != nil && slices.Equal(old.ls, ls) {
		k.obs = old.obs
	} else {
		k.obs = make([]prometheus.Observer, len(ls))
		for i, l := range ls {
			k.obs[i] = c.lim.wait.WithLabelValues(l.Kind, l.Queue)
		}
	}
	c.lim.known.Store(k)
	return k
}

// collectLimits sends each limit's max, running and waiting, read from
// the store at most once per scrape TTL.
func (c *Collector) collectLimits(ch chan<- prometheus.Metric, m *job.Manager) {
	l := &c.lim
	l.mu.Lock()
	now := time.Now()
	if l.read.IsZero() || c.cfg.scrapeTTL <= 0 || now.Sub(l.read) >= c.cfg.scrapeTTL {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.scrapeTimeout)
		uses, err := m.Admin().ListConcurrencyLimits(ctx)
		cancel()
		l.read, l.ok = now, err == nil
		if err != nil {
			c.scrapeErrs.WithLabelValues("limits").Inc()
		} else {
			l.uses = uses
		}
	}
	uses, ok := l.uses, l.ok
	l.mu.Unlock()
	if !ok {
		return
	}
	for _, u := range uses {
		ch <- prometheus.MustNewConstMetric(l.maxDesc, prometheus.GaugeValue, float64(u.Max), u.Kind, u.Queue)
		ch <- prometheus.MustNewConstMetric(l.runningDesc, prometheus.GaugeValue, float64(u.Running), u.Kind, u.Queue)
		ch <- prometheus.MustNewConstMetric(l.waitingDesc, prometheus.GaugeValue, float64(u.Waiting), u.Kind, u.Queue)
	}
}
