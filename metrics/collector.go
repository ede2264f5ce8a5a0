package metrics

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// Collector is a job.Observer that counts a Manager's events and a
// prometheus.Collector that exports them, with figures read from the
// manager at scrape time (workers, registered jobs, queue depth, lag,
// nodes). Make one per Manager, give it to the manager with
// job.WithObserver, and register it on your own registry:
//
//	col, err := metrics.New()
//	mgr, err := job.NewManager(job.WithObserver(col), ...)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Nothing is registered anywhere else: there is no init() and no use of
// the default registry. Its methods are safe for concurrent use; the
// observer methods take no lock and allocate nothing once a kind and
// queue have been seen.
type Collector struct {
	cfg config
	n   names
	mgr atomic.Pointer[job.Manager]
	wf  workflowMetrics // workflows.go
	lim limitMetrics    // limits.go

	// Counted from events.
	executed, completed, terminated, canceled, timedOut *prometheus.CounterVec // kind
	duration                                            *prometheus.HistogramVec
	scheduled, retries                                  *prometheus.CounterVec // queue, kind
	wait                                                *prometheus.HistogramVec
	leaseLost                                           *prometheus.CounterVec // queue, kind, reason
	rescued                                             *prometheus.CounterVec // queue, kind, cause, state
	storeDur                                            *prometheus.HistogramVec
	storeErrs                                           *prometheus.CounterVec // op
	scrapeErrs                                          *prometheus.CounterVec // source

	// Read at scrape time.
	registeredDesc, workersDesc, busyDesc, queuedDesc, noNodeDesc *prometheus.Desc
	depthDesc, queueLagDesc, kindLagDesc, nodesDesc               *prometheus.Desc

	byKind   cowMap[string, kindMetrics]
	byQueue  cowMap[kq, queueMetrics]
	seeded   cowMap[string, struct{}] // kinds whose series exist at 0 (seedKinds)
	storeOps [256]atomic.Pointer[opMetrics]

	scrapeMu sync.Mutex // one scrape reads the store at a time
	snap     *snapshot  // guarded by scrapeMu
}

// kq is a (kind, queue) pair.
type kq struct{ kind, queue string }

// kindMetrics are the metrics of one kind, resolved once.
type kindMetrics struct {
	executed, completed, terminated, canceled, timedOut prometheus.Counter
	duration                                            prometheus.Observer
}

// queueMetrics are the metrics of one (kind, queue), and of its kind,
// resolved once: an event of a kind and queue costs one map lookup.
type queueMetrics struct {
	kind               *kindMetrics
	scheduled, retries prometheus.Counter
	wait               prometheus.Observer
}

// opMetrics are the metrics of one store operation, resolved once.
type opMetrics struct {
	dur  prometheus.Observer
	errs prometheus.Counter
}

