package etcdstore

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Key layout, every key under the store's prefix P. Numbers in keys are
// fixed-width lower-case hex of big-endian uint64s, so byte order is numeric
// order; names (ids, queues, kinds) are path-escaped, so they never contain
// the "/" that separates key parts.
//
//	P seq                              not written any more (sequence numbers come from the
//	                                   revision R an Enqueue reads: Seq = R<<24 | salt<<16 | i);
//	                                   the event feed reads revisions through it
//	P i/<id>                           static record: what never changes after enqueue
//	P s/<id>                           dynamic record: state, attempt, lease, result
//	P r/<queue>/<lane>/<runAt><seq>    ready index: one key per Scheduled instance,
//	                                   lane = <prio>/z<kind and labels> (laneMark),
//	                                   prio = bit-inverted priority (highest first);
//	                                   value = a copy of the dynamic record
//	                                   (r/<queue>/<prio>/<runAt><seq>: written
//	                                   before lanes, still read)
//	P qp/<queue>/<lane>                the lanes of a queue that hold instances (a claim
//	                                   ranges each one the claimer may take); put in the
//	                                   transaction that adds a ready key, deleted by a
//	                                   claim that finds the lane empty; qp/<queue>/<prio>
//	                                   before lanes
//	P qk/<queue>                       a queue whose last lane marker was deleted (ListQueues)
//	P pq/<queue>                       present while the queue is paused
//	P p/<id>                           running set: one key per Processing instance,
//	                                   value = its etcd lease and lease deadline
//	P a/<lease>                        liveness key of one store handle, attached to its
//	                                   etcd lease: gone when the process is gone
//	P u/<unique key>                   unique key holder and expiry, attached to an etcd
//	                                   lease that outlives the expiry (garbage collection)
//	P ic/<created><seq>                instances by creation time (value = id)
//	P ik/<kind>/<created><seq>         instances of a kind by creation time
//	P is/<state>/<created><seq>        instances in a state by creation time
//	P isk/<kind>/<state>/<created><seq> instances of a kind in a state
//	P f/<finished>/<id>                finished instances by finish time (retention)
//	P h/<id>/<hseq>                    history records of one instance, in order
//	P ht/<time>/<id>/<hseq>            history by time (value = state digit + kind)
//	P hk/<kind>/<time>/<id>/<hseq>     history of a kind by time (value = state digit)
//	P l/<id>/<time><uniq>              log records of one instance
//	P lt/<time>/<id>/<uniq>            logs by time (value = level digit + kind)
//	P lk/<kind>/<time>/<id>/<uniq>     logs of a kind by time (value = level digit)
//	P bad/<key>                        quarantined undecodable ready-index entries
//	P n/<node>                         node registry record (nodes.go)
//	P no/<owner>/<id>                  running attempts by owner: put by a claim, deleted
//	                                   with p/<id>; RescueNodes reads a dead owner's
//	                                   keys to rescue its attempts
//	P cn0, P cn/<time><nonce><n>       instance counts: folded, and one delta per transaction (inspect.go)
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
func (k keys) static(id string) string { return k.p + "i/" + esc(id) }
func (k keys) dyn(id string) string    { return k.p + "s/" + esc(id) }
func (k keys) running(id string) string {
	return k.p + "p/" + esc(id)
}
func (k keys) runningPrefix() string    { return k.p + "p/" }
func (k keys) alive(lease int64) string { return k.p + "a/" + hex16(uint64(lease)) }
func (k keys) alivePrefix() string      { return k.p + "a/" }
func (k keys) unique(key string) string { return k.p + "u/" + esc(key) }
func (k keys) node(id string) string    { return k.p + "n/" + esc(id) }
func (k keys) nodePrefix() string       { return k.p + "n/" }
func (k keys) ownedPrefix(owner string) string {
	return k.p + "no/" + esc(owner) + "/"
}
func (k keys) ownedBy(owner, id string) string { return k.ownedPrefix(owner) + esc(id) }

// claimSeqKey holds the ClaimSeq of owner's last claim (hex16), and
// claimedPrefix the attempts that claim took (cl/<owner>/<id> -> hex16
// seq + attempt); both live on the claiming handle's etcd lease.
func (k keys) claimSeqKey(owner string) string   { return k.p + "cs/" + esc(owner) }
func (k keys) claimedPrefix(owner string) string { return k.p + "cl/" + esc(owner) + "/" }
func (k keys) queuePrefix(q string) string       { return k.p + "r/" + esc(q) + "/" }
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
func (k keys) byCreated(d *dynRec) string {
	return k.p + "ic/" + tkey(nt(d.Created)) + hex16(d.Seq)
}
func (k keys) byState(st store.State, d *dynRec) string {
	return k.p + "is/" + string(rune('0'+st)) + "/" + tkey(nt(d.Created)) + hex16(d.Seq)
}
func (k keys) byKindState(st store.State, d *dynRec) string {
	return k.p + "isk/" + esc(d.Kind) + "/" + string(rune('0'+st)) + "/" + tkey(nt(d.Created)) + hex16(d.Seq)
}
func (k keys) byKind(d *dynRec) string {
	return k.p + "ik/" + esc(d.Kind) + "/" + tkey(nt(d.Created)) + hex16(d.Seq)
}
func (k keys) finished(d *dynRec, id string) string {
	return k.p + "f/" + tkey(nt(d.Finished)) + "/" + esc(id)
}
func (k keys) histPrefix(id string) string { return k.p + "h/" + esc(id) + "/" }
func (k keys) hist(id string, hseq uint64) string {
	return k.histPrefix(id) + hex16(hseq)
}
func (k keys) histTime(t time.Time, id string, hseq uint64) string {
	return k.p + "ht/" + tkey(t) + "/" + esc(id) + "/" + hex16(hseq)
}
func (k keys) histKind(kind string, t time.Time, id string, hseq uint64) string {
	return k.p + "hk/" + esc(kind) + "/" + tkey(t) + "/" + esc(id) + "/" + hex16(hseq)
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

// runRec is the value of a running-set key (p/<id>).
type runRec struct {
	LeaseID    int64 `json:"li"`
	LeaseUntil int64 `json:"lu"`
}

// uniqRec is the value of a unique key (u/<key>).
type uniqRec struct {
	ID    string `json:"id"`
	Until int64  `json:"u"`
}

// histRec is a stored history record (h/<id>/<hseq>).
type histRec struct {
	ID      string      `json:"id"`
	Kind    string      `json:"k"`
	Queue   string      `json:"q,omitempty"` // for the event feed; absent in records of older versions
	State   store.State `json:"st"`
	Attempt int         `json:"at,omitempty"`
	Time    int64       `json:"t"`
	Node    string      `json:"n,omitempty"`
	Error   string      `json:"er,omitempty"`
	Result  []byte      `json:"re,omitempty"`
	Seq     uint64      `json:"seq"`
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
	}
	return in
}

func (h *histRec) record() *store.HistoryRecord {
	return &store.HistoryRecord{
		InstanceID: h.ID, Kind: h.Kind, State: h.State, Attempt: h.Attempt, Time: nt(h.Time),
		Node: h.Node, Error: h.Error, Result: h.Result, Seq: h.Seq,
	}
}
