package job

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// ConcurrencyLimit bounds how many instances run at once across the
// cluster: every manager sharing the store (and namespace) counts against
// it. It matches the instances of Kind (every kind when empty) in Queue
// (every queue when empty); Max is how many of them may run at once, and
// 0 lets none start. The store enforces it inside its atomic claim: a
// claim skips what would pass a limit and takes the next instance in
// claim order, so a kind at its limit never holds up the others. An
// attempt holds its slot until it leaves Processing, whichever way (an
// outcome, a hand-back at Stop or fencing, a rescue of an expired lease or
// of a dead node's attempt, a cancel once the attempt ends, a delete).
// With PerKey, Max bounds each limit key apart (WithLimitKey,
// WithLimitKeyFunc): at most Max of the matching instances with one key
// run at once, and a key at its limit holds back only its own instances.
// Max 1 with PerKey runs each key's instances one at a time, in the order
// they were scheduled (for one priority and run time). A per-key limit
// replaces the limit of the whole kind and queue, as one limit is stored
// per kind and queue. Per-key limits need a store.KeyedLimitEnforcer
// (ErrKeyedLimitsUnsupported). See doc/limits.md.
type ConcurrencyLimit struct {
	Kind   string `json:"kind,omitempty"`
	Queue  string `json:"queue,omitempty"`
	Max    int    `json:"max"`
	PerKey bool   `json:"per_key,omitempty"`
}

// String names the limit: "kind email (at most 5 running)".
func (l ConcurrencyLimit) String() string { return l.store().String() }

func (l ConcurrencyLimit) store() store.ConcurrencyLimit {
	return store.ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue, Max: l.Max, PerKey: l.PerKey}
}

// LimitUse is a stored limit with its current use, as
// Admin.ListConcurrencyLimits reads it.
type LimitUse struct {
	ConcurrencyLimit
	// Running is how many instances the limit matches are Processing.
	Running int64
	// Waiting is how many it matches are Scheduled (due or not).
	Waiting int64
}

// ErrLimitsUnsupported: the store does not enforce concurrency limits
// (it is not a store.LimitEnforcer); memdbstore, pgstore, redisstore and
// valkeystore on a namespace of one partition, and jobd's remote store
// over one of them, do. etcdstore and a partitioned namespace of more
// than one partition do not.
var ErrLimitsUnsupported = errors.New("job: the store does not enforce concurrency limits; use memdbstore, pgstore, or redisstore or valkeystore on a namespace of one partition (or jobd over one of them)")

// LimitsCollection is the collection of store.Documents that holds the
// concurrency limits, one document per (kind, queue).
const LimitsCollection = "concurrency-limits"

// DefaultLimitsRefresh is how often a manager reads the stored limits
// again, so a change made on any node holds cluster-wide within it.
const DefaultLimitsRefresh = time.Second

// limitRecheck is how soon a claimer claims again after a claim left work
// for a limit: a slot released on another node announces nothing.
const limitRecheck = 50 * time.Millisecond

// limitDocName is the document name of the limit of (kind, queue).
func limitDocName(kind, queue string) string {
	return strconv.Itoa(len(kind)) + ":" + kind + "/" + queue
}

// SetConcurrencyLimit stores l, replacing the limit of the same kind and
// queue; every manager of the cluster applies it within
// DefaultLimitsRefresh (this one at once). ErrLimitsUnsupported when the
// store cannot enforce it; an error wrapping ErrInvalid for a negative
// Max.
func (a *Admin) SetConcurrencyLimit(ctx context.Context, l ConcurrencyLimit) error {
	m := a.m
	if !store.EnforcesLimits(m.cfg.store) {
		return ErrLimitsUnsupported
	}
	if l.PerKey && !store.EnforcesKeyedLimits(m.cfg.store) {
		return ErrKeyedLimitsUnsupported
	}
	if err := l.store().Validate(); err != nil {
		return fmt.Errorf("job: set concurrency limit: %w", err)
	}
	body, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("job: set concurrency limit of %s: %w", l, err)
	}
	_, err = m.store.PutDocument(ctx, &store.PutDocumentParams{Collection: LimitsCollection, Name: limitDocName(l.Kind, l.Queue), Body: body, IfVersion: store.AnyVersion, Now: m.clock.Now()})
	if err != nil {
		return fmt.Errorf("job: set concurrency limit of %s: %w", l, err)
	}
	m.limits.invalidate()
	m.notifyLocal()
	return nil
}