// New returns a Collector configured by opts.
func New(opts ...Option) (*Collector, error) {
	cfg := config{scrapeTTL: -1}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.scrapeTTL < 0 {
		cfg.scrapeTTL = DefaultScrapeTTL
	}
	if cfg.scrapeTimeout == 0 {
		cfg.scrapeTimeout = DefaultScrapeTimeout
	}
	if cfg.durBuckets == nil {
		cfg.durBuckets = DurationBuckets
	}
	if cfg.waitBuckets == nil {
		cfg.waitBuckets = DurationBuckets
	}
	if cfg.storeBuckets == nil {
		cfg.storeBuckets = StoreBuckets
	}
	n := namesFor(cfg.naming)
	cl := cfg.constLabels
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: cl}, labels)
	}
	histogram := func(name, help string, b []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b, ConstLabels: cl}, labels)
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	c := &Collector{
		cfg: cfg,
		n:   n,

		executed:   counter(n.executed, "Attempts this manager started, by kind.", "kind"),
		completed:  counter(n.completed, "Instances completed by this manager's attempts, by kind.", "kind"),
		terminated: counter(n.terminated, "Instances that failed for good on this manager (out of retries, a permanent error, or rescued with no retries left), by kind.", "kind"),
		canceled:   counter(n.canceled, "Instances canceled through this manager, pending or running, by kind.", "kind"),
		timedOut:   counter(n.timedOut, "Instances whose last attempt timed out on this manager, by kind.", "kind"),
		duration: histogram(n.duration, "How long attempts ran on this manager, in seconds, by kind (hand-backs at stop left out).",
			cfg.durBuckets, "kind"),
		scheduled: counter(n.scheduled, "Instances the store took from this manager (schedule calls and trigger ticks), by queue and kind.", "queue", "kind"),
		retries:   counter(n.retries, "Attempts that failed or timed out on this manager and were scheduled again, by queue and kind.", "queue", "kind"),
		wait: histogram(n.wait, "How long instances were ready before an attempt started on this manager, in seconds, by queue and kind.",
			cfg.waitBuckets, "queue", "kind"),
		leaseLost: counter(n.leaseLost, "Attempts this manager gave up because their lease was lost (renew, fence, node) or whose outcome the store refused (finish), by queue, kind and reason.",
			"queue", "kind", "reason"),
		rescued: counter(n.rescued, "Attempts of crashed or cut-off managers that this manager rescued, by queue, kind, cause (lease, node) and the state they went to.",
			"queue", "kind", "cause", "state"),
		storeDur: histogram(n.storeDuration, "Latency of this manager's store calls, in seconds, by operation.",
			cfg.storeBuckets, "op"),
		storeErrs:  counter(n.storeErrors, "Store calls of this manager that returned an error, by operation.", "op"),
		scrapeErrs: counter(n.scrapeErrors, "Scrapes that could not read a figure from the store, by source (counts, lag, nodes, limits).", "source"),

		registeredDesc: desc(n.registered, "Job kinds registered with this manager."),
		workersDesc:    desc(n.workers, "Worker slots of this manager."),
		busyDesc:       desc(n.workersBusy, "Worker slots of this manager running an attempt."),
		queuedDesc:     desc(n.queued, "Instances Scheduled in the store (due or not), by kind.", "kind"),
		noNodeDesc:     desc(n.queuedNoNode, "Instances Scheduled in the store of a kind that no live node runs, by kind (0 for kinds a live node runs).", "kind"),
		depthDesc:      desc(n.queueDepth, "Instances in the store by queue and state (finished ones until retention removes them).", "queue", "state"),
		queueLagDesc:   desc(n.queueLag, "Age in seconds of the oldest ready instance of each queue (0 when none is ready).", "queue"),
		kindLagDesc:    desc(n.kindLag, "Age in seconds of the oldest ready instance of each kind (0 when none is ready).", "kind"),
		nodesDesc:      desc(n.nodes, "Managers in the store's node registry by status (live, stale, dead, left).", "status"),
	}
	c.wf = newWorkflowMetrics(cfg.naming, cl)
	c.lim = newLimitMetrics(cfg.naming, cl, cfg.waitBuckets)
	for _, source := range []string{"counts", "lag", "nodes", "limits"} {
		c.scrapeErrs.WithLabelValues(source) // at 0 until the first error
	}
	return c, nil
}

// ObserveManager makes m the manager whose figures a scrape reads; NewManager
// calls it (see job.ManagerObserver). A Collector observes one manager,
// once: a second manager, or the same one given it twice (which would count
// every event twice), is an error.
func (c *Collector) ObserveManager(m *job.Manager) error {
	if m == nil {
		return fmt.Errorf("%w: nil manager", ErrInvalidOption)
	}
	if !c.mgr.CompareAndSwap(nil, m) {
		if c.mgr.Load() == m {
			return fmt.Errorf("%w: this Collector was given to the manager twice (job.WithObserver); give it once", ErrInvalidOption)
		}
		return fmt.Errorf("%w: this Collector already observes manager %s; make one Collector per Manager (WithConstLabels tells them apart on one registry)",
			ErrInvalidOption, c.mgr.Load().NodeID())
	}
	return nil
}

// Scheduled counts an instance the store took.
func (c *Collector) Scheduled(ev job.ScheduledEvent) {
	c.queue(ev.Kind, ev.Queue).scheduled.Inc()
}

// AttemptStarted counts an attempt and observes how long it waited.
func (c *Collector) AttemptStarted(ev job.AttemptStartedEvent) {
	q := c.queue(ev.Kind, ev.Queue)
	q.kind.executed.Inc()
	q.wait.Observe(ev.Wait.Seconds())
	c.limitStarted(&ev)
}

// AttemptFinished counts an attempt's outcome and observes its duration.
func (c *Collector) AttemptFinished(ev job.AttemptFinishedEvent) {
	if ev.HandedBack {
		return
	}
	q := c.queue(ev.Kind, ev.Queue)
	k := q.kind
	k.duration.Observe(ev.Duration.Seconds())
	switch {
	case ev.Retry:
		q.retries.Inc()
	case ev.State == job.Completed:
		k.completed.Inc()
	case ev.State == job.Terminated:
		k.terminated.Inc()
	case ev.State == job.TimedOut:
		k.timedOut.Inc()
	case ev.State == job.Canceled:
		k.canceled.Inc()
	}
}

// LeaseLost counts an attempt given up for its lease.
func (c *Collector) LeaseLost(ev job.LeaseLostEvent) {
	c.leaseLost.WithLabelValues(ev.Queue, ev.Kind, ev.Reason.String()).Inc()
}

