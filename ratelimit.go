package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// RateLimit bounds how often instances start across the cluster: at most
// Rate starts of the instances it matches per Period, plus Burst, in any
// window of Period, counted by the store on its own clock and shared by
// every manager of the store (and namespace). It matches as
// ConcurrencyLimit does: the instances of Kind (every kind when empty)
// in Queue (every queue when empty).
//
// The store enforces it inside its atomic claim with the generic cell
// rate algorithm (one time per limit; see store.RateLimit): an instance
// over the limit stays Scheduled in its place, its attempt not spent, and
// the claim says when the limit next lets one start, so idle workers
// sleep until then. Burst is how many more than Rate may start at once
// after a quiet spell; 0 spaces the starts Period/Rate apart. See
// doc/limits.md.
type RateLimit struct {
	Kind   string        `json:"kind,omitempty"`
	Queue  string        `json:"queue,omitempty"`
	Rate   int           `json:"rate"`
	Period time.Duration `json:"period"`
	Burst  int           `json:"burst,omitempty"`
}

// String names the limit: "kind email (at most 100 starts per 1s, burst
// 10)".
func (l RateLimit) String() string { return l.store().String() }

func (l RateLimit) store() store.RateLimit {
	return store.RateLimit{Kind: l.Kind, Queue: l.Queue, Rate: l.Rate, Period: l.Period, Burst: l.Burst}
}

// RateLimitUse is a stored rate limit with the work it matches now, as
// Admin.ListRateLimits reads it.
type RateLimitUse struct {
	RateLimit
	// Running is how many instances the limit matches are Processing.
	Running int64
	// Waiting is how many it matches are Scheduled (due or not).
	Waiting int64
}

// ErrRateLimitsUnsupported: the store does not enforce rate limits (it is
// not a store.RateLimitEnforcer); memdbstore, pgstore, redisstore and
// valkeystore on a namespace of one partition, and jobd's remote store
// over one of them, do.
var ErrRateLimitsUnsupported = errors.New("job: the store does not enforce rate limits; use memdbstore, pgstore, or redisstore or valkeystore on a namespace of one partition (or jobd over one of them)")

// RateLimitsCollection is the collection of store.Documents that holds
// the rate limits, one document per (kind, queue).
const RateLimitsCollection = "rate-limits"

// SetRateLimit stores l, replacing the rate limit of the same kind and
// queue; every manager of the cluster applies it within
// DefaultLimitsRefresh (this one at once). A changed limit keeps the
// store's time of the limit it replaces (the starts already counted).
// ErrRateLimitsUnsupported when the store cannot enforce it; an error
// wrapping ErrInvalid for an unusable limit.
func (a *Admin) SetRateLimit(ctx context.Context, l RateLimit) error {
	m := a.m
	if !store.EnforcesRateLimits(m.cfg.store) {
		return ErrRateLimitsUnsupported
	}
	if err := l.store().Validate(); err != nil {
		return fmt.Errorf("job: set rate limit: %w", err)
	}
	body, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("job: set rate limit of %s: %w", l, err)
	}
	_, err = m.store.PutDocument(ctx, &store.PutDocumentParams{Collection: RateLimitsCollection, Name: limitDocName(l.Kind, l.Queue), Body: body, IfVersion: store.AnyVersion, Now: m.clock.Now()})
	if err != nil {
		return fmt.Errorf("job: set rate limit of %s: %w", l, err)
	}
	m.limits.invalidate()
	m.notifyLocal()
	return nil
}

// DeleteRateLimit removes the rate limit of kind in queue (either empty
// for every kind or queue, as stored); an error wrapping ErrNotFound when
// there is none.
func (a *Admin) DeleteRateLimit(ctx context.Context, kind, queue string) error {
	m := a.m
	err := m.store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: RateLimitsCollection, Name: limitDocName(kind, queue)})
	if err != nil {
		return fmt.Errorf("job: delete the rate limit of kind %q in queue %q: %w", kind, queue, err)
	}
	m.limits.invalidate()
	m.notifyLocal()
	return nil
}