// DeleteConcurrencyLimit removes the limit of kind in queue (either empty
// for every kind or queue, as stored); an error wrapping ErrNotFound when
// there is none.
func (a *Admin) DeleteConcurrencyLimit(ctx context.Context, kind, queue string) error {
	m := a.m
	err := m.store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: LimitsCollection, Name: limitDocName(kind, queue)})
	if err != nil {
		return fmt.Errorf("job: delete the concurrency limit of kind %q in queue %q: %w", kind, queue, err)
	}
	m.limits.invalidate()
	m.notifyLocal()
	return nil
}

// ListConcurrencyLimits returns the stored limits, by kind then queue,
// each with how many instances it matches run and wait now.
func (a *Admin) ListConcurrencyLimits(ctx context.Context) ([]LimitUse, error) {
	m := a.m
	ls, err := loadLimits(ctx, m.store)
	if err != nil {
		return nil, err
	}
	out := make([]LimitUse, len(ls))
	if len(ls) == 0 {
		return out, nil
	}
	counts, err := m.store.Counts(ctx, &store.CountsParams{})
	if err != nil {
		return nil, fmt.Errorf("job: list concurrency limits: %w", err)
	}
	for i, l := range ls {
		out[i].ConcurrencyLimit = ConcurrencyLimit{Kind: l.Kind, Queue: l.Queue, Max: l.Max, PerKey: l.PerKey}
		for _, g := range counts {
			if l.Matches(g.Kind, g.Queue) {
				out[i].Running += g.States[store.Processing]
				out[i].Waiting += g.States[store.Scheduled]
			}
		}
	}
	return out, nil
}

// loadLimits reads every stored limit, by kind then queue.
func loadLimits(ctx context.Context, s store.Store) ([]store.ConcurrencyLimit, error) {
	var out []store.ConcurrencyLimit
	p := &store.ListDocumentsParams{Collection: LimitsCollection, Limit: store.MaxDocumentPage}
	for {
		page, err := s.ListDocuments(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("job: read the concurrency limits: %w", err)
		}
		for _, d := range page.Documents {
			var l store.ConcurrencyLimit
			if err := json.Unmarshal(d.Body, &l); err != nil || l.Validate() != nil || d.Name != limitDocName(l.Kind, l.Queue) {
				return nil, fmt.Errorf("%w: job: stored concurrency limit %q is not one SetConcurrencyLimit wrote; delete it", store.ErrCorrupt, d.Name)
			}
			out = append(out, l)
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	slices.SortFunc(out, func(a, b store.ConcurrencyLimit) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Queue, b.Queue))
	})
	return out, nil
}

// limitCache holds the stored limits a manager claims with, read again
// when older than every. It is shared by the claimer and Admin.
type limitCache struct {
	store   store.Store
	clock   Clock
	log     *slog.Logger
	every   time.Duration
	enforce bool // the store enforces ClaimParams.Limits
	// enforceRates: the store enforces ClaimParams.RateLimits; rates are
	// the rate limits as last read with list (ratelimit.go).
	enforceRates bool
	rates        []store.RateLimit
	// rateWaits holds, by queue, when this manager's last claim of it
	// was told a rate limit lets the next start (node clock), for
	// ExplainWaiting.
	rateWaits sync.Map

	mu     sync.Mutex
	loaded time.Time // zero: read at the next claim
	list   []store.ConcurrencyLimit
	warned bool
	// waiting is set while the last claim left work for a limit: a flush
	// of outcomes then wakes the claim loop, as it may have freed a slot.
	waiting atomic.Bool
	// flushes counts the batches of outcomes written, so a claim that left
	// work for a limit while a batch was written (whose wake-up it could
	// not see) claims again at once.
	flushes atomic.Uint64
}

// invalidate makes the next claim read the limits again.
func (c *limitCache) invalidate() {
	c.mu.Lock()
	c.loaded = time.Time{}
	c.mu.Unlock()
}

// cached returns the limits as last read, without reading them.
func (c *limitCache) cached() []store.ConcurrencyLimit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.list
}

// current returns the limits, read again first when stale. A failed read
// keeps the limits read before (and is logged once until a read works).
func (c *limitCache) current(ctx context.Context) []store.ConcurrencyLimit {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if !c.loaded.IsZero() && now.Sub(c.loaded) < c.every && !now.Before(c.loaded) {
		return c.list
	}
	ls, err := loadLimits(ctx, c.store)
	var rls []store.RateLimit
	if err == nil {
		rls, err = loadRateLimits(ctx, c.store)
	}
	if err != nil {
		if !c.warned {
			c.log.Warn("could not read the concurrency limits; claiming with those read before", "err", err)
			c.warned = true
		}
		return c.list
	}
	c.warned = false
	c.loaded, c.list, c.rates = now, ls, rls
	return ls
}

