package memdbstore

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/jobkit/job/store"
)

// rec is the stored form of one instance: times as Unix nanoseconds (0 for
// the zero time), kind, queue and node names interned, and the instance's
// history inline. A rec in the database is never changed: every update
// inserts a changed copy (see clone), so readers of older snapshots keep
// what they saw.
type rec struct {
	id         string
	kind       string
	queue      string
	qid        uint32 // the queue's interned number, the first key part of the ready index
	state      store.State
	cancelReq  bool
	priority   int
	attempt    int
	maxRetries int
	timeout    time.Duration
	seq        uint64
	runAt      int64
	createdAt  int64
	updatedAt  int64
	finishedAt int64
	leaseUntil int64
	leaseOwner string
	uniqueKey  string
	uniqueTill int64
	args       []byte
	result     []byte
	err        string
	// hist is append-only within one version chain: a copy appends after
	// its last element, which no older version can see (their length ends
	// before it). Pruning history replaces the slice.
	hist []hist
}

// hist is one history record of the instance that holds it.
type hist struct {
	state   store.State
	attempt int
	t       int64
	seq     uint64
	node    string
	err     string
	result  []byte
}

// clone returns a shallow copy for an update; byte slices and history are
// shared (never written in place).
func (r *rec) clone() *rec {
	c := *r
	return &c
}

// addHist appends a history record to r (a fresh copy).
func (r *rec) addHist(h hist) {
	r.hist = append(r.hist, h)
}

func (r *rec) retriesLeft() bool { return r.maxRetries < 0 || r.attempt <= r.maxRetries }

// toInstance returns the record as a store.Instance the caller owns.
func (r *rec) toInstance() *store.Instance {
	return &store.Instance{
		ID:              r.id,
		Kind:            r.kind,
		Queue:           r.queue,
		Args:            cloneBytes(r.args),
		Priority:        r.priority,
		RunAt:           fromNanos(r.runAt),
		State:           r.state,
		Attempt:         r.attempt,
		MaxRetries:      r.maxRetries,
		Timeout:         r.timeout,
		UniqueKey:       r.uniqueKey,
		UniqueUntil:     fromNanos(r.uniqueTill),
		LeaseOwner:      r.leaseOwner,
		LeaseUntil:      fromNanos(r.leaseUntil),
		CancelRequested: r.cancelReq,
		Seq:             r.seq,
		CreatedAt:       fromNanos(r.createdAt),
		UpdatedAt:       fromNanos(r.updatedAt),
		FinishedAt:      fromNanos(r.finishedAt),
		Result:          cloneBytes(r.result),
		Error:           r.err,
	}
}

func (r *rec) historyRecord(h *hist) *store.HistoryRecord {
	return &store.HistoryRecord{
		InstanceID: r.id,
		Kind:       r.kind,
		State:      h.state,
		Attempt:    h.attempt,
		Time:       fromNanos(h.t),
		Node:       h.node,
		Error:      h.err,
		Result:     cloneBytes(h.result),
		Seq:        h.seq,
	}
}

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
	key   string
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

// Index keys are fixed-width big-endian bytes, so byte order is the order
// the queries want and the radix trees stay shallow.

// sortable maps an int64 to a uint64 with the same order.
func sortable(n int64) uint64 { return uint64(n) ^ (1 << 63) }

// prioKey maps a priority to 4 bytes that sort highest priority first.
func prioKey(p int) uint32 {
	p32 := int32(max(min(p, math.MaxInt32), math.MinInt32))
	return ^(uint32(p32) ^ (1 << 31))
}

// readyKey is (queue, priority descending, runAt, seq): 24 bytes.
func readyKey(qid, prio uint32, runAt int64, seq uint64) []byte {
	k := make([]byte, 24)
	binary.BigEndian.PutUint32(k, qid)
	binary.BigEndian.PutUint32(k[4:], prio)
	binary.BigEndian.PutUint64(k[8:], sortable(runAt))
	binary.BigEndian.PutUint64(k[16:], seq)
	return k
}

// timeSeqKey is (time, seq): 16 bytes.
func timeSeqKey(t int64, seq uint64) []byte {
	k := make([]byte, 16)
	binary.BigEndian.PutUint64(k, sortable(t))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
}

// instLogKey is (instance ID, 0, seq).
func instLogKey(id string, seq uint64) []byte {
	k := make([]byte, 0, len(id)+9)
	k = append(k, id...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// keyIndexer is a go-memdb indexer whose lookups take the raw key bytes
// (or a string) as their one argument, and whose objects give theirs
// through key (false: not in this index).
type keyIndexer struct {
	key func(obj any) (bool, []byte)
}

func (x keyIndexer) FromObject(obj any) (bool, []byte, error) {
	ok, k := x.key(obj)
	return ok, k, nil
}

func (x keyIndexer) FromArgs(args ...any) ([]byte, error) {
	switch a := args[0].(type) {
	case []byte:
		return a, nil
	case string:
		return []byte(a), nil
	}
	panic("memdbstore: index argument must be []byte or string")
}

// PrefixFromArgs lets Get(table, index+"_prefix", prefix) iterate a prefix.
func (x keyIndexer) PrefixFromArgs(args ...any) ([]byte, error) { return x.FromArgs(args...) }
