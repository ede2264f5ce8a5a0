package etcdstore

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Key layout, every key under the store's prefix P. Numbers in keys are
// fixed-width lower-case hex of big-endian uint64s, so byte order is numeric
// order; names (ids, queues, kinds) are path-escaped, so they never contain
// the "/" that separates key parts.
//
// Layout 3 (issue 34) writes the creation and finished indexes in
// batches, one key per transaction (and time bucket) instead of one per
// instance; it reads layout 2's keys beside its own (batches.go).
//
// Layout 2 (issue 18): an instance is a few keys, whatever its number of
// transitions. Its history lives inside its dynamic record (appended in
// the same put as the state change, the last maxHist records kept), and
// the only per-instance index is the creation index, written once.
//
//	P seq                              never written; the event feed reads revisions through it
//	P tk                               the ticket key: put, empty, by every Enqueue write, so a
//	                                   one-request Enqueue compares that none came after its
//	                                   ticket (enqueue_fast.go)
//	P i/<id>                           static record: what never changes after enqueue
//	P s/<id>                           dynamic record: state, attempt, lease, result, and the
//	                                   instance's history records (dynRec.Hist)
//	P r/<queue>/<lane>/<runAt><seq>    ready index: one key per Scheduled instance,
//	                                   lane = <prio>/z<kind and labels> (laneMark),
//	                                   prio = bit-inverted priority (highest first);
//	                                   value = a copy of the dynamic record
//	P qp/<queue>/<lane>                the lanes of a queue that hold instances (a claim
//	                                   ranges each one the claimer may take); put in the
//	                                   transaction that adds a ready key, deleted by a
//	                                   claim that finds the lane empty
//	P qk/<queue>                       a queue whose last lane marker was deleted (ListQueues)
//	P pq/<queue>                       present while the queue is paused
//	P c/<owner>/<claim seq>/<nonce><n> claim record: one per claim transaction, listing
//	                                   the attempts it took (claimRec); it is the running
//	                                   set and the owner index: Rescue reads the records
//	                                   whose lease ended, RescueNodes a dead owner's, and a
//	                                   repeated claim (same ClaimSeq) its own. Deleted by
//	                                   the owner once all its attempts ended, or by a
//	                                   rescuer that finds them ended (a rescuer rewrites
//	                                   it without those that ended)
//	P a/<lease>                        liveness key of one store handle, attached to its
//	                                   etcd lease: gone when the process is gone
//	P u/<unique key>                   unique key holder and expiry, attached to an etcd
//	                                   lease that outlives the expiry (garbage collection)
//	P icb/<bucket>+<nonce><n>          instances by creation time: one key per Enqueue
//	                                   transaction and 100 ms bucket, listing creation
//	                                   time, sequence number, kind and id of each, so a
//	                                   lookup by kind filters without reading records
//	                                   (created.go, batches.go)
//	P ic/<created><seq>                layout 2's creation index, one key per instance,
//	                                   value = <kind>/<id>: read and deleted, not written
//	P fb/<bucket>+<nonce><n>           finished instances by finish time (retention): one
//	                                   key per transaction and 100 ms bucket, listing id
//	                                   and finish time of each (finished.go)
//	P f/<finished>/<id>                layout 2's finished index, one key per instance:
//	                                   read and deleted, not written
//	P l/<id>/<time><uniq>              log records of one instance
//	P lt/<time>/<id>/<uniq>            logs by time (value = level digit + kind)
//	P lk/<kind>/<time>/<id>/<uniq>     logs of a kind by time (value = level digit)
//	P bad/<key>                        quarantined undecodable ready-index entries
//	P n/<node>                         node registry record (nodes.go)
//	P cs/<owner>                       the ClaimSeq of owner's last claim, on its etcd lease
//	P cn0, P cn/<time><nonce><n>       instance counts: folded, and one delta per transaction (inspect.go)
//	P cc                               the last cancel notice, "<attempt> <id>": put by a Cancel of a
//	                                   Processing attempt, watched by SubscribeCancels (cancels.go)
//
// Layout 1 (before issue 18) also wrote history keys (h/, ht/, hk/),
// state, kind and creation indexes (is/, isk/, ik/, ic/ with the id as
// value), a running set (p/), an owner index (no/) and per-attempt claim
// keys (cl/); this code does not read them (see doc/design.md on moving a
// deployment over).
type keys struct{ p string }

