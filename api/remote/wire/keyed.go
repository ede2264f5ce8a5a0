package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jobkit/job/store"
)

// MsgpackKeyed names the second binary encoding of a session
// (Hello.encodings, Welcome.encoding). It is Msgpack, except for what a
// session carries per task: pushed tasks (Tasks.instances_msgpack), and
// the parameters and results of Claim and Finish. Those travel as
// MessagePack maps whose keys are small integers instead of field names,
// written and read by hand instead of by reflection: a pushed no-op task
// costs jobd and the worker a fraction of the CPU and allocations of
// Msgpack, and about half the bytes.
//
// The keys of each type are listed below (keyed*), fixed for good: a key
// is never reused for another field or another type of value. A field
// that holds its zero value is left out; a nil slice or map is left out
// while an empty one travels as an empty array, map or binary, so nil and
// empty stay apart. Strings are MessagePack str, bytes bin, integers the
// shortest MessagePack integer, booleans bool, durations integer
// nanoseconds, times the MessagePack timestamp extension (type -1).
// A reader skips the keys it does not know, so a newer peer may add
// fields under new keys and an older one still reads what it knows; a
// change that an older reader must not miss needs a new encoding name.
//
// Pushed tasks are a MessagePack array of instance maps. The other
// session calls (renewals, heartbeats, logs...) travel in Msgpack.
const MsgpackKeyed = "msgpack-keyed"

// The keys of store.Instance.
const (
	kInstID = 1 + iota
	kInstKind
	kInstQueue
	kInstArgs
	kInstPriority
	kInstRunAt
	kInstState
	kInstAttempt
	kInstMaxRetries
	kInstTimeout
	kInstUniqueKey
	kInstUniqueUntil
	kInstLeaseOwner
	kInstLeaseUntil
	kInstCancelRequested
	kInstSeq
	kInstCreatedAt
	kInstUpdatedAt
	kInstFinishedAt
	kInstResult
	kInstError
	kInstLabels
	kInstMetadata
	kInstParent
	kInstShardIndex
	kInstShardCount
)

// The keys of store.Outcome.
const (
	kOutID = 1 + iota
	kOutAttempt
	kOutState
	kOutRunAt
	kOutRelease
	kOutResult
	kOutError
)

// The keys of store.FinishParams.
const (
	kFinOwner = 1 + iota
	kFinNow
	kFinOutcomes
)

// The keys of FinishResult, of Err and of Undecodable.
const (
	kResState = 1
	kResErr   = 2

	kErrMessage   = 1
	kErrSentinels = 2

	kUndID      = 1
	kUndAttempt = 2
	kUndErr     = 3
)

// The keys of store.ClaimParams.
const (
	kClaimQueue = 1 + iota
	kClaimOwner
	kClaimLimit
	kClaimNow
	kClaimLeaseUntil
	kClaimSeq
	kClaimKinds
	kClaimLabels
)

// The keys of ClaimResult.
const (
	kCResInstances = 1 + iota
	kCResNextRunAt
	kCResUndecodable
)

// MarshalKeyed encodes v in MsgpackKeyed: the types it has keys for in
// their keyed form, anything else as MarshalMsgpack does.
func MarshalKeyed(v any) ([]byte, error) {
	// Room for what a no-op task takes, so the buffer grows once or not
	// at all.
	switch v := v.(type) {
	case []*store.Instance:
		return AppendInstances(make([]byte, 0, 8+160*len(v)), v), nil
	case *store.FinishParams:
		n := 0
		if v != nil {
			n = len(v.Outcomes)
		}
		return appendFinishParams(make([]byte, 0, 64+80*n), v), nil
	case []FinishResult:
		return appendFinishResults(make([]byte, 0, 8+4*len(v)), v), nil
	case *store.ClaimParams:
		return appendClaimParams(nil, v), nil
	case *ClaimResult:
		return appendClaimResult(nil, v), nil
	}
	return MarshalMsgpack(v)
}

