package memdbstore

import (
	"math"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// rec is the stored form of one instance, kept small: 136 bytes, plus one
// allocation for its ID and arguments. Times are Unix nanoseconds (0 for
// the zero time); kind, queue and node names are numbers in the store's
// name table; what only some instances need (a unique key, an outcome,
// the history after Scheduled) is behind x; the Created and Scheduled
// history records are implied by enqAt and enqNode instead of stored.
//
// A rec in the indexes is never changed: every update puts a changed copy
// (see clone), so readers of older snapshots keep what they saw.
type rec struct {
	data       string // the ID, then the arguments
	x          *extra
	priority   int64
	timeout    time.Duration
	seq        uint64 // the Created record has seq+1, the Scheduled one seq+2
	runAt      int64
	createdAt  int64
	updatedAt  int64
	leaseUntil int64
	enqAt      int64
	idLen      uint32
	kind       name
	lane       name // the kind and the labels it requires (see laneName)
	qid        name // the queue, the first part of the ready order
	leaseOwner name
	enqNode    name // the enqueuer, in the Created and Scheduled records
	attempt    int32
	maxRetries int32
	state      store.State
	cancelReq  bool
	enqPruned  uint8 // bit 0: the Created record is pruned; bit 1: the Scheduled one
	ownX       bool  // x is this version's own copy (set by mutX, cleared by clone)
}

// name is a kind, queue or node name's number in the store's name table;
// 0 is the empty name.
type name uint32

// newRec returns a record holding id and args in one allocation.
func newRec(id string, args []byte) *rec {
	var b strings.Builder
	b.Grow(len(id) + len(args))
	b.WriteString(id)
	b.Write(args)
	return &rec{data: b.String(), idLen: uint32(len(id))}
}

func (r *rec) id() string { return r.data[:r.idLen] }

// args returns a copy of the arguments (nil when there are none).
func (r *rec) args() []byte {
	if int(r.idLen) == len(r.data) {
		return nil
	}
	return []byte(r.data[r.idLen:])
}

// extra holds what only some instances have.
type extra struct {
	// hist holds the transitions after Scheduled. It is append-only
	// within one version chain: a copy appends after its last element,
	// which no older version can see (their length ends before it).
	// Pruning history replaces the slice.
	hist       []hist
	uniqueKey  string
	uniqueTill int64
	finishedAt int64
	result     []byte
	err        string
	meta       map[string]string // Instance.Metadata: never changed after enqueue
	// parent, shardIndex and shardCount are Instance's shard fields:
	// never changed after enqueue.
	parent     string
	shardIndex int32
	shardCount int32
	// task is Instance.Task: never changed after enqueue (shared by
	// copies of the extra fields, cloned on every read).
	task *store.WorkflowTask
	// limitKey is Instance.LimitKey: never changed after enqueue.
	limitKey string
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
	c.ownX = false
	return &c
}

// mutX returns r's own copy of its extra fields, to change.
func (r *rec) mutX() *extra {
	if r.ownX {
		return r.x
	}
	var e extra
	if r.x != nil {
		e = *r.x
	}
	r.x, r.ownX = &e, true
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

func (r *rec) hist() []hist {
	if r.x == nil {
		return nil
	}
	return r.x.hist
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
	x := r.mutX()
	x.hist = append(x.hist, h)
}

// eachHist calls fn with every history record of r, in order; names is the
// store's name table.
func (r *rec) eachHist(names []string, fn func(h *hist)) {
	if r.enqPruned&1 == 0 {
		fn(&hist{state: store.Created, t: r.enqAt, seq: r.seq + 1, node: names[r.enqNode]})
	}
	if r.enqPruned&2 == 0 {
		fn(&hist{state: store.Scheduled, t: r.enqAt, seq: r.seq + 2, node: names[r.enqNode]})
	}
	hs := r.hist()
	for i := range hs {
		fn(&hs[i])
	}
}

// histLen is how many history records r has.
func (r *rec) histLen() int {
	n := len(r.hist())
	if r.enqPruned&1 == 0 {
		n++
	}
	if r.enqPruned&2 == 0 {
		n++
	}
	return n
}

func (r *rec) retriesLeft() bool { return r.maxRetries < 0 || r.attempt <= r.maxRetries }

// toInstance returns the record as a store.Instance the caller owns;
// names is the store's name table.
func (r *rec) toInstance(names []string) *store.Instance {
	in := &store.Instance{
		ID:              r.id(),
		Kind:            names[r.kind],
		Queue:           names[r.qid],
		Args:            r.args(),
		Priority:        int(r.priority),
		RunAt:           fromNanos(r.runAt),
		State:           r.state,
		Attempt:         int(r.attempt),
		MaxRetries:      int(r.maxRetries),
		Timeout:         r.timeout,
		LeaseOwner:      names[r.leaseOwner],
		LeaseUntil:      fromNanos(r.leaseUntil),
		CancelRequested: r.cancelReq,
		Seq:             r.seq,
		CreatedAt:       fromNanos(r.createdAt),
		UpdatedAt:       fromNanos(r.updatedAt),
	}
	if r.lane != r.kind {
		in.Labels = laneLabels(names[r.lane])
	}
	if x := r.x; x != nil {
		in.UniqueKey = x.uniqueKey
		in.UniqueUntil = fromNanos(x.uniqueTill)
		in.FinishedAt = fromNanos(x.finishedAt)
		in.Result = cloneBytes(x.result)
		in.Error = x.err
		in.Metadata = store.CloneMetadata(x.meta)
		in.Parent, in.ShardIndex, in.ShardCount = x.parent, int(x.shardIndex), int(x.shardCount)
		in.Task = x.task.Clone()
		in.LimitKey = x.limitKey
	}
	return in
}

func (r *rec) historyRecord(names []string, h *hist) *store.HistoryRecord {
	return &store.HistoryRecord{
		InstanceID: r.id(),
		Kind:       names[r.kind],
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

func lessID(a, b *rec) bool { return a.id() < b.id() }

func lessCreated(a, b *rec) bool {
	if a.createdAt != b.createdAt {
		return a.createdAt < b.createdAt
	}
	return a.seq < b.seq
}

// lessReady orders by queue, priority descending, lane, RunAt, Seq.
func lessReady(a, b *rec) bool {
	switch {
	case a.qid != b.qid:
		return a.qid < b.qid
	case a.priority != b.priority:
		return a.priority > b.priority
	case a.lane != b.lane:
		return a.lane < b.lane
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

// lessOwned orders running attempts by owner, then Seq.
func lessOwned(a, b *rec) bool {
	if a.leaseOwner != b.leaseOwner {
		return a.leaseOwner < b.leaseOwner
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