func esc(s string) string { return url.PathEscape(s) }

func unesc(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

const hexDigits = "0123456789abcdef"

// hex16 encodes v as 16 hex digits.
func hex16(v uint64) string {
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = hexDigits[v&15]
		v >>= 4
	}
	return string(b[:])
}

func parseHex16(s string) (uint64, bool) {
	if len(s) != 16 {
		return 0, false
	}
	var v uint64
	for i := 0; i < 16; i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// tn encodes a time as Unix nanoseconds; the zero time is 0.
func tn(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// nt decodes tn.
func nt(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// tkey orders times as unsigned keys (before 1970 sorts first).
func tkey(t time.Time) string { return hex16(uint64(tn(t)) ^ 1<<63) }

// tkeyAfter is the key of the first nanosecond after t.
func tkeyAfter(t time.Time) string { return hex16(uint64(tn(t)+1) ^ 1<<63) }

// pkey orders priorities highest first.
func pkey(prio int) string { return hex16(^(uint64(int64(prio)) ^ 1<<63)) }

// prefixEnd is the end of the range of keys that start with p.
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return "\x00"
}

func (k keys) seq() string             { return k.p + "seq" }
func (k keys) ticket() string          { return k.p + "tk" }
func (k keys) static(id string) string { return k.p + "i/" + esc(id) }
func (k keys) dyn(id string) string    { return k.p + "s/" + esc(id) }

// claimRecPrefix is the prefix of every claim record, claimRecOwner of
// owner's, claimRecSeq of those of owner's claim number seq.
func (k keys) claimRecPrefix() string            { return k.p + "c/" }
func (k keys) claimRecOwner(owner string) string { return k.claimRecPrefix() + esc(owner) + "/" }
func (k keys) claimRecSeq(owner string, seq uint64) string {
	return k.claimRecOwner(owner) + hex16(seq) + "/"
}
func (k keys) alive(lease int64) string { return k.p + "a/" + hex16(uint64(lease)) }
func (k keys) alivePrefix() string      { return k.p + "a/" }
func (k keys) unique(key string) string { return k.p + "u/" + esc(key) }
func (k keys) node(id string) string    { return k.p + "n/" + esc(id) }
func (k keys) nodePrefix() string       { return k.p + "n/" }

// claimSeqKey holds the ClaimSeq of owner's last claim (hex16), on the
// claiming handle's etcd lease.
func (k keys) claimSeqKey(owner string) string { return k.p + "cs/" + esc(owner) }
func (k keys) queuePrefix(q string) string     { return k.p + "r/" + esc(q) + "/" }
func (k keys) prioPrefix(q string, prio string) string {
	return k.queuePrefix(q) + prio + "/"
}
func (k keys) ready(d *dynRec) string {
	return k.prioPrefix(d.Queue, laneMark(d.Priority, d.Kind, d.Labels)) + tkey(nt(d.RunAt)) + hex16(d.Seq)
}

// legacyReady is d's ready key as stores before lanes wrote it; Cancel
// deletes it too, so no entry of before outlives its instance.
func (k keys) legacyReady(d *dynRec) string {
	return k.prioPrefix(d.Queue, pkey(d.Priority)) + tkey(nt(d.RunAt)) + hex16(d.Seq)
}
func (k keys) prioMarkPrefix(q string) string { return k.p + "qp/" + esc(q) + "/" }
func (k keys) prioMarkRoot() string           { return k.p + "qp/" }

// laneMarker is the marker key of d's lane.
func (k keys) laneMarker(d *dynRec) string {
	return k.prioMarkPrefix(d.Queue) + laneMark(d.Priority, d.Kind, d.Labels)
}

// known is present for a queue whose last lane marker was deleted, so
// ListQueues still lists it.
func (k keys) known(q string) string  { return k.p + "qk/" + esc(q) }
func (k keys) knownRoot() string      { return k.p + "qk/" }
func (k keys) paused(q string) string { return k.p + "pq/" + esc(q) }
func (k keys) pausedPrefix() string   { return k.p + "pq/" }

// laneMark names the lane of kind with the required labels at priority
// prio, as its marker (qp/<queue>/<mark>) and ready range
// (r/<queue>/<mark>/) name it: the priority key, "/z", then the kind and
// each label behind a NUL byte, path-escaped. The "z" sorts after every
// hex digit, so a lane's keys never fall in the ready range of a priority
// written before lanes (r/<queue>/<prio>/<hex>).
func laneMark(prio int, kind string, labels []string) string {
	l := kind
	for _, x := range labels {
		l += "\x00" + x
	}
	return pkey(prio) + "/z" + esc(l)
}

// parseLaneMark returns the kind and labels of a lane marker; ok is false
// for a priority marker written before lanes.
func parseLaneMark(mark string) (kind string, labels []string, ok bool) {
	i := strings.Index(mark, "/z")
	if i < 0 {
		return "", nil, false
	}
	parts := strings.Split(unesc(mark[i+2:]), "\x00")
	return parts[0], parts[1:], true
}

// byCreated is the layout 2 creation-index key of d (deleted with its
// instance; layout 3 writes batches, created.go).
func (k keys) byCreated(d *dynRec) string {
	return k.createdPrefix() + tkey(nt(d.Created)) + hex16(d.Seq)
}
func (k keys) createdPrefix() string { return k.p + "ic/" }

// parseCreatedVal splits a layout 2 creation-index value (<kind>/<id>,
// both escaped) into kind and id.
func parseCreatedVal(v []byte) (kind, id string, ok bool) {
	k, i, ok := strings.Cut(string(v), "/")
	if !ok {
		return "", "", false
	}
	return unesc(k), unesc(i), true
}
func (k keys) logPrefix(id string) string { return k.p + "l/" + esc(id) + "/" }
func (k keys) logKey(id string, t time.Time, uniq string) string {
	return k.logPrefix(id) + tkey(t) + uniq
}
func (k keys) logTime(t time.Time, id, uniq string) string {
	return k.p + "lt/" + tkey(t) + "/" + esc(id) + "/" + uniq
}
func (k keys) logKind(kind string, t time.Time, id, uniq string) string {
	return k.p + "lk/" + esc(kind) + "/" + tkey(t) + "/" + esc(id) + "/" + uniq
}

// staticRec is what never changes after enqueue (key i/<id>).
type staticRec struct {
	ID          string        `json:"id"`
	Kind        string        `json:"k"`
	Queue       string        `json:"q"`
	Args        []byte        `json:"a,omitempty"`
	Priority    int           `json:"p,omitempty"`
	MaxRetries  int           `json:"mr,omitempty"`
	Timeout     time.Duration `json:"to,omitempty"`
	UniqueKey   string        `json:"uk,omitempty"`
	UniqueUntil int64         `json:"uu,omitempty"`
	Seq         uint64        `json:"seq"`
	CreatedAt   int64         `json:"c"`
	Labels      []string      `json:"lb,omitempty"` // required labels, normalised; absent before lanes
	// Metadata is Instance.Metadata; absent when empty and in records of
	// versions before it.
	Metadata map[string]string `json:"md,omitempty"`
	// Parent, ShardIndex and ShardCount are Instance's shard fields;
	// absent for an instance that is not part of a sharded task.
	Parent     string `json:"sp,omitempty"`
	ShardIndex int    `json:"si,omitempty"`
	ShardCount int    `json:"sc,omitempty"`
	// Task is Instance.Task; absent for an instance that is not a
	// workflow task.
	Task *store.WorkflowTask `json:"wt,omitempty"`
}

// dynRec is an instance's changing part (key s/<id>, and a copy in the
// ready index). It repeats the static fields a transition needs, so state
// changes never read the static record (which holds the arguments).
type dynRec struct {
	State      store.State `json:"st"`
	Attempt    int         `json:"at,omitempty"`
	RunAt      int64       `json:"ra"`
	Owner      string      `json:"lo,omitempty"`
	LeaseUntil int64       `json:"lu,omitempty"`
	LeaseID    int64       `json:"li,omitempty"`
	Cancel     bool        `json:"cr,omitempty"`
	Updated    int64       `json:"up"`
	Finished   int64       `json:"fi,omitempty"`
	Result     []byte      `json:"re,omitempty"`
	Error      string      `json:"er,omitempty"`
	HSeq       uint64      `json:"hs"` // the last history record's sequence number
	// Hist is the instance's history, oldest first: the last maxHist
	// records (Seq tells how many came before). HN is how many of them the
	// write that stored this record appended: the event feed delivers
	// those.
	Hist []histEnt `json:"h,omitempty"`
	HN   int       `json:"hn,omitempty"`
	// Copies of static fields.
	ID         string   `json:"id"`
	Kind       string   `json:"k"`
	Queue      string   `json:"q"`
	Priority   int      `json:"p,omitempty"`
	MaxRetries int      `json:"mr,omitempty"`
	Seq        uint64   `json:"seq"`
	Created    int64    `json:"c"`
	UniqueKey  string   `json:"uk,omitempty"`
	Labels     []string `json:"lb,omitempty"` // as staticRec's: they name the lane
}

// claimRec is the value of a claim record (c/...): the attempts one claim
// transaction took, under which etcd lease and until when. Its owner
// writes it once and deletes it; a rescuer may rewrite it without the
// attempts that ended (guarded on its revision). Renew moves the deadlines
// in the dynamic records, which stay the authority (see Rescue).
type claimRec struct {
	LeaseID    int64    `json:"li"`
	LeaseUntil int64    `json:"lu"`
	IDs        []string `json:"ids"`
	Attempts   []int    `json:"at"`
}

// ownerOf returns the owner named by claim record key key.
func (k keys) ownerOf(key string) string {
	rest := key[len(k.claimRecPrefix()):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return unesc(rest[:i])
	}
	return ""
}

// uniqRec is the value of a unique key (u/<key>).
type uniqRec struct {
	ID    string `json:"id"`
	Until int64  `json:"u"`
}

// maxHist is how many history records an instance keeps inline: the
// newest ones. A transition appends one (an enqueue two), so only an
// instance retried some thirty times loses its oldest attempts' records.
const maxHist = 64

// histEnt is one history record inside a dynamic record.
type histEnt struct {
	State   store.State `json:"st"`
	Attempt int         `json:"at,omitempty"`
	Time    int64       `json:"t"`
	Node    string      `json:"n,omitempty"`
	Error   string      `json:"er,omitempty"`
	Result  []byte      `json:"re,omitempty"`
	Seq     uint64      `json:"seq"`
}

// next returns a copy of d to change for a new write: it shares no history
// slice with d (an append never writes into d's) and has appended nothing
// yet (HN 0).
func (d *dynRec) next() dynRec {
	e := *d
	e.Hist = slices.Clip(d.Hist)
	e.HN = 0
	return e
}

// record is h as a store.HistoryRecord of instance d.
func (d *dynRec) record(h *histEnt) *store.HistoryRecord {
	return &store.HistoryRecord{
		InstanceID: d.ID, Kind: d.Kind, State: h.State, Attempt: h.Attempt, Time: nt(h.Time),
		Node: h.Node, Error: h.Error, Result: h.Result, Seq: h.Seq,
	}
}

// appended returns the history records the write that stored d appended.
func (d *dynRec) appended() []histEnt {
	n := min(d.HN, len(d.Hist))
	return d.Hist[len(d.Hist)-n:]
}

// logRec is a stored log record (l/<id>/...).
type logRec struct {
	ID      string         `json:"id"`
	Kind    string         `json:"k"`
	Attempt int            `json:"at,omitempty"`
	Level   store.LogLevel `json:"lv"`
	Time    int64          `json:"t"`
	Node    string         `json:"n,omitempty"`
	Message string         `json:"m"`
	Pos     int            `json:"pos,omitempty"` // position in its write, for Seq
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain types above: cannot happen.
		panic(fmt.Sprintf("etcdstore: encode %T: %v", v, err))
	}
	return string(b)
}

// decode unmarshals a stored value, naming the key on failure.
func decode(key string, val []byte, v any) error {
	if err := json.Unmarshal(val, v); err != nil {
		return fmt.Errorf("%w: etcd key %q: %v", store.ErrCorrupt, key, err)
	}
	return nil
}

func decodeDyn(key string, val []byte) (*dynRec, error) {
	d := new(dynRec)
	if err := decode(key, val, d); err != nil {
		return nil, err
	}
	if !d.State.Valid() || d.ID == "" || d.Queue == "" {
		return nil, fmt.Errorf("%w: etcd key %q: dynamic record without a valid state, id or queue", store.ErrCorrupt, key)
	}
	return d, nil
}

func decodeStatic(key string, val []byte) (*staticRec, error) {
	s := new(staticRec)
	if err := decode(key, val, s); err != nil {
		return nil, err
	}
	if s.ID == "" {
		return nil, fmt.Errorf("%w: etcd key %q: static record without an id", store.ErrCorrupt, key)
	}
	return s, nil
}

func newRecords(in *store.Instance) (*staticRec, *dynRec) {
	st := &staticRec{
		ID: in.ID, Kind: in.Kind, Queue: in.Queue, Args: in.Args, Priority: in.Priority,
		MaxRetries: in.MaxRetries, Timeout: in.Timeout, UniqueKey: in.UniqueKey,
		UniqueUntil: tn(in.UniqueUntil), Seq: in.Seq, CreatedAt: tn(in.CreatedAt),
		Labels: store.NormLabels(in.Labels), Metadata: store.CloneMetadata(in.Metadata),
		Parent: in.Parent, ShardIndex: in.ShardIndex, ShardCount: in.ShardCount,
		Task: in.Task.Clone(),
	}
	d := &dynRec{
		State: store.Scheduled, RunAt: tn(in.RunAt), ID: in.ID, Kind: in.Kind, Queue: in.Queue,
		Priority: in.Priority, MaxRetries: in.MaxRetries, Seq: in.Seq, Created: tn(in.CreatedAt),
		UniqueKey: in.UniqueKey, Labels: st.Labels,
	}
	return st, d
}

// instance joins the two halves of a record; st may be nil when only the
// dynamic half is at hand.
func instance(st *staticRec, d *dynRec) *store.Instance {
	in := &store.Instance{
		ID: d.ID, Kind: d.Kind, Queue: d.Queue, Priority: d.Priority, RunAt: nt(d.RunAt),
		State: d.State, Attempt: d.Attempt, MaxRetries: d.MaxRetries, LeaseOwner: d.Owner,
		LeaseUntil: nt(d.LeaseUntil), CancelRequested: d.Cancel, Seq: d.Seq,
		CreatedAt: nt(d.Created), UpdatedAt: nt(d.Updated), FinishedAt: nt(d.Finished),
		Result: d.Result, Error: d.Error, UniqueKey: d.UniqueKey,
	}
	if len(d.Labels) > 0 {
		in.Labels = append([]string(nil), d.Labels...)
	}
	if st != nil {
		in.Args = st.Args
		in.Timeout = st.Timeout
		in.UniqueUntil = nt(st.UniqueUntil)
		in.Metadata = store.CloneMetadata(st.Metadata)
		in.Parent, in.ShardIndex, in.ShardCount = st.Parent, st.ShardIndex, st.ShardCount
		in.Task = st.Task.Clone()
	}
	return in
}