// UnmarshalKeyed decodes b, encoded by MarshalKeyed, into v.
func UnmarshalKeyed(b []byte, v any) error {
	d := &keyedDecoder{b: b}
	var err error
	switch v := v.(type) {
	case *[]*store.Instance:
		*v, err = d.instances()
	case **store.FinishParams:
		*v, err = d.finishParams()
	case *[]FinishResult:
		*v, err = d.finishResults()
	case **store.ClaimParams:
		*v, err = d.claimParams()
	case **ClaimResult:
		*v, err = d.claimResult()
	default:
		return UnmarshalMsgpack(b, v)
	}
	if err == nil && d.i != len(d.b) {
		err = fmt.Errorf("%d bytes after the value", len(d.b)-d.i)
	}
	if err != nil {
		return fmt.Errorf("msgpack-keyed: %T: %w", v, err)
	}
	return nil
}

// DecodeKeyed is Decode for parameters encoded by MarshalKeyed.
func DecodeKeyed(name string, params []byte) (any, error) {
	var (
		p   any
		err error
	)
	switch name {
	case MethodFinish:
		var fp *store.FinishParams
		if len(params) > 0 {
			err = UnmarshalKeyed(params, &fp)
		}
		p = fp
	case MethodClaim:
		var cp *store.ClaimParams
		if len(params) > 0 {
			err = UnmarshalKeyed(params, &cp)
		}
		p = cp
	default:
		return DecodeMsgpack(name, params)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: undecodable parameters: %v", store.ErrInvalid, err)
	}
	return p, nil
}

// AppendInstances appends ins in MsgpackKeyed (an array of instance maps)
// to b.
func AppendInstances(b []byte, ins []*store.Instance) []byte {
	b = appendArrayLen(b, len(ins))
	for _, in := range ins {
		b = appendInstance(b, in)
	}
	return b
}

// fields counts the fields of a map being written: appendMap reserves
// room for the map header, fields write key and value, end patches the
// header with the count.
type fields struct {
	at, n int
}

// beginMap starts a map of at most 65535 entries (a map16 header, patched
// by endMap).
func beginMap(b []byte) ([]byte, fields) {
	return append(b, 0xde, 0, 0), fields{at: len(b)}
}

func endMap(b []byte, f fields) []byte {
	if f.n < 16 {
		// Shrink to a fixmap header.
		b[f.at] = 0x80 | byte(f.n)
		return append(b[:f.at+1], b[f.at+3:]...)
	}
	binary.BigEndian.PutUint16(b[f.at+1:], uint16(f.n))
	return b
}

func (f *fields) key(b []byte, k int) []byte {
	f.n++
	return append(b, byte(k)) // keys are positive fixints (< 128)
}

func (f *fields) str(b []byte, k int, s string) []byte {
	if s == "" {
		return b
	}
	return appendStr(f.key(b, k), s)
}

func (f *fields) int(b []byte, k int, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendInt(f.key(b, k), v)
}

func (f *fields) uint(b []byte, k int, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendUint(f.key(b, k), v)
}

func (f *fields) bool(b []byte, k int, v bool) []byte {
	if !v {
		return b
	}
	return append(f.key(b, k), 0xc3)
}

func (f *fields) time(b []byte, k int, t time.Time) []byte {
	if t.IsZero() {
		return b
	}
	return appendTime(f.key(b, k), t)
}

func (f *fields) bin(b []byte, k int, v []byte) []byte {
	if v == nil {
		return b
	}
	return appendBin(f.key(b, k), v)
}

func (f *fields) strs(b []byte, k int, v []string) []byte {
	if v == nil {
		return b
	}
	b = appendArrayLen(f.key(b, k), len(v))
	for _, s := range v {
		b = appendStr(b, s)
	}
	return b
}

