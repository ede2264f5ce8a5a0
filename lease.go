package job

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobkit/job/store"
)

// renewBatch bounds the leases one Renew call carries.
const renewBatch = 512

// renewerDeps is what the renewer uses.
type renewerDeps struct {
	store store.Store
	// notices pushes cancel requests at once; nil when the store has no
	// such feed (store.CancelNotifier).
	notices  store.CancelNotifier
	clock    Clock
	node     string
	log      *slog.Logger
	lease    time.Duration // how long a renewal extends a lease to
	interval time.Duration // how often leases are renewed
	active   *activeSet    // the attempts whose leases are renewed
	watch    *watchlist    // their lease deadlines and caps
	obs      observers
	// giveUp decides the end of an attempt whose lease was lost; false
	// when it was already decided (see Manager.giveUp).
	giveUp func(a *attempt) bool
}

// renewer renews the leases of the manager's running attempts and cancels
// those whose cancellation was requested, from Start until Stop has
// written every outcome.
type renewer struct {
	renewerDeps
	loops
	ctx    context.Context // bounds renewals; canceled by halt
	cancel context.CancelFunc
	// subscribed asks run for a renewal now: watchCancels has just
	// subscribed, and a cancel requested before that sent a notice
	// nobody received; the renewal reports it.
	subscribed chan struct{}
}

var _ service = (*renewer)(nil)

func newRenewer(d renewerDeps) *renewer { return &renewer{renewerDeps: d} }

func (r *renewer) start() {
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.subscribed = make(chan struct{}, 1)
	r.reset()
	r.goLoop(r.run)
	r.goLoop(r.watchCancels) // issue 21: cancels pushed by the store
}

// halt ends the renewals under way and the loops.
func (r *renewer) halt() {
	r.cancel()
	r.loops.halt()
}

// run renews the leases of this manager's attempts every third of
// the lease, in batches. An attempt whose lease was lost is given up: its
// context is canceled with ErrLeaseLost and its outcome discarded; one
// whose cancellation was requested elsewhere has its context canceled with
// ErrCanceled. A lease is never renewed past its attempt's timeout plus
// grace (see watchlist.leaseCap). Each renewal that succeeds moves the
// attempt's fence (see watchdog); one that fails leaves it, so an attempt
// that cannot renew stops before its lease ends (its outcome is written
// all the same, see watchdog.fence: the store may still hold the lease).
// The loop keeps running after the claimer stops, until the completer has
// written every outcome, so nothing is rescued meanwhile.
//
// Renewals start a renew interval apart, however long each takes, and a
// quarter of one apart while they fail: with the default lease an attempt
// is fenced only when no renewal succeeded for 25 s, after the first
// failed try and six more. A renewal also starts each time watchCancels
// has (re)subscribed, to catch the cancels whose notices it missed.
func (r *renewer) run(quit <-chan struct{}) {
	wait := r.interval
	for {
		if !r.sleep(wait, quit) {
			return
		}
		started := r.clock.Now()
		interval := r.interval
		if !r.renew() {
			interval /= 4
		}
		wait = interval - r.clock.Now().Sub(started) // sleep returns at once when <= 0
	}
}

// sleep waits d, or less when watchCancels has just subscribed; it
// reports false when quit closed.
func (r *renewer) sleep(d time.Duration, quit <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := r.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-r.subscribed:
	case <-quit:
		return false
	}
	return true
}

// renew renews every lease this manager holds once; it reports false when
// a store call failed.
func (r *renewer) renew() bool {
	all := r.active.snapshot()
	if len(all) == 0 {
		return true
	}
	now := r.clock.Now()
	full := now.Add(r.lease)
	// Group the attempts by the deadline they may be renewed to: all of
	// them up to a full lease, except those whose timeout caps it.
	var (
		normal []*attempt
		capped map[int64][]*attempt
	)
	for i, held := range r.watch.leases(all) {
		a := all[i]
		until := full
		if c := r.watch.leaseCap(a); !c.IsZero() && c.Before(until) {
			until = c
		}
		if !until.After(held) || !until.After(now) {
			continue // capped: no later deadline is allowed
		}
		if until.Equal(full) {
			normal = append(normal, a)
			continue
		}
		if capped == nil {
			capped = map[int64][]*attempt{}
		}
		capped[until.UnixNano()] = append(capped[until.UnixNano()], a)
	}
	ok := r.renewBatches(normal, full, now)
	for until, as := range capped {
		ok = r.renewBatches(as, time.Unix(0, until), now) && ok
	}
	return ok
}

// renewBatches renews the leases of as until until, renewBatch at a time;
// it reports false when a store call failed.
func (r *renewer) renewBatches(as []*attempt, until, now time.Time) bool {
	ok := true
	for len(as) > 0 {
		n := min(len(as), renewBatch)
		batch := as[:n]
		as = as[n:]
		byRef := make(map[store.LeaseRef]*attempt, n)
		refs := make([]store.LeaseRef, n)
		for i, a := range batch {
			refs[i] = a.ref()
			byRef[refs[i]] = a
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.interval)
		res, err := r.store.Renew(ctx, &store.RenewParams{Owner: r.node, Leases: refs, Until: until, Now: now})
		cancel()
		if err != nil {
			r.log.Warn("renew leases", "count", n, "err", err)
			ok = false
			continue
		}
		for _, ref := range res.Lost {
			a := byRef[ref]
			if a == nil {
				continue
			}
			delete(byRef, ref)
			// An attempt already settled is being written; its outcome
			// will be rejected on its own if the lease is really gone.
			if r.giveUp(a) {
				r.log.Warn("lease lost; canceling the attempt", "instance", ref.ID, "attempt", ref.Attempt)
				r.obs.leaseLost(a.rec, LeaseLostRenew)
				a.cancel(ErrLeaseLost)
				r.active.remove(a)
			}
		}
		renewed := make([]*attempt, 0, len(byRef))
		for _, a := range byRef {
			renewed = append(renewed, a)
		}
		r.watch.extend(renewed, until)
		for _, ref := range res.CancelRequested {
			if a := byRef[ref]; a != nil {
				a.cancel(ErrCanceled)
			}
		}
	}
	return ok
}
