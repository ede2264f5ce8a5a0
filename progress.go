package job

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jobkit/job/store"
)

// ProgressInterval is the least time between two progress writes of one
// attempt: Instance.SetProgress keeps only the latest report in between,
// so a tight loop reporting progress costs the store at most one write
// per interval. The last report before the attempt ends is always written.
const ProgressInterval = 500 * time.Millisecond

// Progress is the progress an attempt reported through
// Instance.SetProgress.
type Progress struct {
	// Attempt is the attempt that reported it.
	Attempt int
	// Fraction done, in [0, 1].
	Fraction float64
	// Message is a short status line ("3 of 7 files"), at most
	// store.MaxProgressMessage bytes.
	Message string
	// Time is when it was reported, on the manager's clock.
	Time time.Time
}

// GetProgress returns the stored progress of the instances ids by ID;
// an instance that never reported any is absent. The progress of an
// attempt stays after it ends, until a later attempt reports its own or
// the instance is removed.
func (m *Manager) GetProgress(ctx context.Context, ids ...string) (map[string]Progress, error) {
	recs, err := m.store.LookupProgress(ctx, ids)
	out := make(map[string]Progress, len(recs))
	for _, r := range recs {
		out[r.InstanceID] = Progress{Attempt: r.Attempt, Fraction: r.Fraction, Message: r.Message, Time: r.Time}
	}
	if err != nil {
		return out, fmt.Errorf("job: lookup progress: %w", err)
	}
	return out, nil
}

// progressReporter throttles one attempt's progress reports: SetProgress
// never waits for the store; a goroutine writes the latest report at most
// once per interval, and flush writes what is left when the attempt ends.
type progressReporter struct {
	st       store.Progress
	clock    Clock
	interval time.Duration
	id       string
	owner    string
	attempt  int
	onErr    func(error)

	mu      sync.Mutex
	cond    sync.Cond // signalled when the writer goroutine exits
	cur     Progress  // the latest report
	has     bool      // cur holds a report
	dirty   bool      // cur is not written yet
	last    time.Time // when the last write started
	running bool      // the writer goroutine runs
	closed  bool      // the attempt ended: no more background writes
	stop    chan struct{}
}

func newProgressReporter(st store.Progress, clock Clock, interval time.Duration, rec *store.Instance, owner string, onErr func(error)) *progressReporter {
	p := &progressReporter{st: st, clock: clock, interval: interval, id: rec.ID, owner: owner, attempt: rec.Attempt,
		onErr: onErr, stop: make(chan struct{})}
	p.cond.L = &p.mu
	return p
}

// clampProgress brings a report within the store's bounds: a fraction
// into [0, 1] (NaN as 0), a message cut to MaxProgressMessage bytes on a
// rune boundary.
func clampProgress(fraction float64, message string) (float64, string) {
	switch {
	case math.IsNaN(fraction) || fraction < 0:
		fraction = 0
	case fraction > 1:
		fraction = 1
	}
	if len(message) > store.MaxProgressMessage {
		n := store.MaxProgressMessage
		for n > 0 && !utf8.RuneStart(message[n]) {
			n--
		}
		message = message[:n]
	}
	if !utf8.ValidString(message) {
		message = string([]rune(message)) // replaces invalid bytes with U+FFFD
		for len(message) > store.MaxProgressMessage {
			_, size := utf8.DecodeLastRuneInString(message)
			message = message[:len(message)-size]
		}
	}
	return fraction, message
}

func (p *progressReporter) set(fraction float64, message string) {
	fraction, message = clampProgress(fraction, message)
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.cur = Progress{Attempt: p.attempt, Fraction: fraction, Message: message, Time: now}
	p.has, p.dirty = true, true
	if !p.running {
		p.running = true
		go p.run()
	}
}

func (p *progressReporter) get() (Progress, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur, p.has
}

// run writes the latest report, waiting out the interval since the last
// write, until nothing is left or the attempt ends.
func (p *progressReporter) run() {
	p.mu.Lock()
	defer func() {
		p.running = false
		p.cond.Broadcast()
		p.mu.Unlock()
	}()
	for p.dirty && !p.closed {
		if wait := p.interval - p.clock.Now().Sub(p.last); !p.last.IsZero() && wait > 0 {
			p.mu.Unlock()
			t := p.clock.NewTimer(wait)
			select {
			case <-t.C():
			case <-p.stop:
				t.Stop()
			}
			p.mu.Lock()
			continue
		}
		cur := p.cur
		p.dirty = false
		p.last = p.clock.Now()
		p.mu.Unlock()
		p.write(cur)
		p.mu.Lock()
	}
}

func (p *progressReporter) write(cur Progress) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := p.st.SetProgress(ctx, &store.ProgressParams{ID: p.id, Owner: p.owner, Attempt: p.attempt,
		Fraction: cur.Fraction, Message: cur.Message, Now: cur.Time})
	if err != nil && p.onErr != nil {
		p.onErr(err)
	}
}

// flush ends background writes, waits for one under way, and writes the
// latest report when it is not written yet (write false: drops it, for an
// attempt whose lease is gone).
func (p *progressReporter) flush(write bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	for p.running {
		p.cond.Wait()
	}
	cur, dirty := p.cur, p.dirty
	p.dirty = false
	p.mu.Unlock()
	if write && dirty {
		p.write(cur)
	}
}

// newProgress returns the progress reporter of attempt rec.
func (m *Manager) newProgress(rec *store.Instance) *progressReporter {
	return newProgressReporter(m.store, m.clock, ProgressInterval, rec, m.node, func(err error) {
		m.log.Warn("write instance progress", "instance", rec.ID, "attempt", rec.Attempt, "err", err)
	})
}
