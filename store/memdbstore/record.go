package memdbstore

import (
	"math"
	"time"

	"github.com/jobkit/job/store"
)

// rec is the stored form of one instance, kept small: times as Unix
// nanoseconds (0 for the zero time), kind, queue and node names interned,
// fields that only some instances need behind x, and the Created and
// Scheduled history records implied by enqAt and enqNode instead of stored.
//
// A rec in the indexes is never changed: every update puts a changed copy
// (see clone), so readers of older snapshots keep what they saw.
type rec struct {
	id         string
	kind       string
	queue      string
	leaseOwner string
	enqNode    string // names the enqueuer in the Created and Scheduled records
	args       []byte
	x          *extra
	// hist holds the transitions after Scheduled. It is append-only
	// within one version chain: a copy appends after its last element,
	// which no older version can see (their length ends before it).
	// Pruning history replaces the slice.
	hist       []hist
	priority   int64
	timeout    time.Duration
	seq        uint64 // the Created record has seq+1, the Scheduled one seq+2
	runAt      int64
	createdAt  int64
	updatedAt  int64
	leaseUntil int64
	enqAt      int64
	qid        uint32 // the queue's interned number, the first part of the ready key
	attempt    int32
	maxRetries int32
	state      store.State
	cancelReq  bool
	enqPruned  uint8 // bit 0: the Created record is pruned; bit 1: the Scheduled one
}

// extra holds what only some instances have.
type extra struct {
	uniqueKey  string
	uniqueTill int64
	finishedAt int64
	result     []byte
	err        string
}

// hist is one history record of the instance that holds it.
type hist struct {
	state   store.State
	attempt int32
	t       int64
	seq     uint64
	node    string
	err     string
	result  []byte
}

// clone returns a shallow copy for an update; byte slices, x and history
// are shared (never written in place: use mutX and addHist).
func (r *rec) clone() *rec {
	c := *r
	return &c
}

// mutX returns r's own copy of its extra fields, to change.
func (r *rec) mutX() *extra {
	var e extra
	if r.x != nil {
		e = *r.x
	}
	r.x = &e
	return r.x
}

func (r *rec) uniqueKey() string {
	if r.x == nil {
		return ""
	}
	return r.x.uniqueKey
}

func (r *rec) finishedAt() int64 {
	if r.x == nil {
		return 0
	}
	return r.x.finishedAt
}

// setOutcome sets the error, result and finish time of the latest attempt.
func (r *rec) setOutcome(err string, result []byte, finishedAt int64) {
	if r.x == nil && err == "" && result == nil && finishedAt == 0 {
		return
	}
	x := r.mutX()
	x.err, x.result, x.finishedAt = err, result, finishedAt
}

// addHist appends a history record to r (a fresh copy).
func (r *rec) addHist(h hist) {
	r.hist = append(r.hist, h)
}

// eachHist calls fn with every history record of r, in order.
func (r *rec) eachHist(fn func(h *hist)) {
	if r.enqPruned&1 == 0 {
		fn(&hist{state: store.Created, t: r.enqAt, seq: r.seq + 1, node: r.enqNode})
	}
	if r.enqPruned&2 == 0 {
		fn(&hist{state: store.Scheduled, t: r.enqAt, seq: r.seq + 2, node: r.enqNode})
	}
	for i := range r.hist {
		fn(&r.hist[i])
	}
}

// histLen is how many history records r has.
func (r *rec) histLen() int {
	n := len(r.hist)
	if r.enqPruned&1 == 0 {
		n++
	}
	if r.enqPruned&2 == 0 {
		n++
	}
	return n
}

func (r *rec) retriesLeft() bool { return r.maxRetries < 0 || r.attempt <= r.maxRetries }

// toInstance returns the record as a store.Instance the caller owns.
func (r *rec) toInstance() *store.Instance {
	in := &store.Instance{
		ID:              r.id,
		Kind:            r.kind,
		Queue:           r.queue,
		Args:            cloneBytes(r.args),
		Priority:        int(r.priority),
		RunAt:           fromNanos(r.runAt),
		State:           r.state,
		Attempt:         int(r.attempt),
		MaxRetries:      int(r.maxRetries),
		Timeout:         r.timeout,
		LeaseOwner:      r.leaseOwner,
		LeaseUntil:      fromNanos(r.leaseUntil),
		CancelRequested: r.cancelReq,
		Seq:             r.seq,
		CreatedAt:       fromNanos(r.createdAt),
		UpdatedAt:       fromNanos(r.updatedAt),
	}
	if x := r.x; x != nil {
		in.UniqueKey = x.uniqueKey
		in.UniqueUntil = fromNanos(x.uniqueTill)
		in.FinishedAt = fromNanos(x.finishedAt)
		in.Result = cloneBytes(x.result)
		in.Error = x.err
	}
	return in
}

func (r *rec) historyRecord(h *hist) *store.HistoryRecord {
	return &store.HistoryRecord{
		InstanceID: r.id,
		Kind:       r.kind,
		State:      h.state,
		Attempt:    int(h.attempt),
		Time:       fromNanos(h.t),
		Node:       h.node,
		Error:      h.err,
		Result:     cloneBytes(h.result),
		Seq:        h.seq,
	}
}

// clamp32 narrows n to int32 (attempt counts and retry limits).
func clamp32(n int) int32 { return int32(max(min(n, math.MaxInt32), math.MinInt32)) }

// logRow is one stored log record.
type logRow struct {
	seq        uint64
	instanceID string
	kind       string
	attempt    int
	level      store.LogLevel
	t          int64
	node       string
	msg        string
}

func (l *logRow) toRecord() *store.LogRecord {
	return &store.LogRecord{
		InstanceID: l.instanceID,
		Kind:       l.kind,
		Attempt:    l.attempt,
		Level:      l.level,
		Time:       fromNanos(l.t),
		Node:       l.node,
		Message:    l.msg,
		Seq:        l.seq,
	}
}

// uniqueRow records which instance holds a unique key, and until when.
type uniqueRow struct {
	id    string
	until int64
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// nanos maps a time to Unix nanoseconds, the zero time to 0. Times outside
// the years 1678–2262 are clamped (the int64 range).
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	if t.Year() < 1678 {
		return math.MinInt64 + 1
	}
	if t.Year() > 2261 {
		return math.MaxInt64
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// The indexes' orders. Each ends in the store-wide sequence number, so no
// two records are equal in any of them.

func lessID(a, b *rec) bool { return a.id < b.id }

func lessCreated(a, b *rec) bool {
	if a.createdAt != b.createdAt {
		return a.createdAt < b.createdAt
	}
	return a.seq < b.seq
}

// lessReady orders by queue, priority descending, RunAt, Seq.
func lessReady(a, b *rec) bool {
	switch {
	case a.qid != b.qid:
		return a.qid < b.qid
	case a.priority != b.priority:
		return a.priority > b.priority
	case a.runAt != b.runAt:
		return a.runAt < b.runAt
	}
	return a.seq < b.seq
}

func lessLease(a, b *rec) bool {
	if a.leaseUntil != b.leaseUntil {
		return a.leaseUntil < b.leaseUntil
	}
	return a.seq < b.seq
}

func lessFinished(a, b *rec) bool {
	if fa, fb := a.finishedAt(), b.finishedAt(); fa != fb {
		return fa < fb
	}
	return a.seq < b.seq
}

func lessLogTime(a, b *logRow) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}

func lessLogInst(a, b *logRow) bool {
	if a.instanceID != b.instanceID {
		return a.instanceID < b.instanceID
	}
	return a.seq < b.seq
}