func appendInstance(b []byte, in *store.Instance) []byte {
	if in == nil {
		return append(b, 0xc0)
	}
	b, f := beginMap(b)
	b = f.str(b, kInstID, in.ID)
	b = f.str(b, kInstKind, in.Kind)
	b = f.str(b, kInstQueue, in.Queue)
	b = f.bin(b, kInstArgs, in.Args)
	b = f.int(b, kInstPriority, int64(in.Priority))
	b = f.time(b, kInstRunAt, in.RunAt)
	b = f.uint(b, kInstState, uint64(in.State))
	b = f.int(b, kInstAttempt, int64(in.Attempt))
	b = f.int(b, kInstMaxRetries, int64(in.MaxRetries))
	b = f.int(b, kInstTimeout, int64(in.Timeout))
	b = f.str(b, kInstUniqueKey, in.UniqueKey)
	b = f.time(b, kInstUniqueUntil, in.UniqueUntil)
	b = f.str(b, kInstLeaseOwner, in.LeaseOwner)
	b = f.time(b, kInstLeaseUntil, in.LeaseUntil)
	b = f.bool(b, kInstCancelRequested, in.CancelRequested)
	b = f.uint(b, kInstSeq, in.Seq)
	b = f.time(b, kInstCreatedAt, in.CreatedAt)
	b = f.time(b, kInstUpdatedAt, in.UpdatedAt)
	b = f.time(b, kInstFinishedAt, in.FinishedAt)
	b = f.bin(b, kInstResult, in.Result)
	b = f.str(b, kInstError, in.Error)
	b = f.strs(b, kInstLabels, in.Labels)
	if in.Metadata != nil {
		b = appendMapLen(f.key(b, kInstMetadata), len(in.Metadata))
		for k, v := range in.Metadata {
			b = appendStr(appendStr(b, k), v)
		}
	}
	b = f.str(b, kInstParent, in.Parent)
	b = f.int(b, kInstShardIndex, int64(in.ShardIndex))
	b = f.int(b, kInstShardCount, int64(in.ShardCount))
	return endMap(b, f)
}

func appendFinishParams(b []byte, p *store.FinishParams) []byte {
	if p == nil {
		return append(b, 0xc0)
	}
	b, f := beginMap(b)
	b = f.str(b, kFinOwner, p.Owner)
	b = f.time(b, kFinNow, p.Now)
	if p.Outcomes != nil {
		b = appendArrayLen(f.key(b, kFinOutcomes), len(p.Outcomes))
		for i := range p.Outcomes {
			o := &p.Outcomes[i]
			var g fields
			b, g = beginMap(b)
			b = g.str(b, kOutID, o.ID)
			b = g.int(b, kOutAttempt, int64(o.Attempt))
			b = g.uint(b, kOutState, uint64(o.State))
			b = g.time(b, kOutRunAt, o.RunAt)
			b = g.bool(b, kOutRelease, o.Release)
			b = g.bin(b, kOutResult, o.Result)
			b = g.str(b, kOutError, o.Error)
			b = endMap(b, g)
		}
	}
	return endMap(b, f)
}

func appendErr(b []byte, e *Err) []byte {
	b, f := beginMap(b)
	b = f.str(b, kErrMessage, e.Message)
	b = f.strs(b, kErrSentinels, e.Sentinels)
	return endMap(b, f)
}

func appendFinishResults(b []byte, rs []FinishResult) []byte {
	if rs == nil {
		return append(b, 0xc0)
	}
	b = appendArrayLen(b, len(rs))
	for _, r := range rs {
		var f fields
		b, f = beginMap(b)
		b = f.uint(b, kResState, uint64(r.State))
		if r.Err != nil {
			b = appendErr(f.key(b, kResErr), r.Err)
		}
		b = endMap(b, f)
	}
	return b
}

func appendClaimParams(b []byte, p *store.ClaimParams) []byte {
	if p == nil {
		return append(b, 0xc0)
	}
	b, f := beginMap(b)
	b = f.str(b, kClaimQueue, p.Queue)
	b = f.str(b, kClaimOwner, p.Owner)
	b = f.int(b, kClaimLimit, int64(p.Limit))
	b = f.time(b, kClaimNow, p.Now)
	b = f.time(b, kClaimLeaseUntil, p.LeaseUntil)
	b = f.uint(b, kClaimSeq, p.ClaimSeq)
	b = f.strs(b, kClaimKinds, p.Kinds)
	b = f.strs(b, kClaimLabels, p.Labels)
	return endMap(b, f)
}

func appendClaimResult(b []byte, r *ClaimResult) []byte {
	if r == nil {
		return append(b, 0xc0)
	}
	b, f := beginMap(b)
	if r.Instances != nil {
		b = AppendInstances(f.key(b, kCResInstances), r.Instances)
	}
	b = f.time(b, kCResNextRunAt, r.NextRunAt)
	if r.Undecodable != nil {
		b = appendArrayLen(f.key(b, kCResUndecodable), len(r.Undecodable))
		for _, u := range r.Undecodable {
			var g fields
			b, g = beginMap(b)
			b = g.str(b, kUndID, u.ID)
			b = g.int(b, kUndAttempt, int64(u.Attempt))
			if u.Err != nil {
				b = appendErr(g.key(b, kUndErr), u.Err)
			}
			b = endMap(b, g)
		}
	}
	return endMap(b, f)
}

