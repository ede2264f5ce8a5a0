package job

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// maxEnqueueBatch bounds how many ScheduleJob calls share one
// store.Enqueue.
const maxEnqueueBatch = 128

// enqueuer coalesces concurrent ScheduleJob calls into shared
// store.Enqueue calls (group commit). A call that finds no Enqueue in
// flight goes straight to the store with its own context, exactly as if
// there were no enqueuer. Calls that arrive while one is in flight queue
// up, and when it returns a goroutine sends them together, in arrival
// order, in one call: concurrent producers share round trips (and, on
// Redis, one script run and one history entry) and nobody waits on a
// timer.
//
// A shared call runs under a context that keeps the first caller's values
// and ends only when every caller in it has given up, so one caller's
// cancellation never fails the others. A caller whose context ends while
// it still waits in the queue is taken out and gets the context's error:
// its instance was not stored. One whose context ends while its batch is
// in flight gets the context's error marked store.ErrOutcomeUnknown: its
// instance may or may not have been stored, as with any store call cut
// short.
type enqueuer struct {
	st      store.Store
	node    string
	clock   Clock
	mu      sync.Mutex
	busy    bool // a store.Enqueue is in flight; new calls queue
	pending []*enqueueReq
	reqs    sync.Pool // of *enqueueReq; see newReq
}

type enqueueReq struct {
	ctx context.Context
	rec *store.Instance
	res store.EnqueueResult
	err error
	// done gets one value when res and err are set (buffered: complete
	// never waits). A request and its channel are reused (newReq) once
	// its caller has taken that value, or once it was taken out of the
	// queue unsent: then nothing else holds it. A caller that gives up
	// while its batch is in flight leaves its request to the collector,
	// as the batch's completion still writes into it.
	done chan struct{}
	// call is the shared call r went in (set under the enqueuer's mutex
	// when its batch is taken): r's goroutine, which watches r.ctx,
	// counts itself out of it when r.ctx ends.
	call *sharedCall
}

// sharedCall is what the callers of one shared store call hold in
// common: how many have not given up, and how to end the call's context
// once none is left. Guarded by the enqueuer's mutex.
type sharedCall struct {
	ctx    context.Context
	cancel context.CancelFunc // nil: some caller's context cannot end
	left   int
}

// newReq returns a request for a queued caller, a reused one when the
// enqueuer has one (see enqueueReq.done): a request and its channel are
// two allocations per job otherwise. The pool is the enqueuer's, not the
// process's: a channel made inside a testing/synctest bubble must not be
// used outside it, nor one made outside inside it (the bubble's clock
// would not advance while a caller waits on it).
func (e *enqueuer) newReq() *enqueueReq {
	if r, ok := e.reqs.Get().(*enqueueReq); ok {
		return r
	}
	return &enqueueReq{done: make(chan struct{}, 1)}
}

// release puts r, whose done channel is empty and which nothing else
// refers to, back in e's pool.
func (e *enqueuer) release(r *enqueueReq) {
	*r = enqueueReq{done: r.done}
	e.reqs.Put(r)
}

// enqueue stores rec and returns its result.
func (e *enqueuer) enqueue(ctx context.Context, rec *store.Instance) (store.EnqueueResult, error) {
	if store.IsUnshared(ctx) {
		// The call carries its caller's own state (a database
		// transaction): it must not join, nor carry, anyone else's.
		res, err := e.call(ctx, []*store.Instance{rec})
		if err != nil {
			return store.EnqueueResult{}, err
		}
		return res[0], nil
	}
	e.mu.Lock()
	if !e.busy {
		e.busy = true
		e.mu.Unlock()
		defer e.next() // even if the store panics: queued calls must go on
		res, err := e.call(ctx, []*store.Instance{rec})
		if err != nil {
			return store.EnqueueResult{}, err
		}
		return res[0], nil
	}
	r := e.newReq()
	r.ctx, r.rec = ctx, rec
	e.pending = append(e.pending, r)
	e.mu.Unlock()
	select {
	case <-r.done:
		res, err := r.res, r.err
		e.release(r)
		return res, err
	case <-ctx.Done():
	}
	e.mu.Lock()
	if i := indexOf(e.pending, r); i >= 0 {
		e.pending = append(e.pending[:i], e.pending[i+1:]...)
		e.mu.Unlock()
		e.release(r) // never sent: no batch holds it
		return store.EnqueueResult{}, ctx.Err()
	}
	if c := r.call; c != nil && c.cancel != nil {
		if c.left--; c.left == 0 {
			c.cancel() // every caller has given up
		}
	}
	e.mu.Unlock()
	select {
	case <-r.done: // finished as ctx ended: the outcome is known
		res, err := r.res, r.err
		e.release(r)
		return res, err
	default:
		// In flight: its completion will still write into r, so r is
		// not reused. The batch may yet store rec.
		return store.EnqueueResult{}, store.OutcomeUnknown(fmt.Errorf("the call's ctx ended while its shared store call was in flight: %w", ctx.Err()))
	}
}

