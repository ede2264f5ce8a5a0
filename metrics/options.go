package metrics

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrInvalidOption is wrapped by New's errors for an option it cannot use.
var ErrInvalidOption = errors.New("metrics: invalid option")

// Defaults of a Collector.
const (
	// DefaultScrapeTTL is how long the figures read from the manager and
	// its store at a scrape (queue depth, lag, nodes) are reused by the
	// scrapes that follow (WithScrapeTTL).
	DefaultScrapeTTL = 5 * time.Second
	// DefaultScrapeTimeout bounds the store calls of one scrape
	// (WithScrapeTimeout).
	DefaultScrapeTimeout = 5 * time.Second
)

// DurationBuckets are the default buckets, in seconds, of the execution
// and wait histograms: 5 ms to 24 hours, for jobs that take milliseconds
// and queues that fall hours behind.
var DurationBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
	60, 120, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600,
}

// StoreBuckets are the default buckets, in seconds, of the store-call
// histogram: 100 µs to 30 s (the engine gives up a claim or a finish after
// 30 s).
var StoreBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

// Option configures a Collector.
type Option func(*config) error

type config struct {
	naming        Naming
	constLabels   prometheus.Labels
	durBuckets    []float64
	waitBuckets   []float64
	storeBuckets  []float64
	scrapeTTL     time.Duration
	scrapeTimeout time.Duration
}

// WithNaming chooses the metrics' names: JobkitNaming (the default) or
// GoJobNaming, for dashboards built on go-job's metrics.
func WithNaming(n Naming) Option {
	return func(c *config) error {
		if n != JobkitNaming && n != GoJobNaming {
			return fmt.Errorf("%w: naming %d; use metrics.JobkitNaming or metrics.GoJobNaming", ErrInvalidOption, n)
		}
		c.naming = n
		return nil
	}
}

// WithConstLabels adds labels with fixed values to every metric, such as
// the namespace a manager serves: several Collectors, one per Manager, can
// then share one registry.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) error {
		for k := range l {
			if k == "kind" || k == "queue" || k == "state" || k == "op" || k == "reason" || k == "status" || k == "source" || k == "cause" || k == "le" {
				return fmt.Errorf("%w: const label %q is one of the collector's own labels; choose another name", ErrInvalidOption, k)
			}
		}
		c.constLabels = prometheus.Labels{}
		for k, v := range l {
			c.constLabels[k] = v
		}
		return nil
	}
}

// WithDurationBuckets sets the buckets, in seconds, of the execution
// duration histogram. Defaults to DurationBuckets.
func WithDurationBuckets(b ...float64) Option {
	return func(c *config) (err error) { c.durBuckets, err = buckets("duration", b); return err }
}

// WithWaitBuckets sets the buckets, in seconds, of the wait-time histogram
// (ready to started). Defaults to DurationBuckets.
func WithWaitBuckets(b ...float64) Option {
	return func(c *config) (err error) { c.waitBuckets, err = buckets("wait", b); return err }
}

// WithStoreBuckets sets the buckets, in seconds, of the store-call
// latency histogram. Defaults to StoreBuckets.
func WithStoreBuckets(b ...float64) Option {
	return func(c *config) (err error) { c.storeBuckets, err = buckets("store", b); return err }
}

func buckets(what string, b []float64) ([]float64, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: no %s buckets", ErrInvalidOption, what)
	}
	for i, v := range b {
		if !(v > 0) || (i > 0 && v <= b[i-1]) {
			return nil, fmt.Errorf("%w: %s buckets %v; want positive upper bounds in increasing order", ErrInvalidOption, what, b)
		}
	}
	return slices.Clone(b), nil
}

// WithScrapeTTL sets how long the figures a scrape reads from the manager
// and its store (queue depth, queued, lag, nodes: one Counts, one Lag and
// one ListNodes call) are reused by later scrapes, so many scrapers cost
// the store no more than one. 0 reads them at every scrape. Defaults to
// DefaultScrapeTTL.
func WithScrapeTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: negative scrape TTL %v", ErrInvalidOption, d)
		}
		c.scrapeTTL = d
		return nil
	}
}

// WithScrapeTimeout bounds the store calls one scrape makes. A call that
// fails or times out leaves its metrics out of that scrape and counts one
// scrape error. Defaults to DefaultScrapeTimeout.
func WithScrapeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: scrape timeout %v; want > 0", ErrInvalidOption, d)
		}
		c.scrapeTimeout = d
		return nil
	}
}