// MessagePack primitives.

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendBin(b []byte, v []byte) []byte {
	switch n := len(v); {
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = append(b, 0xc5, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, v...)
}

func appendArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return append(b, 0xde, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(b, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(b, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}

// appendTime appends t as the MessagePack timestamp extension (type -1).
func appendTime(b []byte, t time.Time) []byte {
	sec, nsec := t.Unix(), uint64(t.Nanosecond())
	if sec >= 0 && sec < 1<<34 {
		return binary.BigEndian.AppendUint64(append(b, 0xd7, 0xff), nsec<<34|uint64(sec))
	}
	b = binary.BigEndian.AppendUint32(append(b, 0xc7, 12, 0xff), uint32(nsec))
	return binary.BigEndian.AppendUint64(b, uint64(sec))
}

// keyedDecoder reads MsgpackKeyed from b.
type keyedDecoder struct {
	b []byte
	i int
	// interned are strings read before (kinds, queues, owners), returned
	// again instead of a new copy when the same bytes come back.
	interned []string
}

var errShort = errors.New("unexpected end of data")

func (d *keyedDecoder) byte() (byte, error) {
	if d.i >= len(d.b) {
		return 0, errShort
	}
	c := d.b[d.i]
	d.i++
	return c, nil
}

func (d *keyedDecoder) n(n int) ([]byte, error) {
	if n < 0 || len(d.b)-d.i < n {
		return nil, errShort
	}
	v := d.b[d.i : d.i+n : d.i+n]
	d.i += n
	return v, nil
}

func (d *keyedDecoder) be(n int) (uint64, error) {
	v, err := d.n(n)
	if err != nil {
		return 0, err
	}
	var u uint64
	for _, c := range v {
		u = u<<8 | uint64(c)
	}
	return u, nil
}

// nil reports (and consumes) a nil.
func (d *keyedDecoder) nil() bool {
	if d.i < len(d.b) && d.b[d.i] == 0xc0 {
		d.i++
		return true
	}
	return false
}

func (d *keyedDecoder) length(c byte, fix, fixMask byte, c16, c32 byte, what string) (int, error) {
	switch {
	case c&^fixMask == fix:
		return int(c & fixMask), nil
	case c == c16:
		u, err := d.be(2)
		return int(u), err
	case c == c32:
		u, err := d.be(4)
		return int(u), err
	}
	return 0, fmt.Errorf("want %s, got code 0x%02x at %d", what, c, d.i-1)
}

func (d *keyedDecoder) mapLen() (int, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	return d.length(c, 0x80, 0x0f, 0xde, 0xdf, "a map")
}

func (d *keyedDecoder) arrayLen() (int, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	n, err := d.length(c, 0x90, 0x0f, 0xdc, 0xdd, "an array")
	if err == nil && n > len(d.b)-d.i {
		err = errShort // every element takes a byte at least
	}
	return n, err
}

// raw reads a string (str) or, when bin, bytes (bin) and returns its
// bytes, which alias the decoder's input.
func (d *keyedDecoder) raw(bin bool) ([]byte, error) {
	c, err := d.byte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case !bin && c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case !bin && c >= 0xd9 && c <= 0xdb:
		n, err = d.be(1 << (c - 0xd9))
	case bin && c >= 0xc4 && c <= 0xc6:
		n, err = d.be(1 << (c - 0xc4))
	default:
		what := "a string"
		if bin {
			what = "bytes"
		}
		return nil, fmt.Errorf("want %s, got code 0x%02x at %d", what, c, d.i-1)
	}
	if err != nil {
		return nil, err
	}
	return d.n(int(n))
}

func (d *keyedDecoder) str() (string, error) {
	v, err := d.raw(false)
	return string(v), err
}

// istr is str for values that repeat across records.
func (d *keyedDecoder) istr() (string, error) {
	v, err := d.raw(false)
	if err != nil {
		return "", err
	}
	for _, s := range d.interned {
		if s == string(v) {
			return s, nil
		}
	}
	s := string(v)
	if len(d.interned) < 8 {
		d.interned = append(d.interned, s)
	}
	return s, nil
}

// bin returns bytes that alias the decoder's input (never nil).
func (d *keyedDecoder) bin() ([]byte, error) {
	return d.raw(true)
}

func (d *keyedDecoder) int() (int64, error) {
	c, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	}
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		u, err := d.be(1 << (c - 0xcc))
		if err == nil && u > math.MaxInt64 {
			err = fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), err
	case 0xd0:
		u, err := d.be(1)
		return int64(int8(u)), err
	case 0xd1:
		u, err := d.be(2)
		return int64(int16(u)), err
	case 0xd2:
		u, err := d.be(4)
		return int64(int32(u)), err
	case 0xd3:
		u, err := d.be(8)
		return int64(u), err
	}
	return 0, fmt.Errorf("want an integer, got code 0x%02x at %d", c, d.i-1)
}