// Rescued counts a rescue, and the final state it led to.
func (c *Collector) Rescued(ev job.RescuedEvent) {
	cause := "lease"
	if ev.DeadNode {
		cause = "node"
	}
	c.rescued.WithLabelValues(ev.Queue, ev.Kind, cause, ev.State.String()).Inc()
	switch ev.State {
	case job.Terminated:
		c.kind(ev.Kind).terminated.Inc()
	case job.Canceled:
		c.kind(ev.Kind).canceled.Inc()
	}
}

// Canceled counts an instance canceled before it ran.
func (c *Collector) Canceled(ev job.CanceledEvent) {
	c.kind(ev.Kind).canceled.Inc()
}

// StoreCall observes a store call's latency and counts its error.
func (c *Collector) StoreCall(ev job.StoreCallEvent) {
	p := &c.storeOps[ev.Op]
	om := p.Load()
	if om == nil {
		op := ev.Op.String()
		om = &opMetrics{dur: c.storeDur.WithLabelValues(op), errs: c.storeErrs.WithLabelValues(op)}
		if !p.CompareAndSwap(nil, om) {
			om = p.Load()
		}
	}
	om.dur.Observe(ev.Duration.Seconds())
	if ev.Err != nil {
		om.errs.Inc()
	}
}

// seedKinds makes the series of each kind registered with m, on the
// kind's own queue, exist at 0 before their first event: the counters of
// its outcomes, and every reason of a lost lease and every cause and state
// of a rescue, so that increase() over them sees the first one. (An
// instance scheduled on another queue gets its series when it first
// counts.)
func (c *Collector) seedKinds(m *job.Manager) {
	for _, kind := range m.RegisteredKinds() {
		if c.seeded.get(kind) != nil {
			continue
		}
		j, err := m.GetJob(kind)
		if err != nil {
			continue
		}
		c.seeded.add(kind, func() *struct{} {
			queue := j.Definition().Queue
			if queue == "" {
				queue = job.DefaultQueue
			}
			c.queue(kind, queue)
			for _, r := range []job.LeaseLostReason{job.LeaseLostRenew, job.LeaseLostFence, job.LeaseLostNode, job.LeaseLostFinish} {
				c.leaseLost.WithLabelValues(queue, kind, r.String())
			}
			for _, cause := range []string{"lease", "node"} {
				for _, st := range []job.State{job.Scheduled, job.Terminated, job.Canceled} {
					c.rescued.WithLabelValues(queue, kind, cause, st.String())
				}
			}
			return new(struct{})
		})
	}
}

func (c *Collector) kind(kind string) *kindMetrics {
	if k := c.byKind.get(kind); k != nil {
		return k
	}
	return c.byKind.add(kind, func() *kindMetrics {
		return &kindMetrics{
			executed: c.executed.WithLabelValues(kind), completed: c.completed.WithLabelValues(kind),
			terminated: c.terminated.WithLabelValues(kind), canceled: c.canceled.WithLabelValues(kind),
			timedOut: c.timedOut.WithLabelValues(kind), duration: c.duration.WithLabelValues(kind),
		}
	})
}

func (c *Collector) queue(kind, queue string) *queueMetrics {
	key := kq{kind, queue}
	if q := c.byQueue.get(key); q != nil {
		return q
	}
	return c.byQueue.add(key, func() *queueMetrics {
		return &queueMetrics{
			kind:      c.kind(kind),
			scheduled: c.scheduled.WithLabelValues(queue, kind), retries: c.retries.WithLabelValues(queue, kind),
			wait: c.wait.WithLabelValues(queue, kind),
		}
	})
}

// cowMap is a map read without locks: a writer copies it. Its keys (kinds,
// queues) are few and added once, so reads are what must be cheap.
type cowMap[K comparable, V any] struct {
	m  atomic.Pointer[map[K]*V]
	mu sync.Mutex
}

func (c *cowMap[K, V]) get(k K) *V {
	if m := c.m.Load(); m != nil {
		return (*m)[k]
	}
	return nil
}

func (c *cowMap[K, V]) add(k K, mk func() *V) *V {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v := (*old)[k]; v != nil {
			return v
		}
	}
	n := make(map[K]*V, 1)
	if old != nil {
		n = make(map[K]*V, len(*old)+1)
		for kk, vv := range *old {
			n[kk] = vv
		}
	}
	v := mk()
	n[k] = v
	c.m.Store(&n)
	return v
}

// Describe sends the descriptors of every metric.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs() {
		v.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{c.registeredDesc, c.workersDesc, c.busyDesc, c.queuedDesc, c.noNodeDesc, c.depthDesc, c.queueLagDesc, c.kindLagDesc, c.nodesDesc, c.lim.maxDesc, c.lim.runningDesc, c.lim.waitingDesc} {
		ch <- d
	}
}

