package redisscript

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/jobkit/job/store"
)

// Records are MessagePack, which the scripts read and write with Lua's
// cmsgpack; the Go side packs and unpacks them with
// github.com/vmihailenco/msgpack/v5, whose compact forms are the ones
// cmsgpack writes (an integer in its smallest form, signed only when
// negative; a string as str), so a spec packed here is byte for byte what
// cmsgpack packs for the same values. Records are read field by field in
// the layout of lua/lib.lua: a value of another type than the layout's
// (nil, a boolean, a map, an extension, a string for a number or the
// reverse), a number that is not an integer, a length past the end of the
// record or bytes left over make the record undecodable.

var errMsgpack = errors.New("not a record")

// packer packs the values of one record. Its encoder writes to a
// bytes.Buffer, whose writes do not fail, so its errors are not checked.
type packer struct {
	buf bytes.Buffer
	e   *msgpack.Encoder
}

var packers = sync.Pool{New: func() any {
	p := &packer{}
	p.e = msgpack.NewEncoder(&p.buf)
	return p
}}

func getPacker() *packer {
	p := packers.Get().(*packer)
	p.buf.Reset()
	return p
}

// record returns what p packed and puts p back in the pool, unless a
// large record grew its buffer.
func (p *packer) record() string {
	s := p.buf.String()
	if p.buf.Cap() <= 64<<10 {
		packers.Put(p)
	}
	return s
}

func (p *packer) int(v int64)      { _ = p.e.EncodeInt(v) }
func (p *packer) str(s string)     { _ = p.e.EncodeString(s) }
func (p *packer) time(t time.Time) { p.int(Micros(t)) }

// unpacker reads the values of one record in order; the first value that
// does not fit sets err, and every later read returns a zero value.
type unpacker struct {
	r   strings.Reader
	d   *msgpack.Decoder
	tmp []byte
	err error
}

var unpackers = sync.Pool{New: func() any {
	u := &unpacker{}
	u.d = msgpack.NewDecoder(&u.r) // a strings.Reader is read as is, unbuffered
	return u
}}

func newUnpacker(raw string) *unpacker {
	u := unpackers.Get().(*unpacker)
	u.r.Reset(raw)
	u.err = nil
	return u
}

// release puts u back in the pool, unless a large string grew its buffer.
func (u *unpacker) release() {
	u.r.Reset("")
	if cap(u.tmp) <= 64<<10 {
		unpackers.Put(u)
	}
}

// more tells whether values are left to read.
func (u *unpacker) more() bool { return u.err == nil && u.r.Len() > 0 }

// end tells whether every value was read, and fitted.
func (u *unpacker) end() bool { return u.err == nil && u.r.Len() == 0 }

func (u *unpacker) fail() { u.err = errMsgpack }

// peek returns the code of the next value.
func (u *unpacker) peek() byte {
	if u.err != nil {
		return msgpcode.Nil
	}
	c, err := u.d.PeekCode()
	if err != nil {
		u.fail()
		return msgpcode.Nil
	}
	return c
}

// int reads an integer. cmsgpack writes a Lua number that is not an
// integer as a float; one that is integral is still taken.
func (u *unpacker) int() int64 {
	switch c := u.peek(); {
	case u.err != nil:
	case c == msgpcode.Nil:
		u.fail() // DecodeInt64 would read nil as 0
	case c == msgpcode.Float || c == msgpcode.Double:
		f, err := u.d.DecodeFloat64()
		if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			u.fail()
			return 0
		}
		return int64(f)
	default:
		n, err := u.d.DecodeInt64()
		if err != nil {
			u.fail()
		}
		return n
	}
	return 0
}

// raw reads a string (str or bin) into u.tmp, valid until the next read.
func (u *unpacker) raw() []byte {
	if c := u.peek(); u.err != nil || !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		u.fail() // nil included: the library reads it as ""
		return nil
	}
	n, err := u.d.DecodeBytesLen()
	if err != nil || n > u.r.Len() { // checked before anything is allocated
		u.fail()
		return nil
	}
	if cap(u.tmp) < n {
		u.tmp = make([]byte, n)
	}
	u.tmp = u.tmp[:n]
	if err := u.d.ReadFull(u.tmp); err != nil {
		u.fail()
		return nil
	}
	return u.tmp
}

func (u *unpacker) str() string { return string(u.raw()) }

