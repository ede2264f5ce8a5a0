package job

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

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
	Instance *InstanceInfo
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
// Each item passes through the manager's Schedule middleware (see
// Middleware) as one ScheduleJob would: its chain may add metadata or
// turn the item away; the chains of a store call's items run side by
// side, one goroutine each, and their innermost next calls wait for the
// one store call, made with ctx once every item has reached it or been
// turned away.
//
// The error is nil when every store call went through, whatever the
// items' own errors. A store call that fails (ctx ended, the connection
// broke) stops the batch: ScheduleJobs returns the error, and the results
// of that call's items and of every later item carry it; earlier calls'
// items were stored, and later items were not sent (their errors do not
// wrap ErrOutcomeUnknown). A call cut short after it was sent may still
// have stored its items: its error and its items' wrap ErrOutcomeUnknown
// and the cause. Give each item WithIdempotencyKey to repeat the batch
// safely.
func (m *Manager) ScheduleJobs(ctx context.Context, items ...BatchItem) ([]BatchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("job: schedule %d instances: %w", len(items), err)
	}
	out := make([]BatchResult, len(items))
	chunk := make([]batchEntry, 0, min(len(items), MaxScheduleBatch))
	jobs := map[string]*Job{}
	var failed error
	// One config for every item, cleared for each: the options write into
	// it through a pointer, so one per item would be an allocation each.
	// Nothing keeps it past the item (newRecord copies what it needs).
	var c scheduleConfig
	var rnd batchRand
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
		c = scheduleConfig{idRand: &rnd}
		if err := c.apply(it.Options); err != nil {
			out[i].Err = fmt.Errorf("job: schedule %q: %w", it.Kind, err)
			continue
		}
		if c.shards > 0 {
			out[i].Err = fmt.Errorf("job: schedule %q: %w: WithShards in ScheduleJobs; schedule a sharded task with ScheduleJob", it.Kind, ErrInvalidOption)
			continue
		}
		if err := c.workflowOnly(); err != nil {
			out[i].Err = fmt.Errorf("job: schedule %q: %w", it.Kind, err)
			continue
		}
		rec, err := m.newRecord(j, &c)
		if err != nil {
			out[i].Err = fmt.Errorf("job: schedule %q: %w", it.Kind, err)
			continue
		}
		chunk = append(chunk, batchEntry{i: i, j: j, rec: rec, idemKey: c.idemKey})
		if len(chunk) == MaxScheduleBatch {
			if failed = m.scheduleChunk(ctx, chunk, out); failed != nil {
				break
			}
			chunk = chunk[:0]
		}
	}
	if failed == nil && len(chunk) > 0 {
		failed = m.scheduleChunk(ctx, chunk, out)
	}
	if failed != nil {
		cause := failed
		failed = batchError(len(items), failed)
		// The failed call's items, each with its own retry advice, and
		// those not sent yet, which stored nothing whatever the failed
		// call did.
		last := chunk[len(chunk)-1].i
		for _, e := range chunk {
			if out[e.i].Err == nil && out[e.i].Instance == nil {
				out[e.i].Err = scheduleError(strconv.Quote(e.rec.Kind), e.idemKey, cause)
			}
		}
		unsent := &notSentError{fmt.Errorf("job: schedule: not sent, as an earlier store call of the batch failed: %w", cause)}
		for i := last + 1; i < len(items); i++ {
			if out[i].Err == nil && out[i].Instance == nil {
				out[i].Err = unsent
			}
		}
	}
	return out, failed
}

// batchError is the error ScheduleJobs returns for a store call that
// failed with err; when its outcome is unknown, it names the safe retry.
func batchError(n int, err error) error {
	if !errors.Is(err, ErrOutcomeUnknown) {
		return fmt.Errorf("job: schedule %d instances: %w", n, err)
	}
	return fmt.Errorf("job: schedule %d instances: %w; the failed call's items may or may not be stored: to retry safely, give each item WithIdempotencyKey and repeat the batch with the same keys, which stores each at most once", n, err)
}

// notSentError is the error of an item a failed ScheduleJobs never sent:
// it wraps the failure's cause (errors.Is sees context.DeadlineExceeded
// through it, say) except ErrOutcomeUnknown, as the item certainly stored
// nothing.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }

func (e *notSentError) Is(target error) bool {
	return target != ErrOutcomeUnknown && errors.Is(e.err, target)
}

// batchEntry is one item of a ScheduleJobs call that became a record.
type batchEntry struct {
	i       int // the item's index
	j       *Job
	rec     *store.Instance
	idemKey string
}