func (c *Collector) vecs() []prometheus.Collector {
	return []prometheus.Collector{
		c.executed, c.completed, c.terminated, c.canceled, c.timedOut, c.duration,
		c.scheduled, c.retries, c.wait, c.leaseLost, c.rescued, c.storeDur, c.storeErrs, c.scrapeErrs,
		c.wf.started, c.wf.finished, c.wf.duration, c.lim.wait,
	}
}

// Collect sends every metric: the counters and histograms as counted, and
// the figures read from the manager (see WithScrapeTTL). Before a manager
// was built with the Collector, only the counted ones.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if m := c.mgr.Load(); m != nil {
		c.collectManager(ch, m)
	}
	for _, v := range c.vecs() {
		v.Collect(ch)
	}
}

// byState counts instances by state, as store.GroupCount does.
type byState = [store.TimedOut + 1]int64

// snapshot is what one scrape read from the manager and its store.
type snapshot struct {
	at                time.Time
	countsOK, lagOK   bool
	nodesOK           bool
	queued            map[string]int64    // kind → Scheduled
	depth             map[string]*byState // queue → by state
	queueLag, kindLag []store.Lag
	nodes             [store.NodeLeft + 1]int
	liveKinds         map[string]bool // kinds some live node runs
}

func (c *Collector) collectManager(ch chan<- prometheus.Metric, m *job.Manager) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c.seedKinds(m)
	size, busy := m.Workers()
	gauge(c.registeredDesc, float64(len(m.RegisteredKinds())))
	gauge(c.workersDesc, float64(size))
	gauge(c.busyDesc, float64(busy))

	c.collectLimits(ch, m)
	s := c.read(m)
	if s.countsOK {
		for kind, n := range s.queued {
			gauge(c.queuedDesc, float64(n), kind)
		}
		for queue, by := range s.depth {
			for st := job.Created; st <= job.TimedOut; st++ {
				gauge(c.depthDesc, float64(by[st]), queue, st.String())
			}
		}
	}
	if s.lagOK {
		for _, l := range s.queueLag {
			gauge(c.queueLagDesc, l.Age.Seconds(), l.Name)
		}
		for _, l := range s.kindLag {
			gauge(c.kindLagDesc, l.Age.Seconds(), l.Name)
		}
	}
	if s.countsOK && s.nodesOK {
		for kind, n := range s.queued {
			if s.liveKinds[kind] {
				n = 0
			}
			gauge(c.noNodeDesc, float64(n), kind)
		}
	}
	if s.nodesOK {
		for st := store.NodeLive; st <= store.NodeLeft; st++ {
			gauge(c.nodesDesc, float64(s.nodes[st]), st.String())
		}
	}
}

// read returns the figures of the store, read at most once per scrape TTL
// however many scrapes come: one Counts, one Lag and one ListNodes call.
func (c *Collector) read(m *job.Manager) *snapshot {
	c.scrapeMu.Lock()
	defer c.scrapeMu.Unlock()
	now := time.Now()
	if c.snap != nil && c.cfg.scrapeTTL > 0 && now.Sub(c.snap.at) < c.cfg.scrapeTTL {
		return c.snap
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.scrapeTimeout)
	defer cancel()
	s := &snapshot{at: now}
	if rows, err := m.Admin().CountInstances(ctx, "", ""); err != nil {
		c.scrapeErrs.WithLabelValues("counts").Inc()
	} else {
		s.countsOK = true
		s.queued = map[string]int64{}
		s.depth = map[string]*byState{}
		for i := range rows {
			r := &rows[i]
			s.queued[r.Kind] += r.States[job.Scheduled]
			by := s.depth[r.Queue]
			if by == nil {
				by = new(byState)
				s.depth[r.Queue] = by
			}
			for st := range r.States {
				by[st] += r.States[st]
			}
		}
	}
	if lag, err := m.Admin().GetLag(ctx, "", ""); err != nil {
		c.scrapeErrs.WithLabelValues("lag").Inc()
	} else {
		s.lagOK = true
		s.queueLag, s.kindLag = lag.Queues, lag.Kinds
	}
	if nodes, err := m.Admin().ListNodes(ctx); err != nil {
		c.scrapeErrs.WithLabelValues("nodes").Inc()
	} else {
		s.nodesOK = true
		s.liveKinds = map[string]bool{}
		for _, n := range nodes {
			if n.Status >= store.NodeLive && n.Status <= store.NodeLeft {
				s.nodes[n.Status]++
			}
			if n.Status == store.NodeLive {
				for _, k := range n.Kinds {
					s.liveKinds[k] = true
				}
			}
		}
	}
	c.snap = s
	return s
}