// bytes reads a string as bytes, nil when it is empty.
func (u *unpacker) bytes() []byte {
	if b := u.raw(); len(b) > 0 {
		return bytes.Clone(b)
	}
	return nil
}

// id reads a stored instance ID and decodes it (EncodeID).
func (u *unpacker) id() string {
	b := u.raw()
	if u.err != nil {
		return ""
	}
	id, err := DecodeID(string(b))
	if err != nil {
		u.fail()
	}
	return id
}

func (u *unpacker) time() time.Time { return FromMicros(u.int()) }

// array reads the header of an array of n values.
func (u *unpacker) array(n int) {
	if c := u.peek(); u.err != nil || c == msgpcode.Nil {
		u.fail() // DecodeArrayLen reads nil as -1
		return
	}
	if got, err := u.d.DecodeArrayLen(); err != nil || got != n {
		u.fail()
	}
}

// Micros converts t to the integer microseconds the scripts use; the zero
// time is 0.
func Micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// FromMicros is the inverse of Micros.
func FromMicros(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// Stored instance IDs: a UUID in canonical form (what the engine makes) is
// stored as idUUID followed by its 16 bytes, 17 bytes instead of 36; any
// other ID as idText followed by the ID. A pending job's ID is stored four
// times (spec, ready list, kind bucket, history), so this saves about 80
// bytes of Redis memory per job.
const (
	idText = '\x00'
	idUUID = '\x01'
)

// EncodeID returns the stored form of instance ID id.
func EncodeID(id string) string {
	if b, ok := parseUUID(id); ok {
		return string(idUUID) + string(b[:])
	}
	return string(idText) + id
}

// DecodeID is the inverse of EncodeID.
func DecodeID(s string) (string, error) {
	switch {
	case len(s) == 17 && s[0] == idUUID:
		return formatUUID(s[1:]), nil
	case len(s) > 0 && s[0] == idText:
		return s[1:], nil
	}
	return "", corrupt("an instance ID", s)
}

// parseUUID parses a UUID in canonical lowercase form only, so that
// formatUUID gives back the same string.
func parseUUID(s string) (b [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return b, false
	}
	j := 0
	for i := 0; i < 36; {
		if s[i] == '-' {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return b, false
		}
		b[j] = hi<<4 | lo
		j++
		i += 2
	}
	return b, true
}

func unhex(c byte) (byte, bool) {
	v := unhexTable[c]
	return v, v < 16
}

// unhexTable is each byte's value as a lowercase hex digit, 0xff for a
// byte that is not one.
var unhexTable = func() (t [256]byte) {
	for c := range t {
		switch {
		case c >= '0' && c <= '9':
			t[c] = byte(c - '0')
		case c >= 'a' && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

func formatUUID(b string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i := 0; i < 16; i++ {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, digits[b[i]>>4], digits[b[i]&0xf])
	}
	return string(out)
}

// EncodeSpec returns the ten values of in's spec that the Go side writes
// (lua/lib.lua P_KIND to P_CREATED); the enqueue script puts Seq before
// them and three values after.
func EncodeSpec(in *store.Instance) string {
	p := getPacker()
	p.spec(in)
	return p.record()
}

func (p *packer) spec(in *store.Instance) {
	p.str(in.Kind)
	p.str(in.Queue)
	p.str(string(in.Args))
	p.int(int64(in.Priority))
	p.time(in.RunAt)
	p.int(int64(in.MaxRetries))
	p.int(int64(in.Timeout))
	p.str(in.UniqueKey)
	p.time(in.UniqueUntil)
	p.time(in.CreatedAt)
}

// encodeFullSpec is EncodeSpec with Seq before and the enqueue script's
// tail after, for a spec written from Go (a damaged one replaced, see
// Core.Claim); hseq -1 names no history entry.
func encodeFullSpec(in *store.Instance, enq time.Time) string {
	p := getPacker()
	p.int(int64(in.Seq))
	p.spec(in)
	p.time(enq)
	p.int(0)
	p.int(-1)
	rec := p.record()
	return rec + specTail(laneLabels(in.Labels), encodeMetadata(in.Metadata), encodeShard(in), encodeTask(in))
}

// specTail returns the values a spec ends with after P_HSEQ for labels l
// (as laneLabels gives them), metadata md (encodeMetadata) and shard
// fields sh (encodeShard) and workflow fields task (encodeTask): P_LABELS
// when any of the four is set, P_META when md, sh or task is, P_SHARD
// when sh or task is, P_TASK when task is; "" for none.
func specTail(l, md, sh, task string) string {
	if l == "" && md == "" && sh == "" && task == "" {
		return ""
	}
	p := getPacker()
	p.str(l)
	if md != "" || sh != "" || task != "" {
		p.str(md)
	}
	if sh != "" || task != "" {
		p.str(sh)
	}
	if task != "" {
		p.str(task)
	}
	return p.record()
}

// encodeTask returns in's workflow fields as the spec keeps them
// (lua/lib.lua P_TASK): store.MarshalTask's JSON; "" for an instance that
// is not a workflow task.
func encodeTask(in *store.Instance) string { return string(store.MarshalTask(in.Task)) }

// encodeShard returns in's shard fields as the spec keeps them (lua/lib.lua
// P_SHARD): the parent, the shard index and the shard count as MessagePack
// values; "" for an instance that is not part of a sharded task.
func encodeShard(in *store.Instance) string {
	if in.Parent == "" && in.ShardCount == 0 {
		return ""
	}
	p := getPacker()
	p.str(in.Parent)
	p.int(int64(in.ShardIndex))
	p.int(int64(in.ShardCount))
	return p.record()
}

// decodeShard is the inverse of encodeShard; ok is false when raw is not
// what it writes.
func decodeShard(raw string, in *store.Instance) (ok bool) {
	u := newUnpacker(raw)
	defer u.release()
	in.Parent = u.str()
	in.ShardIndex = int(u.int())
	in.ShardCount = int(u.int())
	return u.end() && in.ShardCount > 0
}

// encodeMetadata returns metadata as the spec keeps it (lua/lib.lua
// P_META): its keys and values as consecutive MessagePack strings, key
// before value, in key order; "" for none.
func encodeMetadata(md map[string]string) string {
	if len(md) == 0 {
		return ""
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	p := getPacker()
	for _, k := range keys {
		p.str(k)
		p.str(md[k])
	}
	return p.record()
}

// decodeMetadata is the inverse of encodeMetadata; ok is false when raw
// is not what it writes.
func decodeMetadata(raw string) (md map[string]string, ok bool) {
	u := newUnpacker(raw)
	defer u.release()
	md = map[string]string{}
	for u.more() {
		k := u.str()
		v := u.str()
		if u.err != nil || k == "" {
			return nil, false
		}
		md[k] = v
	}
	return md, u.end() && len(md) > 0
}

// laneLabels returns labels as the spec keeps them (lua/lib.lua
// P_LABELS): normalised, each behind a NUL byte; "" for none.
func laneLabels(labels []string) string {
	var b strings.Builder
	for _, l := range store.NormLabels(labels) {
		b.WriteByte(0)
		b.WriteString(l)
	}
	return b.String()
}

// DecodeInstance decodes the instance stored under id from its spec and
// its state ("" when it has not run yet). The error wraps store.ErrCorrupt
// and names the instance.
func DecodeInstance(id, spec, state string) (*store.Instance, error) {
	u := newUnpacker(spec)
	defer u.release()
	in := &store.Instance{ID: id, State: store.Scheduled}
	in.Seq = uint64(u.int())
	in.Kind = u.str()
	in.Queue = u.str()
	in.Args = u.bytes()
	in.Priority = int(u.int())
	in.RunAt = u.time()
	in.MaxRetries = int(u.int())
	in.Timeout = time.Duration(u.int())
	in.UniqueKey = u.str()
	in.UniqueUntil = u.time()
	in.CreatedAt = u.time()
	in.UpdatedAt = u.time() // P_ENQ
	u.int()                 // P_HDELTA and P_HSEQ: the enqueue's history
	u.int()                 // entry, which only the scripts read
	if u.more() {           // P_LABELS, written only when there are labels or metadata
		l := u.str()
		switch {
		case l == "" && !u.more(): // "" is written only before metadata
			return nil, corrupt("instance "+id, spec)
		case l == "":
		case len(l) < 2 || l[0] != 0:
			return nil, corrupt("instance "+id, spec)
		default:
			in.Labels = strings.Split(l[1:], "\x00")
		}
	}
	if u.more() { // P_META, written only when there is metadata or shard fields
		raw := u.str()
		switch md, ok := decodeMetadata(raw); {
		case ok:
			in.Metadata = md
		case raw != "" || !u.more(): // "" is written only before shard fields
			return nil, corrupt("instance "+id, spec)
		}
	}
	if u.more() { // P_SHARD, written only for a sharded task's parent or shard, or before P_TASK
		switch raw := u.str(); {
		case raw == "" && u.more(): // "" is written only before workflow fields
		case !decodeShard(raw, in):
			return nil, corrupt("instance "+id, spec)
		}
	}
	if u.more() { // P_TASK, written only for a workflow task
		t, err := store.UnmarshalTask([]byte(u.str()))
		if err != nil || t == nil {
			return nil, corrupt("instance "+id, spec)
		}
		in.Task = t
	}
	if !u.end() {
		return nil, corrupt("instance "+id, spec)
	}
	if state == "" {
		return in, nil
	}
	if err := decodeState(u, in, state); err != nil || !in.State.Valid() {
		return nil, corrupt("the state of instance "+id, state)
	}
	return in, nil
}

// decodeState decodes a state record (lua/lib.lua T_*) into in, reusing
// u, and returns errMsgpack when it is not one. A RunAt of 0 keeps in's.
func decodeState(u *unpacker, in *store.Instance, raw string) error {
	u.r.Reset(raw)
	u.err = nil
	u.array(12)
	in.State = store.State(u.int())
	in.Attempt = int(u.int())
	if r := u.int(); r != 0 {
		in.RunAt = FromMicros(r)
	}
	in.LeaseOwner = u.str()
	in.LeaseUntil = u.time()
	in.CancelRequested = u.int() == 1
	in.UpdatedAt = u.time()
	in.FinishedAt = u.time()
	in.Result = u.bytes()
	in.Error = u.str()
	u.raw() // T_REFS and T_HN: where its history records are, for the scripts
	u.int()
	if !u.end() {
		return errMsgpack
	}
	return nil
}

// stateAttempt returns the attempt a state record holds, if it is one.
func stateAttempt(raw string) (int, bool) {
	u := newUnpacker("")
	defer u.release()
	var in store.Instance
	if decodeState(u, &in, raw) != nil {
		return 0, false
	}
	return in.Attempt, true
}

// decodeHistory decodes a history stream entry value: 'e' (an enqueue:
// now, node, then IDs, each standing for a Created and a Scheduled record)
// or 't' (now, node, then one {id, state, attempt, error, result, seq} per
// record). Records carry their stored ID in InstanceID, decoded, and no
// Kind: the caller fills it in from the instance's spec.
func decodeHistory(raw string) ([]*store.HistoryRecord, error) {
	u := newUnpacker(raw)
	defer u.release()
	tag := u.str()
	t := u.time()
	node := u.str()
	if u.err != nil || (tag != "e" && tag != "t") {
		return nil, corrupt("history entry", raw)
	}
	var out []*store.HistoryRecord
	for u.more() {
		if tag == "e" {
			id := u.id()
			out = append(out,
				&store.HistoryRecord{InstanceID: id, State: store.Created, Time: t, Node: node, Seq: 1},
				&store.HistoryRecord{InstanceID: id, State: store.Scheduled, Time: t, Node: node, Seq: 2})
			continue
		}
		u.array(6)
		h := &store.HistoryRecord{Time: t, Node: node}
		h.InstanceID = u.id()
		h.State = store.State(u.int())
		h.Attempt = int(u.int())
		h.Error = u.str()
		h.Result = u.bytes()
		h.Seq = uint64(u.int())
		out = append(out, h)
	}
	if !u.end() || len(out) == 0 {
		return nil, corrupt("history entry", raw)
	}
	return out, nil
}

// decodeLog decodes a logs stream entry value: {id, kind, attempt, level,
// time, node, message, seq} (lua/append_logs.lua).
func decodeLog(raw string) (*store.LogRecord, error) {
	u := newUnpacker(raw)
	defer u.release()
	u.array(8)
	l := &store.LogRecord{}
	l.InstanceID = u.id()
	l.Kind = u.str()
	l.Attempt = int(u.int())
	l.Level = store.LogLevel(u.int())
	l.Time = u.time()
	l.Node = u.str()
	l.Message = u.str()
	l.Seq = uint64(u.int())
	if !u.end() {
		return nil, corrupt("log record", raw)
	}
	return l, nil
}

func corrupt(what, raw string) error {
	if len(raw) > 32 {
		raw = raw[:32] + "..."
	}
	return fmt.Errorf("%w: %s holds %q, which is not a jobkit record (written by something else or damaged; delete it or restore it)", store.ErrCorrupt, what, raw)
}
