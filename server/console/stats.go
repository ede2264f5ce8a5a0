package console

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	job "github.com/jobkit/job"
)

// Stats keeps the figures of the console's Overview charts for the last
// hour, in one-minute buckets: attempts completed and failed, the wait
// (ready to started) and run times of attempts, from which the page draws
// p50 and p99, and the lag. It is a job.Observer: give it to the Manager
// of a namespace (job.WithObserver) and to the console (Config.Stats), so
// the process keeps its own charts with no Prometheus. As an observer
// alone it sees the attempts its process ran; with Follow it counts the
// attempts of the whole cluster from the store's change feed and samples
// the store's lag (see Follow).
//
// Each bucket keeps at most statsSamples samples per figure (reservoir
// sampling), so memory is bounded whatever the rate.
type Stats struct {
	job.NopObserver
	now func() time.Time

	mu      sync.Mutex
	buckets [statsMinutes]statsBucket
	// cluster: Follow counts the attempts and their run times, so the
	// observer's AttemptFinished is not counted again.
	cluster bool
	// open is closed once Follow's first feed is open.
	open chan struct{}
	// lagEvery is how often Follow samples the store's lag.
	lagEvery time.Duration
}

// following reports whether Follow counts the attempts (of every node).
func (s *Stats) following() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cluster
}

// opened returns the channel closed once Follow's first feed is open.
func (s *Stats) opened() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = make(chan struct{})
	}
	return s.open
}

// statsMinutes is how many one-minute buckets Stats keeps.
const statsMinutes = 60

// statsSamples bounds the samples per bucket and figure.
const statsSamples = 512

// statsBucket is one minute of figures.
type statsBucket struct {
	minute            int64 // Unix minute it holds; others are stale
	completed, failed int64
	wait, run         reservoir
	// lag is the largest lag sampled in the minute: the age of the oldest
	// ready instance of any queue (Manager.Lag).
	lag time.Duration
}

// reservoir is a bounded uniform sample of durations.
type reservoir struct {
	seen    int64
	samples []time.Duration
}

// add offers d to the sample.
func (r *reservoir) add(d time.Duration) {
	r.seen++
	if len(r.samples) < statsSamples {
		r.samples = append(r.samples, d)
		return
	}
	if i := rand.Int64N(r.seen); i < statsSamples {
		r.samples[i] = d
	}
}

// NewStats returns an empty Stats.
func NewStats() *Stats { return &Stats{now: time.Now, lagEvery: defaultLagEvery} }

// defaultLagEvery is how often Follow samples the lag: one Manager.Lag
// (a read of each queue's ready heads, bounded per queue) every 10 s.
const defaultLagEvery = 10 * time.Second

// bucket returns the bucket of now, emptied if it held an older minute.
// The caller holds mu.
func (s *Stats) bucket() *statsBucket { return s.bucketAt(s.now()) }

// bucketAt returns the bucket of the minute of t, emptied if it held an
// older minute, or nil when t is outside the hour kept (or ahead of now).
// The caller holds mu.
func (s *Stats) bucketAt(t time.Time) *statsBucket {
	m, now := t.Unix()/60, s.now().Unix()/60
	if m > now || m <= now-statsMinutes {
		return nil
	}
	b := &s.buckets[m%statsMinutes]
	if b.minute != m {
		if b.minute > m {
			return nil
		}
		*b = statsBucket{minute: m}
	}
	return b
}

// AttemptStarted records how long the instance waited, ready, before it
// started.
func (s *Stats) AttemptStarted(e job.AttemptStartedEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster {
		return // Follow counts it, with every other node's
	}
	s.bucket().wait.add(e.Wait)
}

// AttemptFinished counts a completed or failed attempt and records its run
// time. Hand-backs (Stop) and cancels count as neither.
func (s *Stats) AttemptFinished(e job.AttemptFinishedEvent) {
	if e.HandedBack {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster {
		return // Follow counts it, with every other node's
	}
	b := s.bucket()
	switch {
	case e.State == job.Completed:
		b.completed++
	case e.Retry || e.State == job.Terminated || e.State == job.TimedOut:
		b.failed++
	default:
		return
	}
	b.run.add(e.Duration)
}

// minuteFigures is one minute of the charts.
type minuteFigures struct {
	Start                            time.Time
	Completed, Failed                int64
	WaitP50, WaitP99, RunP50, RunP99 time.Duration
	// Lag is the largest lag sampled in the minute (0: none ready, or
	// not sampled).
	Lag time.Duration
}

// lastHour returns the figures of the last statsMinutes minutes, oldest
// first, the current (partial) minute last.
func (s *Stats) lastHour() []minuteFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().Unix() / 60
	out := make([]minuteFigures, 0, statsMinutes)
	for m := now - statsMinutes + 1; m <= now; m++ {
		f := minuteFigures{Start: time.Unix(m*60, 0).UTC()}
		if b := &s.buckets[m%statsMinutes]; b.minute == m {
			f.Completed, f.Failed = b.completed, b.failed
			f.WaitP50, f.WaitP99 = quantiles(b.wait.samples)
			f.RunP50, f.RunP99 = quantiles(b.run.samples)
			f.Lag = b.lag
		}
		out = append(out, f)
	}
	return out
}