func (d *keyedDecoder) uint() (uint64, error) {
	if d.i < len(d.b) && d.b[d.i] == 0xcf {
		d.i++
		return d.be(8)
	}
	v, err := d.int()
	if err == nil && v < 0 {
		err = fmt.Errorf("want an unsigned integer, got %d", v)
	}
	return uint64(v), err
}

func (d *keyedDecoder) intv() (int, error) {
	v, err := d.int()
	if err == nil && (v > math.MaxInt || v < math.MinInt) {
		err = fmt.Errorf("integer %d out of range", v)
	}
	return int(v), err
}

func (d *keyedDecoder) state() (store.State, error) {
	v, err := d.uint()
	if err == nil && v > math.MaxUint8 {
		err = fmt.Errorf("state %d out of range", v)
	}
	return store.State(v), err
}

func (d *keyedDecoder) bool() (bool, error) {
	c, err := d.byte()
	switch {
	case err != nil:
		return false, err
	case c == 0xc2:
		return false, nil
	case c == 0xc3:
		return true, nil
	}
	return false, fmt.Errorf("want a bool, got code 0x%02x at %d", c, d.i-1)
}

func (d *keyedDecoder) time() (time.Time, error) {
	c, err := d.byte()
	if err != nil {
		return time.Time{}, err
	}
	var n int
	switch c {
	case 0xd6:
		n = 4
	case 0xd7:
		n = 8
	case 0xc7:
		u, err := d.be(1)
		if err != nil {
			return time.Time{}, err
		}
		n = int(u)
	default:
		return time.Time{}, fmt.Errorf("want a timestamp, got code 0x%02x at %d", c, d.i-1)
	}
	if t, err := d.byte(); err != nil || t != 0xff {
		return time.Time{}, fmt.Errorf("want a timestamp (extension -1): %v", err)
	}
	switch n {
	case 4:
		u, err := d.be(4)
		return time.Unix(int64(u), 0), err
	case 8:
		u, err := d.be(8)
		return time.Unix(int64(u&(1<<34-1)), int64(u>>34)), err
	case 12:
		ns, err := d.be(4)
		if err != nil {
			return time.Time{}, err
		}
		s, err := d.be(8)
		return time.Unix(int64(s), int64(ns)), err
	}
	return time.Time{}, fmt.Errorf("timestamp of %d bytes", n)
}