// ListRateLimits returns the stored rate limits, by kind then queue, each
// with how many instances it matches run and wait now.
func (a *Admin) ListRateLimits(ctx context.Context) ([]RateLimitUse, error) {
	m := a.m
	ls, err := loadRateLimits(ctx, m.store)
	if err != nil {
		return nil, err
	}
	out := make([]RateLimitUse, len(ls))
	if len(ls) == 0 {
		return out, nil
	}
	counts, err := m.store.Counts(ctx, &store.CountsParams{})
	if err != nil {
		return nil, fmt.Errorf("job: list rate limits: %w", err)
	}
	for i, l := range ls {
		out[i].RateLimit = RateLimit{Kind: l.Kind, Queue: l.Queue, Rate: l.Rate, Period: l.Period, Burst: l.Burst}
		for _, g := range counts {
			if l.Matches(g.Kind, g.Queue) {
				out[i].Running += g.States[store.Processing]
				out[i].Waiting += g.States[store.Scheduled]
			}
		}
	}
	return out, nil
}

// loadRateLimits reads every stored rate limit, by kind then queue.
func loadRateLimits(ctx context.Context, s store.Store) ([]store.RateLimit, error) {
	var out []store.RateLimit
	p := &store.ListDocumentsParams{Collection: RateLimitsCollection, Limit: store.MaxDocumentPage}
	for {
		page, err := s.ListDocuments(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("job: read the rate limits: %w", err)
		}
		for _, d := range page.Documents {
			var l store.RateLimit
			if err := json.Unmarshal(d.Body, &l); err != nil || l.Validate() != nil || d.Name != limitDocName(l.Kind, l.Queue) {
				return nil, fmt.Errorf("%w: job: stored rate limit %q is not one SetRateLimit wrote; delete it", store.ErrCorrupt, d.Name)
			}
			out = append(out, l)
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	slices.SortFunc(out, func(a, b store.RateLimit) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Queue, b.Queue))
	})
	return out, nil
}

// cachedRates returns the rate limits as last read, without reading them.
func (c *limitCache) cachedRates() []store.RateLimit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rates
}

// noteRetry records what a claim of queue q said of rate limits: that
// one lets the next start after d (0: none held work back). It returns
// when, on the manager's clock; zero for 0.
func (c *limitCache) noteRetry(q string, d time.Duration) time.Time {
	if d <= 0 {
		c.rateWaits.Delete(q)
		return time.Time{}
	}
	at := c.clock.Now().Add(d)
	c.rateWaits.Store(q, at)
	return at
}

// applyRateLimits applies rate limits ls to claim p, as applyLimits does
// concurrency limits: it passes them when the store enforces them, and
// otherwise leaves out of p.Kinds the kinds they bound. It returns false
// when that leaves nothing to claim.
func applyRateLimits(p *store.ClaimParams, ls []store.RateLimit, enforce bool) bool {
	switch {
	case len(ls) == 0:
		return true
	case enforce:
		p.RateLimits = ls
		return true
	}
	scopes := make([]store.ConcurrencyLimit, len(ls))
	for i, l := range ls {
		scopes[i] = store.ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue}
	}
	if len(p.Kinds) == 0 {
		return !slices.ContainsFunc(scopes, func(l store.ConcurrencyLimit) bool { return l.Queue == "" || l.Queue == p.Queue })
	}
	kinds, none := withoutLimited(p.Kinds, p.Queue, scopes)
	p.Kinds = kinds
	return !none
}