// applyLimits applies limits ls to claim p: it passes them when the
// store enforces them, and otherwise leaves out of p.Kinds the kinds they
// bound. It returns false when that leaves nothing to claim (a limit of
// every kind, or a claim of any kind, which cannot leave one out).
func applyLimits(p *store.ClaimParams, ls []store.ConcurrencyLimit, enforce bool) bool {
	switch {
	case len(ls) == 0:
		return true
	case enforce:
		p.Limits = ls
		return true
	case len(p.Kinds) == 0:
		return !slices.ContainsFunc(ls, func(l store.ConcurrencyLimit) bool { return l.Queue == "" || l.Queue == p.Queue })
	}
	kinds, none := withoutLimited(p.Kinds, p.Queue, ls)
	p.Kinds = kinds
	return !none
}

// ApplyLimits applies concurrency limits to p, a claim made on behalf of
// another process (jobd claims for its remote executors), as the
// manager's own claims apply them: p's own Limits when it has some (the
// executor's manager read them from the same store), else the cluster's
// as this manager last read them (again when older than
// DefaultLimitsRefresh). When the manager's store enforces limits they
// go in p.Limits; otherwise the kinds they bound are left out of p.Kinds,
// so no limit is passed. Rate limits (p.RateLimits, else the cluster's)
// are applied the same way (ratelimit.go). It returns false when nothing
// is left to claim: p must not be made.
func (m *Manager) ApplyLimits(ctx context.Context, p *store.ClaimParams) bool {
	ls, rls := p.Limits, p.RateLimits
	if len(ls) == 0 || len(rls) == 0 {
		cur := m.limits.current(ctx) // read again when stale
		if len(ls) == 0 {
			ls = cur
		}
		if len(rls) == 0 {
			rls = m.limits.cachedRates()
		}
	}
	p.Limits, p.RateLimits = nil, nil
	return applyLimits(p, ls, m.limits.enforce) && applyRateLimits(p, rls, m.limits.enforceRates)
}

// withoutLimited returns kinds without those a limit of queue q holds back,
// for a store that does not enforce limits: a limit must not be passed,
// so what it bounds is not claimed there at all. all reports that a limit
// matches every kind of q (nothing may be claimed).
func withoutLimited(kinds []string, q string, ls []store.ConcurrencyLimit) (out []string, all bool) {
	for _, l := range ls {
		if (l.Queue == "" || l.Queue == q) && l.Kind == "" {
			return nil, true
		}
	}
	for _, k := range kinds {
		if !slices.ContainsFunc(ls, func(l store.ConcurrencyLimit) bool { return l.Matches(k, q) }) {
			out = append(out, k)
		}
	}
	return out, len(out) == 0
}

// outcomesWritten is called after each batch of outcomes the completer
// wrote: it wakes Wait, and the claim loop while work waits for a
// concurrency limit (the batch may have released slots).
func (m *Manager) outcomesWritten() {
	m.signalChanged()
	m.limits.flushes.Add(1)
	if m.limits.waiting.Load() {
		m.notifyLocal()
	}
}

// explainLimits sets ex's reason to WaitConcurrencyLimit when a stored
// limit that matches rec is full: "waiting for the concurrency limit of
// kind email (5/5 running)".
func (m *Manager) explainLimits(ctx context.Context, ex *WaitExplanation, rec *store.Instance) error {
	uses, err := m.Admin().ListConcurrencyLimits(ctx)
	if err != nil {
		return err
	}
	for _, u := range uses {
		l := u.store()
		if l.PerKey {
			if l.Matches(rec.Kind, rec.Queue) && u.Running >= int64(u.Max) {
				if err := m.explainKeyedLimit(ctx, ex, rec, l); err != nil || ex.Reason != "" {
					return err
				}
			}
			continue
		}
		if l.Matches(rec.Kind, rec.Queue) && u.Running >= int64(u.Max) {
			ex.Reason = WaitConcurrencyLimit
			ex.Message = fmt.Sprintf("waiting for the concurrency limit of %s (%d/%d running)", l.Scope(), u.Running, u.Max)
			return nil
		}
	}
	return nil
}
