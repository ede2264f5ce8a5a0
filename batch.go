package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobkit/job/store"
)

// MaxScheduleBatch is the most instances ScheduleJobs sends in one store
// call; a larger batch goes in several calls, in order.
const MaxScheduleBatch = 1000

// BatchItem is one instance to schedule with Manager.ScheduleJobs: the
// kind, and the options ScheduleJob would take for it (its own arguments,
// run time, unique key, policy overrides, ...).
type BatchItem struct {
	Kind    string
	Options []ScheduleOption
}

// BatchResult is the outcome of one BatchItem, at the item's index.
type BatchResult struct {
	// Instance is the stored instance; on ErrDuplicate the instance that
	// holds the unique key (nil when looking it up failed); for an
	// idempotency key stored already, the instance stored first. Nil on
	// any other error.
	Instance Instance
	// Err is nil when the item was stored (or, with an idempotency key,
	// was stored before). Otherwise it is what ScheduleJob would have
	// returned for the item alone: an error wrapping ErrUnknownKind,
	// ErrInvalidOption, ErrInvalidArguments, store.ErrInvalid,
	// ErrTooLarge or ErrDuplicate, and the item stored nothing; or the
	// error of a store call that failed (see ScheduleJobs).
	Err error
}

// ScheduleJobs schedules many instances, of one kind or several, in as
// few store calls as it can: one per MaxScheduleBatch items. Each item is
// what one ScheduleJob(ctx, item.Kind, item.Options...) would store, and
// its result, at the same index, holds the instance or that item's own
// error. Items are checked (kind, options, arguments against the
// executor, the store's limits) before anything is sent; a rejected item
// stores nothing and does not keep the others from being stored. Each
// store call is atomic: the items it carries are stored together, except
// those the store rejects one by one (a unique key held by another
// instance, or by an earlier item of the batch), which store nothing.
// Items are stored in order, so their Seq follows the items' order.
//
// The error is nil when every store call went through, whatever the
// items' own errors. A store call that fails (ctx ended, the connection
// broke) stops the batch: ScheduleJobs returns the error, and the results
// of that call's items and of every later item carry it; earlier calls'
// items were stored. A call cut short may still have stored its items:
// give each item WithIdempotencyKey to repeat the batch safely.
func (m *Manager) ScheduleJobs(ctx context.Context, items ...BatchItem) ([]BatchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: schedule %d instances: %w", len(items), err)
	}
	out := make([]BatchResult, len(items))
	type pending struct {
		i       int
		j       *Job
		rec     *store.Instance
		idemKey string
	}
	batch := make([]pending, 0, min(len(items), MaxScheduleBatch))
	jobs := map[string]*Job{}
	var stored []int // indexes of new instances, for the handlers
	var storedJobs []*Job
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		recs := make([]*store.Instance, len(batch))
		for k, p := range batch {
			recs[k] = p.rec
		}
		res, errs, err := m.enqueueSplit(ctx, recs)
		if err != nil {
			return err
		}
		for k, p := range batch {
			if errs[k] != nil {
				out[p.i].Err = fmt.Errorf("job: schedule %q: %w", p.rec.Kind, errs[k])
				continue
			}
			inst, isNew, err := m.scheduled(ctx, p.rec, res[k], p.idemKey)
			out[p.i] = BatchResult{Instance: inst, Err: err}
			if isNew {
				stored = append(stored, p.i)
				storedJobs = append(storedJobs, p.j)
			}
		}
		batch = batch[:0]
		return nil
	}
	var failed error
	for i, it := range items {
		j, ok := jobs[it.Kind]
		if !ok {
			var err error
			if j, err = m.jobFor(ctx, it.Kind); err != nil {
				out[i].Err = fmt.Errorf("job: schedule %q: %w", it.Kind, err)
				continue
			}
			jobs[it.Kind] = j
		}
		var c scheduleConfig
		if err := c.apply(it.Options); err != nil {
			out[i].Err = fmt.Errorf("job: schedule %q: %w", it.Kind, err)
			continue
		}
		rec, err := m.newRecord(j, &c)
		if err == nil {
			err = rec.Validate()
		}
		if err != nil {
			out[i].Err = fmt.Errorf("job: schedule %q: %w", it.Kind, err)
			continue
		}
		batch = append(batch, pending{i: i, j: j, rec: rec, idemKey: c.idemKey})
		if len(batch) == MaxScheduleBatch {
			if failed = flush(); failed != nil {
				break
			}
		}
	}
	if failed == nil {
		failed = flush()
	}
	if failed != nil {
		failed = fmt.Errorf("job: schedule %d instances: %w", len(items), failed)
		// The failed call's items and those not sent yet.
		for _, p := range batch {
			out[p.i].Err = failed
		}
		if len(batch) > 0 {
			for i := batch[len(batch)-1].i + 1; i < len(items); i++ {
				if out[i].Err == nil && out[i].Instance == nil {
					out[i].Err = failed
				}
			}
		}
	}
	if len(stored) > 0 {
		m.notifyLocal()
		for k, i := range stored {
			m.stateChanged(storedJobs[k], out[i].Instance, store.Scheduled)
		}
	}
	return out, failed
}

// enqueueSplit stores recs in one store call. When the store refuses the
// whole call because of some records (store.ErrInvalid, ErrTooLarge:
// refused before anything was stored), it sends each half on its own,
// down to single records, so that only the records at fault fail: their
// errors are in errs. err is a failure of the call itself.
func (m *Manager) enqueueSplit(ctx context.Context, recs []*store.Instance) (res []store.EnqueueResult, errs []error, err error) {
	res = make([]store.EnqueueResult, len(recs))
	errs = make([]error, len(recs))
	var send func(lo, hi int) error
	send = func(lo, hi int) error {
		r, err := m.enq.call(ctx, recs[lo:hi])
		if err == nil {
			copy(res[lo:hi], r)
			return nil
		}
		if !errors.Is(err, store.ErrInvalid) && !errors.Is(err, store.ErrTooLarge) {
			return err
		}
		if hi-lo == 1 {
			errs[lo] = err
			return nil
		}
		mid := lo + (hi-lo)/2
		if err := send(lo, mid); err != nil {
			return err
		}
		return send(mid, hi)
	}
	if err := send(0, len(recs)); err != nil {
		return nil, nil, err
	}
	return res, errs, nil
}