// scheduleChunk stores the records of entries (at most MaxScheduleBatch)
// in one store call and puts each item's outcome in out. With Schedule
// middleware, each item passes through it as a ScheduleJob would: the
// chains run side by side, and the store call is made once every item has
// reached its innermost next or was turned away. It returns the error of
// a store call that failed.
func (m *Manager) scheduleChunk(ctx context.Context, entries []batchEntry, out []BatchResult) error {
	if len(m.cfg.middleware) == 0 {
		send := make([]batchEntry, 0, len(entries))
		for _, e := range entries {
			err := checkMetadata(e.rec.Metadata)
			if err == nil {
				err = e.rec.Validate()
			}
			if err != nil {
				out[e.i].Err = fmt.Errorf("job: schedule %q: %w", e.rec.Kind, err)
				continue
			}
			send = append(send, e)
		}
		res, err := m.storeChunk(ctx, send)
		if err != nil {
			return err
		}
		for k, e := range send {
			out[e.i] = BatchResult{Instance: res[k].inst, Err: res[k].err}
		}
		return nil
	}
	// With middleware: one goroutine per item runs its chain; the
	// innermost next reports the item here and waits for its result.
	type arrival struct {
		k     int
		reply chan batchOutcome
	}
	arrived := make(chan arrival, len(entries))
	var wg sync.WaitGroup
	for k, e := range entries {
		wg.Go(func() {
			reached := false
			inst, err := m.schedule(ctx, e.rec, func(context.Context) (*InstanceInfo, error) {
				if err := e.rec.Validate(); err != nil {
					return nil, fmt.Errorf("job: schedule %q: %w", e.rec.Kind, err)
				}
				reached = true
				reply := make(chan batchOutcome, 1)
				arrived <- arrival{k, reply}
				r := <-reply
				return r.inst, r.err
			})
			out[e.i] = BatchResult{Instance: inst, Err: err}
			if !reached {
				arrived <- arrival{k: -1}
			}
		})
	}
	var send []batchEntry
	var replies []chan batchOutcome
	for range entries {
		if a := <-arrived; a.k >= 0 {
			send = append(send, entries[a.k])
			replies = append(replies, a.reply)
		}
	}
	// Store in item order, so that Seq follows it.
	order := make([]int, len(send))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return send[a].i - send[b].i })
	sorted := make([]batchEntry, len(send))
	for k, o := range order {
		sorted[k] = send[o]
	}
	res, err := m.storeChunk(ctx, sorted)
	for k, o := range order {
		if err != nil {
			replies[o] <- batchOutcome{err: scheduleError(strconv.Quote(send[o].rec.Kind), send[o].idemKey, err)}
		} else {
			replies[o] <- res[k]
		}
	}
	wg.Wait()
	return err
}

// batchOutcome is what ScheduleJob would return for one item.
type batchOutcome struct {
	inst *InstanceInfo
	err  error
}

// storeChunk stores the records of entries in one store call (see
// enqueueSplit) and returns each one's outcome; new instances wake local
// workers and reach the state-change handlers.
func (m *Manager) storeChunk(ctx context.Context, entries []batchEntry) ([]batchOutcome, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	recs := make([]*store.Instance, len(entries))
	for k, e := range entries {
		recs[k] = e.rec
	}
	res, errs, err := m.enqueueSplit(ctx, recs)
	if err != nil {
		return nil, err
	}
	out := make([]batchOutcome, len(entries))
	var fresh []int
	for k, e := range entries {
		if errs[k] != nil {
			out[k].err = fmt.Errorf("job: schedule %q: %w", e.rec.Kind, errs[k])
			continue
		}
		inst, isNew, err := m.scheduled(ctx, e.rec, res[k], e.idemKey)
		out[k] = batchOutcome{inst, err}
		if isNew {
			fresh = append(fresh, k)
		}
	}
	if len(fresh) > 0 {
		for _, k := range fresh {
			m.wakeFor(entries[k].rec.Queue)
			m.recordChanged(entries[k].j, entries[k].rec, store.Scheduled)
		}
	}
	return out, nil
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

// batchRand hands out bytes of crypto/rand, read 4 KiB at a time, to the
// new IDs of a ScheduleJobs call: uuid.NewV7 reads 16 bytes of
// crypto/rand for each ID, a system call's worth of work each time. The
// IDs are the same UUIDv7 (uuid.NewV7FromReader, with NewV7's time and
// sequence), and each byte serves one ID only.
type batchRand struct {
	buf [4096]byte
	off int // bytes of buf used; 0 before the first read fills it
	ok  bool
}

func (r *batchRand) Read(p []byte) (int, error) {
	if len(p) > len(r.buf) {
		return rand.Read(p)
	}
	if !r.ok || r.off+len(p) > len(r.buf) {
		_, _ = rand.Read(r.buf[:]) // never fails (see crypto/rand.Read)
		r.off, r.ok = 0, true
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}