func (d *keyedDecoder) strs() ([]string, error) {
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i := range out {
		if out[i], err = d.istr(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// skip skips one value of any type: a field a newer peer added.
func (d *keyedDecoder) skip() error {
	c, err := d.byte()
	if err != nil {
		return err
	}
	size := func(n int) error { _, err := d.n(n); return err }
	items := func(n int) error {
		for range n {
			if err := d.skip(); err != nil {
				return err
			}
		}
		return nil
	}
	lenThen := func(bytes int, then func(int) error) error {
		u, err := d.be(bytes)
		if err != nil {
			return err
		}
		return then(int(u))
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c&0xf0 == 0x80:
		return items(2 * int(c&0x0f))
	case c&0xf0 == 0x90:
		return items(int(c & 0x0f))
	case c&0xe0 == 0xa0:
		return size(int(c & 0x1f))
	}
	switch c {
	case 0xc4, 0xd9:
		return lenThen(1, size)
	case 0xc5, 0xda:
		return lenThen(2, size)
	case 0xc6, 0xdb:
		return lenThen(4, size)
	case 0xc7:
		return lenThen(1, func(n int) error { return size(n + 1) })
	case 0xc8:
		return lenThen(2, func(n int) error { return size(n + 1) })
	case 0xc9:
		return lenThen(4, func(n int) error { return size(n + 1) })
	case 0xca, 0xce, 0xd2:
		return size(4)
	case 0xcb, 0xcf, 0xd3:
		return size(8)
	case 0xcc, 0xd0:
		return size(1)
	case 0xcd, 0xd1:
		return size(2)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
		return size(1 + 1<<(c-0xd4))
	case 0xdc:
		return lenThen(2, items)
	case 0xdd:
		return lenThen(4, items)
	case 0xde:
		return lenThen(2, func(n int) error { return items(2 * n) })
	case 0xdf:
		return lenThen(4, func(n int) error { return items(2 * n) })
	}
	return fmt.Errorf("invalid code 0x%02x at %d", c, d.i-1)
}

// fieldsOf reads a map and calls field for each key; field returns false
// for a key it does not know, which is skipped.
func (d *keyedDecoder) fieldsOf(what string, field func(k int64) (bool, error)) error {
	n, err := d.mapLen()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for range n {
		k, err := d.int()
		if err != nil {
			return fmt.Errorf("%s: key: %w", what, err)
		}
		known, err := field(k)
		if err == nil && !known {
			err = d.skip()
		}
		if err != nil {
			return fmt.Errorf("%s: field %d: %w", what, k, err)
		}
	}
	return nil
}

func (d *keyedDecoder) instances() ([]*store.Instance, error) {
	if d.nil() {
		return nil, nil
	}
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]*store.Instance, n)
	for i := range out {
		if out[i], err = d.instance(); err != nil {
			return nil, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	return out, nil
}

func (d *keyedDecoder) instance() (*store.Instance, error) {
	if d.nil() {
		return nil, nil
	}
	in := new(store.Instance)
	err := d.fieldsOf("instance", func(k int64) (bool, error) {
		var err error
		switch k {
		case kInstID:
			in.ID, err = d.str()
		case kInstKind:
			in.Kind, err = d.istr()
		case kInstQueue:
			in.Queue, err = d.istr()
		case kInstArgs:
			in.Args, err = d.bin()
		case kInstPriority:
			in.Priority, err = d.intv()
		case kInstRunAt:
			in.RunAt, err = d.time()
		case kInstState:
			in.State, err = d.state()
		case kInstAttempt:
			in.Attempt, err = d.intv()
		case kInstMaxRetries:
			in.MaxRetries, err = d.intv()
		case kInstTimeout:
			var v int64
			v, err = d.int()
			in.Timeout = time.Duration(v)
		case kInstUniqueKey:
			in.UniqueKey, err = d.str()
		case kInstUniqueUntil:
			in.UniqueUntil, err = d.time()
		case kInstLeaseOwner:
			in.LeaseOwner, err = d.istr()
		case kInstLeaseUntil:
			in.LeaseUntil, err = d.time()
		case kInstCancelRequested:
			in.CancelRequested, err = d.bool()
		case kInstSeq:
			in.Seq, err = d.uint()
		case kInstCreatedAt:
			in.CreatedAt, err = d.time()
		case kInstUpdatedAt:
			in.UpdatedAt, err = d.time()
		case kInstFinishedAt:
			in.FinishedAt, err = d.time()
		case kInstResult:
			in.Result, err = d.bin()
		case kInstError:
			in.Error, err = d.str()
		case kInstLabels:
			in.Labels, err = d.strs()
		case kInstMetadata:
			var n int
			if n, err = d.mapLen(); err != nil {
				return true, err
			}
			in.Metadata = make(map[string]string, n)
			for range n {
				var k, v string
				if k, err = d.istr(); err != nil {
					return true, err
				}
				if v, err = d.str(); err != nil {
					return true, err
				}
				in.Metadata[k] = v
			}
		case kInstParent:
			in.Parent, err = d.istr()
		case kInstShardIndex:
			in.ShardIndex, err = d.intv()
		case kInstShardCount:
			in.ShardCount, err = d.intv()
		default:
			return false, nil
		}
		return true, err
	})
	return in, err
}

func (d *keyedDecoder) finishParams() (*store.FinishParams, error) {
	if d.nil() {
		return nil, nil
	}
	p := new(store.FinishParams)
	err := d.fieldsOf("finish parameters", func(k int64) (bool, error) {
		var err error
		switch k {
		case kFinOwner:
			p.Owner, err = d.str()
		case kFinNow:
			p.Now, err = d.time()
		case kFinOutcomes:
			var n int
			if n, err = d.arrayLen(); err != nil {
				return true, err
			}
			p.Outcomes = make([]store.Outcome, n)
			for i := range p.Outcomes {
				if err = d.outcome(&p.Outcomes[i]); err != nil {
					return true, fmt.Errorf("outcome %d: %w", i, err)
				}
			}
		default:
			return false, nil
		}
		return true, err
	})
	return p, err
}

func (d *keyedDecoder) outcome(o *store.Outcome) error {
	return d.fieldsOf("outcome", func(k int64) (bool, error) {
		var err error
		switch k {
		case kOutID:
			o.ID, err = d.str()
		case kOutAttempt:
			o.Attempt, err = d.intv()
		case kOutState:
			o.State, err = d.state()
		case kOutRunAt:
			o.RunAt, err = d.time()
		case kOutRelease:
			o.Release, err = d.bool()
		case kOutResult:
			o.Result, err = d.bin()
		case kOutError:
			o.Error, err = d.istr()
		default:
			return false, nil
		}
		return true, err
	})
}

func (d *keyedDecoder) err() (*Err, error) {
	e := new(Err)
	err := d.fieldsOf("error", func(k int64) (bool, error) {
		var err error
		switch k {
		case kErrMessage:
			e.Message, err = d.istr()
		case kErrSentinels:
			e.Sentinels, err = d.strs()
		default:
			return false, nil
		}
		return true, err
	})
	return e, err
}

func (d *keyedDecoder) finishResults() ([]FinishResult, error) {
	if d.nil() {
		return nil, nil
	}
	n, err := d.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]FinishResult, n)
	for i := range out {
		r := &out[i]
		err := d.fieldsOf("finish result", func(k int64) (bool, error) {
			var err error
			switch k {
			case kResState:
				r.State, err = d.state()
			case kResErr:
				r.Err, err = d.err()
			default:
				return false, nil
			}
			return true, err
		})
		if err != nil {
			return nil, fmt.Errorf("result %d: %w", i, err)
		}
	}
	return out, nil
}

func (d *keyedDecoder) claimParams() (*store.ClaimParams, error) {
	if d.nil() {
		return nil, nil
	}
	p := new(store.ClaimParams)
	err := d.fieldsOf("claim parameters", func(k int64) (bool, error) {
		var err error
		switch k {
		case kClaimQueue:
			p.Queue, err = d.str()
		case kClaimOwner:
			p.Owner, err = d.str()
		case kClaimLimit:
			p.Limit, err = d.intv()
		case kClaimNow:
			p.Now, err = d.time()
		case kClaimLeaseUntil:
			p.LeaseUntil, err = d.time()
		case kClaimSeq:
			p.ClaimSeq, err = d.uint()
		case kClaimKinds:
			p.Kinds, err = d.strs()
		case kClaimLabels:
			p.Labels, err = d.strs()
		default:
			return false, nil
		}
		return true, err
	})
	return p, err
}

func (d *keyedDecoder) claimResult() (*ClaimResult, error) {
	if d.nil() {
		return nil, nil
	}
	r := new(ClaimResult)
	err := d.fieldsOf("claim result", func(k int64) (bool, error) {
		var err error
		switch k {
		case kCResInstances:
			r.Instances, err = d.instances()
		case kCResNextRunAt:
			r.NextRunAt, err = d.time()
		case kCResUndecodable:
			var n int
			if n, err = d.arrayLen(); err != nil {
				return true, err
			}
			r.Undecodable = make([]Undecodable, n)
			for i := range r.Undecodable {
				u := &r.Undecodable[i]
				err = d.fieldsOf("undecodable", func(k int64) (bool, error) {
					var err error
					switch k {
					case kUndID:
						u.ID, err = d.str()
					case kUndAttempt:
						u.Attempt, err = d.intv()
					case kUndErr:
						u.Err, err = d.err()
					default:
						return false, nil
					}
					return true, err
				})
				if err != nil {
					return true, err
				}
			}
		default:
			return false, nil
		}
		return true, err
	})
	return r, err
}