// next hands what queued up during a store call to a goroutine that
// drains it, or marks the enqueuer idle. Called with busy set.
func (e *enqueuer) next() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.pending) == 0 {
		e.busy = false
		return
	}
	go e.drain()
}

// drain sends queued calls in batches until none are left.
func (e *enqueuer) drain() {
	for {
		e.mu.Lock()
		n := min(len(e.pending), maxEnqueueBatch)
		if n == 0 {
			e.busy = false
			e.mu.Unlock()
			return
		}
		batch := make([]*enqueueReq, n)
		copy(batch, e.pending)
		e.pending = append(e.pending[:0], e.pending[n:]...)
		call := share(batch)
		e.mu.Unlock()
		e.send(call.ctx, batch)
		if call.cancel != nil {
			call.cancel()
		}
		if n > 1 {
			// The callers just completed are runnable, most of them
			// about to schedule again: let them run before the next
			// batch is taken, so that they join it rather than the one
			// after. Concurrent callers otherwise settle into two groups
			// taking turns, each call carrying about half of them, and
			// both the client and Redis pay a store call's fixed cost
			// twice as often (issue 19: 8 goroutines put 4.1 jobs in a
			// call without this, 7.4 with it). A yield, not a timer: no
			// wait when nobody is runnable.
			runtime.Gosched()
		}
	}
}

// send stores one batch of queued calls under ctx and completes each.
func (e *enqueuer) send(ctx context.Context, batch []*enqueueReq) {
	recs := make([]*store.Instance, len(batch))
	for i, r := range batch {
		recs[i] = r.rec
	}
	res, err := e.call(ctx, recs)
	if err != nil && len(batch) > 1 && (errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooLarge)) {
		// The store refused the whole call, before storing anything,
		// because of one record (too large for etcd, say): send each on
		// its own so that only the bad one fails.
		for _, r := range batch {
			r.complete(e.call(r.ctx, []*store.Instance{r.rec}))
		}
		return
	}
	for i, r := range batch {
		if err != nil {
			r.complete(nil, err)
		} else {
			r.complete(res[i:i+1], nil)
		}
	}
}

func (r *enqueueReq) complete(res []store.EnqueueResult, err error) {
	if err == nil {
		r.res = res[0]
	}
	r.err = err
	r.done <- struct{}{} // r is its caller's (or garbage) from here
}

// call is one store.Enqueue; it checks the store returned one result per
// record.
func (e *enqueuer) call(ctx context.Context, recs []*store.Instance) ([]store.EnqueueResult, error) {
	res, err := e.st.Enqueue(ctx, &store.EnqueueParams{Instances: recs, Node: e.node, Now: enqueueTime(e.clock, recs)})
	if err != nil {
		return nil, err
	}
	if len(res) != len(recs) {
		return nil, fmt.Errorf("store returned %d results for %d instances", len(res), len(recs))
	}
	return res, nil
}

// share makes the shared call of batch: its context keeps the first
// caller's values and ends once every caller's context has ended (never,
// if one of them cannot end). The callers' own goroutines, which wait
// watching their contexts, count themselves out as their contexts end
// (see enqueue): no callback is registered per caller. Called with the
// enqueuer's mutex held, as batch is taken from the queue.
func share(batch []*enqueueReq) *sharedCall {
	base := context.WithoutCancel(batch[0].ctx)
	c := &sharedCall{ctx: base, left: len(batch)}
	for _, r := range batch {
		if r.ctx.Done() == nil {
			return c
		}
	}
	c.ctx, c.cancel = context.WithCancel(base)
	for _, r := range batch {
		r.call = c
	}
	return c
}

func indexOf(rs []*enqueueReq, r *enqueueReq) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return -1
}

// enqueueTime is the time an Enqueue of recs records (its Created and
// Scheduled history): the clock's, but never later than a record's
// CreatedAt. A record's RunAt is no earlier than its CreatedAt and a claim
// may take it from RunAt on, stamping Processing with the claim's time; a
// Created stamped at the later moment of the store call could then sort
// after the Processing of a claim made in between.
func enqueueTime(c Clock, recs []*store.Instance) time.Time {
	now := c.Now()
	for _, r := range recs {
		if !r.CreatedAt.IsZero() && r.CreatedAt.Before(now) {
			now = r.CreatedAt
		}
	}
	return now
}
