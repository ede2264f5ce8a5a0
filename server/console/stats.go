package console

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	job "github.com/jobkit/job"
)

// Stats keeps the figures of the console's Overview charts for the last
// hour, in one-minute buckets: attempts completed and failed, and the wait
// (ready to started) and run times of attempts, from which the page draws
// p50 and p99. It is a job.Observer: give it to the Manager of a namespace
// (job.WithObserver) and to the console (Config.Stats), so the process
// keeps its own charts with no Prometheus. In a cluster each process sees
// the attempts it ran.
//
// Each bucket keeps at most statsSamples samples per figure (reservoir
// sampling), so memory is bounded whatever the rate.
type Stats struct {
	job.NopObserver
	now func() time.Time

	mu      sync.Mutex
	buckets [statsMinutes]statsBucket
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
func NewStats() *Stats { return &Stats{now: time.Now} }

// bucket returns the bucket of now, emptied if it held an older minute.
// The caller holds mu.
func (s *Stats) bucket() *statsBucket {
	m := s.now().Unix() / 60
	b := &s.buckets[m%statsMinutes]
	if b.minute != m {
		*b = statsBucket{minute: m}
	}
	return b
}

// AttemptStarted records how long the instance waited, ready, before it
// started.
func (s *Stats) AttemptStarted(e job.AttemptStartedEvent) {
	s.mu.Lock()
	s.bucket().wait.add(e.Wait)
	s.mu.Unlock()
}

// AttemptFinished counts a completed or failed attempt and records its run
// time. Hand-backs (Stop) and cancels count as neither.
func (s *Stats) AttemptFinished(e job.AttemptFinishedEvent) {
	if e.HandedBack {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
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