// explainRateLimits sets ex's reason to WaitRateLimit when a stored rate
// limit matches rec and either more of the work it matches waits than it
// lets start at once, or this manager's last claim of rec's queue was
// told a rate limit holds work back (the store keeps the limit's time to
// itself, so that is as near as a manager sees).
func (m *Manager) explainRateLimits(ctx context.Context, ex *WaitExplanation, rec *store.Instance) error {
	uses, err := m.Admin().ListRateLimits(ctx)
	if err != nil {
		return err
	}
	var next time.Time // when this manager's last claim of the queue may start more
	if v, ok := m.limits.rateWaits.Load(rec.Queue); ok {
		if at := v.(time.Time); at.After(m.clock.Now()) {
			next = at
		}
	}
	for _, u := range uses {
		l := u.store()
		if !l.Matches(rec.Kind, rec.Queue) || (next.IsZero() && u.Waiting <= int64(l.Burst)+1) {
			continue
		}
		ex.Reason = WaitRateLimit
		ex.Message = fmt.Sprintf("waiting for the rate limit of %s (at most %d starts per %v, burst %d): %d of its instances wait, about %v of starts at its rate",
			l.Scope(), l.Rate, l.Period, l.Burst, u.Waiting, (time.Duration(u.Waiting) * l.Interval()).Round(time.Millisecond))
		if !next.IsZero() {
			ex.Message += fmt.Sprintf("; the last claim here was told the next start is allowed in %v", next.Sub(m.clock.Now()).Round(time.Millisecond))
		}
		return nil
	}
	return nil
}

// rateLimitedError is what RateLimited returns.
type rateLimitedError struct {
	until  time.Time
	shared bool
	err    error
}

func (e *rateLimitedError) Error() string {
	msg := "rate limited until " + e.until.UTC().Format(time.RFC3339Nano)
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func (e *rateLimitedError) Unwrap() error { return e.err }

// RateLimitedOption configures RateLimited.
type RateLimitedOption func(*rateLimitedError)

// SlowSharedLimit makes RateLimited push back, for every node, the next
// start of the rate limits (Admin.SetRateLimit) that match the instance:
// none of them lets anything start before until (BullMQ's manual rate
// limit). Without it only this instance waits.
func SlowSharedLimit() RateLimitedOption {
	return func(e *rateLimitedError) { e.shared = true }
}

// WithCause keeps err (the API's 429, say) as the reason RateLimited
// records in the instance's history; errors.Is and errors.As see it.
func WithCause(err error) RateLimitedOption {
	return func(e *rateLimitedError) { e.err = err }
}

// RateLimited is what an executor returns when something it calls
// refused it for now ("429 Too Many Requests, retry after 30s"): the
// instance goes back to wait, Scheduled until until (the node's clock,
// as every RunAt), without counting the attempt, so its retries are not
// spent however often it is rate limited. With SlowSharedLimit the
// cluster's rate limits that match it let nothing start before until
// either. A zero or past until makes it wait for nothing: it is claimed
// again as soon as a worker and its limits let it.
func RateLimited(until time.Time, opts ...RateLimitedOption) error {
	e := &rateLimitedError{until: until}
	for _, o := range opts {
		o(e)
	}
	return e
}

// rateLimited sets out for an attempt whose executor returned a
// RateLimited error (reporting true): a hand-back, Scheduled at its until,
// the attempt not counted; with SlowSharedLimit it first delays the
// stored rate limits that match the instance.
func (m *Manager) rateLimited(a *attempt, err error, out *store.Outcome) bool {
	var rl *rateLimitedError
	if !errors.As(err, &rl) {
		return false
	}
	now := m.clock.Now()
	until := rl.until
	if until.Before(now) {
		until = now
	}
	out.State, out.RunAt, out.Release, out.Error = store.Scheduled, until, true, err.Error()
	if rl.shared {
		m.slowRateLimits(a.rec, until.Sub(now))
	}
	return true
}

// slowRateLimits pushes back the stored rate limits that match rec by d.
// A failure is logged: the instance waits all the same.
func (m *Manager) slowRateLimits(rec *store.Instance, d time.Duration) {
	delayer, ok := m.cfg.store.(store.RateLimitDelayer)
	if !ok || !store.EnforcesRateLimits(m.cfg.store) || d <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.limits.current(ctx) // read again when stale
	for _, l := range m.limits.cachedRates() {
		if !l.Matches(rec.Kind, rec.Queue) {
			continue
		}
		if err := delayer.DelayRateLimit(ctx, l, d); err != nil {
			m.log.Warn("could not slow the rate limit a job was rate limited under", "limit", l.String(), "instance", rec.ID, "err", err)
		}
	}
}