// quantiles returns the p50 and p99 of samples (0 for none), nearest rank.
func quantiles(samples []time.Duration) (p50, p99 time.Duration) {
	if len(samples) == 0 {
		return 0, 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.99)
}

// inflightLimit bounds the attempts Follow remembers the start of (the
// running attempts of the cluster); beyond it, the oldest half is dropped
// and those attempts finish with no run time.
const inflightLimit = 100_000

// attemptKey names one attempt of an instance.
type attemptKey struct {
	id      string
	attempt int
}

// Follow counts into s the attempts of every node sharing m's store, read
// from the namespace's change feed from now on, until ctx ends: completed
// and failed attempts (a failure retried counts, as a hand-back at Stop
// does not) at the minute the store recorded them, their run times (from
// the attempt's Processing event to its outcome) and their wait times
// (from the Processing event's ReadyAt to the event). A Stats that
// follows counts nothing through its observer, so nothing counts twice.
// m need not be started nor run any kind.
//
// Follow returns ctx's error when ctx ends. A feed that ends with an
// error (the store lost its position: job.ErrCursorExpired) is followed
// again from now: the attempts in between are not counted.
func (s *Stats) Follow(ctx context.Context, m *job.Manager) error {
	s.mu.Lock()
	s.cluster = true
	s.mu.Unlock()
	inflight := map[attemptKey]time.Time{}
	open := s.opened()
	go s.sampleLags(ctx, m)
	for {
		feed, err := m.WatchEvents(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			select { // the store is away: try again in a second
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case <-open:
		default:
			close(open)
		}
		for e := range feed {
			if e.Err != nil {
				break
			}
			s.count(e, inflight)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// count takes one event of the feed into s.
func (s *Stats) count(e job.Event, inflight map[attemptKey]time.Time) {
	if e.State == job.Processing {
		if len(inflight) >= inflightLimit {
			dropOldest(inflight)
		}
		inflight[attemptKey{e.InstanceID, e.Attempt}] = e.Time
		if !e.ReadyAt.IsZero() {
			s.mu.Lock()
			if b := s.bucketAt(e.Time); b != nil {
				b.wait.add(max(e.Time.Sub(e.ReadyAt), 0))
			}
			s.mu.Unlock()
		}
		return
	}
	var completed bool
	switch {
	case e.State == job.Completed:
		completed = true
	case e.State == job.Terminated || e.State == job.TimedOut:
	case e.State == job.Scheduled && e.Error != "" && !strings.HasPrefix(e.Error, handedBack):
		// A retry after a failed attempt (or a rescue).
	case e.State == job.Scheduled || e.State == job.Canceled:
		delete(inflight, attemptKey{e.InstanceID, e.Attempt}) // handed back or canceled: neither
		return
	default:
		return
	}
	// The attempt that ended: its number, or the one before when the
	// outcome scheduled the next.
	started, ok := inflight[attemptKey{e.InstanceID, e.Attempt}]
	key := attemptKey{e.InstanceID, e.Attempt}
	if !ok {
		key.attempt--
		started, ok = inflight[key]
	}
	if !ok && e.State == job.Scheduled {
		return // a Scheduled event with an error that ends no attempt seen
	}
	delete(inflight, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bucketAt(e.Time)
	if b == nil {
		return
	}
	if completed {
		b.completed++
	} else {
		b.failed++
	}
	if ok && !e.Time.Before(started) {
		b.run.add(e.Time.Sub(started))
	}
}

// sampleLags samples the lag of m's store now and every lagEvery until
// ctx ends.
func (s *Stats) sampleLags(ctx context.Context, m *job.Manager) {
	every := s.lagEvery
	if every <= 0 {
		every = defaultLagEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sampleLag(ctx, m)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleLag reads the lag of every queue once and keeps the largest in
// the minute's bucket. A failed read (the store away) is no sample.
func (s *Stats) sampleLag(ctx context.Context, m *job.Manager) {
	r, err := m.Admin().GetLag(ctx, "", "")
	if err != nil {
		return
	}
	var worst time.Duration
	for _, q := range r.Queues {
		worst = max(worst, q.Age)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bucket(); b != nil {
		b.lag = max(b.lag, worst)
	}
}

// handedBack starts the error of an attempt a stopping manager handed back.
const handedBack = "handed back"

// dropOldest removes the older half of the remembered attempt starts.
func dropOldest(inflight map[attemptKey]time.Time) {
	times := make([]time.Time, 0, len(inflight))
	for _, t := range inflight {
		times = append(times, t)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	cut := times[len(times)/2]
	for k, t := range inflight {
		if t.Before(cut) {
			delete(inflight, k)
		}
	}
}
