package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/jobkit/job/store"
)

// MsgpackKeyed names the second binary encoding of a session
// (Hello.encodings, Welcome.encoding). It is Msgpack, except for what a
// session carries per task: pushed tasks (Tasks.instances_msgpack), and
// the parameters and results of Claim and Finish. Those travel as
// MessagePack maps whose keys are small integers instead of field names,
// written and read field by field with msgpack's Encoder and Decoder
// instead of by reflection: a pushed no-op task costs jobd and the worker
// a fraction of the CPU and allocations of Msgpack, and about half the
// bytes.
//
// The keys of each type are listed below (keyed*), fixed for good: a key
// is never reused for another field or another type of value. A field
// that holds its zero value is left out; a nil slice or map is left out
// while an empty one travels as an empty array, map or binary, so nil and
// empty stay apart. Strings are MessagePack str, bytes bin, integers the
// shortest MessagePack integer, booleans bool, durations integer
// nanoseconds, times the MessagePack timestamp extension (type -1), in
// the smallest of its three forms that holds the time (a reader takes
// any of them).
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
	kInstTask // store.MarshalTask's JSON
	kInstLimitKey
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
	kClaimLimits     // kind, queue and max of each limit, flat
	kClaimRateLimits // kind, queue, rate, period and burst of each rate limit, flat
	// kClaimPerKey: the indexes (decimal strings) in kClaimLimits of the
	// per-key limits. A reader that does not know it enforces them as
	// limits of their whole kind and queue, which never lets more run.
	kClaimPerKey
)

// The keys of ClaimResult.
const (
	kCResInstances = 1 + iota
	kCResNextRunAt
	kCResUndecodable
	kCResLimited
	kCResRetryAfter // nanoseconds
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
		e := getEncoder(make([]byte, 0, 64+80*n))
		e.finishParams(v)
		return e.done(), nil
	case []FinishResult:
		e := getEncoder(make([]byte, 0, 8+4*len(v)))
		e.finishResults(v)
		return e.done(), nil
	case *store.ClaimParams:
		e := getEncoder(nil)
		e.claimParams(v)
		return e.done(), nil
	case *ClaimResult:
		e := getEncoder(nil)
		e.claimResult(v)
		return e.done(), nil
	}
	return MarshalMsgpack(v)
}

// UnmarshalKeyed decodes b, encoded by MarshalKeyed, into v.
func UnmarshalKeyed(b []byte, v any) error {
	d := getDecoder(b)
	defer d.release()
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
	if err == nil && d.r.Len() != 0 {
		err = fmt.Errorf("%d bytes after the value", d.r.Len())
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
	e := getEncoder(b)
	e.instances(ins)
	return e.done()
}

// appender is the io.Writer (and io.ByteWriter) a keyedEncoder's
// msgpack.Encoder writes to: it appends to b and never fails, so the
// Encoder's calls that write to it never return an error.
type appender struct {
	b []byte
}

func (a *appender) Write(p []byte) (int, error) {
	// Not a.b = append(a.b, p...), which stores a.b's pointer (with a
	// write barrier while the GC marks) on every call: a.b's array
	// changes only when it grows.
	if len(p) > cap(a.b)-len(a.b) {
		a.b = slices.Grow(a.b, len(p))
	}
	n := len(a.b)
	a.b = a.b[:n+len(p)]
	copy(a.b[n:], p)
	return len(p), nil
}

func (a *appender) WriteByte(c byte) error {
	a.b = append(a.b, c)
	return nil
}

// keyedEncoder writes MsgpackKeyed with a msgpack.Encoder that appends to
// a byte slice. It is pooled with its Encoder and appender, so a call
// allocates nothing but the slice it returns.
type keyedEncoder struct {
	e *msgpack.Encoder
	w appender
}

var encoders = sync.Pool{New: func() any {
	k := new(keyedEncoder)
	k.e = msgpack.NewEncoder(&k.w)
	return k
}}

// getEncoder returns an encoder appending to b, for done.
func getEncoder(b []byte) *keyedEncoder {
	k := encoders.Get().(*keyedEncoder)
	k.w.b = b
	return k
}

// done returns what k wrote and puts k back in the pool.
func (k *keyedEncoder) done() []byte {
	b := k.w.b
	k.w.b = nil
	encoders.Put(k)
	return b
}

// fields writes the fields of one map, leaving out those at their zero
// value. A map is written in two passes over the same field list: one
// with count set, that counts the fields for the map header, then one
// that writes them.
type fields struct {
	e     *msgpack.Encoder
	count bool
	n     int
}

// key counts a field and reports whether it is to be written (not when
// counting). The per-type helpers below are small enough to inline, so
// the counting pass makes no calls; the writing is out of line.
func (f *fields) key() bool {
	f.n++
	return !f.count
}

// header ends the counting pass: it writes the map header and readies f
// for the writing pass.
func (f *fields) header() {
	_ = f.e.EncodeMapLen(f.n)
	f.n = 0
	f.count = false
}

func (f *fields) writeKey(k int) {
	_ = f.e.EncodeUint(uint64(k))
}

func (f *fields) str(k int, s string) {
	if s != "" && f.key() {
		f.writeStr(k, s)
	}
}

func (f *fields) writeStr(k int, s string) {
	f.writeKey(k)
	_ = f.e.EncodeString(s)
}

func (f *fields) int(k int, v int64) {
	if v != 0 && f.key() {
		f.writeInt(k, v)
	}
}

func (f *fields) writeInt(k int, v int64) {
	f.writeKey(k)
	_ = f.e.EncodeInt(v)
}

func (f *fields) uint(k int, v uint64) {
	if v != 0 && f.key() {
		f.writeUint(k, v)
	}
}

func (f *fields) writeUint(k int, v uint64) {
	f.writeKey(k)
	_ = f.e.EncodeUint(v)
}

func (f *fields) bool(k int, v bool) {
	if v && f.key() {
		f.writeTrue(k)
	}
}

func (f *fields) writeTrue(k int) {
	f.writeKey(k)
	_ = f.e.EncodeBool(true)
}

func (f *fields) time(k int, t *time.Time) {
	if !t.IsZero() && f.key() {
		f.writeTime(k, t)
	}
}

func (f *fields) writeTime(k int, t *time.Time) {
	f.writeKey(k)
	_ = f.e.EncodeTime(*t)
}

func (f *fields) bin(k int, v []byte) {
	if v != nil && f.key() {
		f.writeBin(k, v)
	}
}

func (f *fields) writeBin(k int, v []byte) {
	f.writeKey(k)
	_ = f.e.EncodeBytes(v)
}

func (f *fields) strs(k int, v []string) {
	if v != nil && f.key() {
		f.writeStrs(k, v)
	}
}

func (f *fields) writeStrs(k int, v []string) {
	f.writeKey(k)
	_ = f.e.EncodeArrayLen(len(v))
	for _, s := range v {
		_ = f.e.EncodeString(s)
	}
}

func (k *keyedEncoder) instances(ins []*store.Instance) {
	_ = k.e.EncodeArrayLen(len(ins))
	for _, in := range ins {
		k.instance(in)
	}
}

func (k *keyedEncoder) instance(in *store.Instance) {
	if in == nil {
		_ = k.e.EncodeNil()
		return
	}
	f := fields{e: k.e, count: true}
	instanceFields(&f, in)
	f.header()
	instanceFields(&f, in)
}

func instanceFields(f *fields, in *store.Instance) {
	f.str(kInstID, in.ID)
	f.str(kInstKind, in.Kind)
	f.str(kInstQueue, in.Queue)
	f.bin(kInstArgs, in.Args)
	f.int(kInstPriority, int64(in.Priority))
	f.time(kInstRunAt, &in.RunAt)
	f.uint(kInstState, uint64(in.State))
	f.int(kInstAttempt, int64(in.Attempt))
	f.int(kInstMaxRetries, int64(in.MaxRetries))
	f.int(kInstTimeout, int64(in.Timeout))
	f.str(kInstUniqueKey, in.UniqueKey)
	f.time(kInstUniqueUntil, &in.UniqueUntil)
	f.str(kInstLeaseOwner, in.LeaseOwner)
	f.time(kInstLeaseUntil, &in.LeaseUntil)
	f.bool(kInstCancelRequested, in.CancelRequested)
	f.uint(kInstSeq, in.Seq)
	f.time(kInstCreatedAt, &in.CreatedAt)
	f.time(kInstUpdatedAt, &in.UpdatedAt)
	f.time(kInstFinishedAt, &in.FinishedAt)
	f.bin(kInstResult, in.Result)
	f.str(kInstError, in.Error)
	f.strs(kInstLabels, in.Labels)
	if in.Metadata != nil && f.key() {
		f.writeKey(kInstMetadata)
		_ = f.e.EncodeMapLen(len(in.Metadata))
		for k, v := range in.Metadata {
			_ = f.e.EncodeString(k)
			_ = f.e.EncodeString(v)
		}
	}
	f.str(kInstParent, in.Parent)
	f.int(kInstShardIndex, int64(in.ShardIndex))
	f.int(kInstShardCount, int64(in.ShardCount))
	f.bin(kInstTask, store.MarshalTask(in.Task))
	f.str(kInstLimitKey, in.LimitKey)
}

func (k *keyedEncoder) finishParams(p *store.FinishParams) {
	if p == nil {
		_ = k.e.EncodeNil()
		return
	}
	f := fields{e: k.e, count: true}
	finishParamsFields(k, &f, p)
	f.header()
	finishParamsFields(k, &f, p)
}

func finishParamsFields(k *keyedEncoder, f *fields, p *store.FinishParams) {
	f.str(kFinOwner, p.Owner)
	f.time(kFinNow, &p.Now)
	if p.Outcomes != nil && f.key() {
		f.writeKey(kFinOutcomes)
		_ = k.e.EncodeArrayLen(len(p.Outcomes))
		for i := range p.Outcomes {
			o := &p.Outcomes[i]
			g := fields{e: k.e, count: true}
			outcomeFields(&g, o)
			g.header()
			outcomeFields(&g, o)
		}
	}
}

func outcomeFields(f *fields, o *store.Outcome) {
	f.str(kOutID, o.ID)
	f.int(kOutAttempt, int64(o.Attempt))
	f.uint(kOutState, uint64(o.State))
	f.time(kOutRunAt, &o.RunAt)
	f.bool(kOutRelease, o.Release)
	f.bin(kOutResult, o.Result)
	f.str(kOutError, o.Error)
}

func (k *keyedEncoder) err(e *Err) {
	f := fields{e: k.e, count: true}
	errFields(&f, e)
	f.header()
	errFields(&f, e)
}

func errFields(f *fields, e *Err) {
	f.str(kErrMessage, e.Message)
	f.strs(kErrSentinels, e.Sentinels)
}

func (k *keyedEncoder) finishResults(rs []FinishResult) {
	if rs == nil {
		_ = k.e.EncodeNil()
		return
	}
	_ = k.e.EncodeArrayLen(len(rs))
	for i := range rs {
		f := fields{e: k.e, count: true}
		finishResultFields(k, &f, &rs[i])
		f.header()
		finishResultFields(k, &f, &rs[i])
	}
}

func finishResultFields(k *keyedEncoder, f *fields, r *FinishResult) {
	f.uint(kResState, uint64(r.State))
	if r.Err != nil && f.key() {
		f.writeKey(kResErr)
		k.err(r.Err)
	}
}

func (k *keyedEncoder) claimParams(p *store.ClaimParams) {
	if p == nil {
		_ = k.e.EncodeNil()
		return
	}
	f := fields{e: k.e, count: true}
	claimParamsFields(&f, p)
	f.header()
	claimParamsFields(&f, p)
}

func claimParamsFields(f *fields, p *store.ClaimParams) {
	f.str(kClaimQueue, p.Queue)
	f.str(kClaimOwner, p.Owner)
	f.int(kClaimLimit, int64(p.Limit))
	f.time(kClaimNow, &p.Now)
	f.time(kClaimLeaseUntil, &p.LeaseUntil)
	f.uint(kClaimSeq, p.ClaimSeq)
	f.strs(kClaimKinds, p.Kinds)
	f.strs(kClaimLabels, p.Labels)
	if len(p.Limits) > 0 {
		f.strs(kClaimLimits, flatLimits(p.Limits))
		if ix := perKeyIndexes(p.Limits); len(ix) > 0 {
			f.strs(kClaimPerKey, ix)
		}
	}
	if len(p.RateLimits) > 0 {
		f.strs(kClaimRateLimits, flatRateLimits(p.RateLimits))
	}
}

func (k *keyedEncoder) claimResult(r *ClaimResult) {
	if r == nil {
		_ = k.e.EncodeNil()
		return
	}
	f := fields{e: k.e, count: true}
	claimResultFields(k, &f, r)
	f.header()
	claimResultFields(k, &f, r)
}

func claimResultFields(k *keyedEncoder, f *fields, r *ClaimResult) {
	if r.Instances != nil && f.key() {
		f.writeKey(kCResInstances)
		k.instances(r.Instances)
	}
	f.time(kCResNextRunAt, &r.NextRunAt)
	f.bool(kCResLimited, r.Limited)
	f.int(kCResRetryAfter, int64(r.RetryAfter))
	if r.Undecodable != nil && f.key() {
		f.writeKey(kCResUndecodable)
		_ = k.e.EncodeArrayLen(len(r.Undecodable))
		for i := range r.Undecodable {
			g := fields{e: k.e, count: true}
			undecodableFields(k, &g, &r.Undecodable[i])
			g.header()
			undecodableFields(k, &g, &r.Undecodable[i])
		}
	}
}

func undecodableFields(k *keyedEncoder, f *fields, u *Undecodable) {
	f.str(kUndID, u.ID)
	f.int(kUndAttempt, int64(u.Attempt))
	if u.Err != nil && f.key() {
		f.writeKey(kUndErr)
		k.err(u.Err)
	}
}

// keyedDecoder reads MsgpackKeyed from b with a msgpack.Decoder over r.
// As r is a bytes.Reader, the Decoder reads from it without a buffer of
// its own, so the decoder also takes strings and bytes straight from b.
// It is pooled with its Decoder and reader.
type keyedDecoder struct {
	d *msgpack.Decoder
	r bytes.Reader
	b []byte
	// interned are strings read before (kinds, queues, owners), returned
	// again instead of a new copy when the same bytes come back.
	interned []string
}

var decoders = sync.Pool{New: func() any {
	k := new(keyedDecoder)
	k.d = msgpack.NewDecoder(&k.r)
	return k
}}

// getDecoder returns a decoder reading b, for release.
func getDecoder(b []byte) *keyedDecoder {
	k := decoders.Get().(*keyedDecoder)
	k.b = b
	k.r.Reset(b)
	return k
}

// release puts k back in the pool.
func (k *keyedDecoder) release() {
	k.b = nil
	k.r.Reset(nil)
	clear(k.interned)
	k.interned = k.interned[:0]
	decoders.Put(k)
}

var errShort = errors.New("unexpected end of data")

// peek returns the code of the next value, read from b without a call
// through the Decoder's reader, or msgpcode.Nil at the end of b (what
// reads next then fails).
func (k *keyedDecoder) peek() byte {
	if k.r.Len() == 0 {
		return msgpcode.Nil
	}
	return k.b[len(k.b)-k.r.Len()]
}

// nil reports (and consumes) a nil.
func (k *keyedDecoder) nil() bool {
	if k.r.Len() == 0 || k.peek() != msgpcode.Nil {
		return false
	}
	return k.d.Skip() == nil
}

// length checks a map or array length n read by the Decoder: nil (-1) is
// not a map or array here, and a length beyond the bytes left (every
// element takes one at least) is refused before anything is allocated
// for it.
func (k *keyedDecoder) length(n int, err error, what string) (int, error) {
	switch {
	case err != nil:
		return 0, err
	case n < 0:
		return 0, fmt.Errorf("want %s, got nil", what)
	case n > k.r.Len():
		return 0, errShort
	}
	return n, nil
}

func (k *keyedDecoder) mapLen() (int, error) {
	n, err := k.d.DecodeMapLen()
	return k.length(n, err, "a map")
}

func (k *keyedDecoder) arrayLen() (int, error) {
	n, err := k.d.DecodeArrayLen()
	return k.length(n, err, "an array")
}

// raw reads a string or bytes and returns its bytes, which alias the
// decoder's input.
func (k *keyedDecoder) raw() ([]byte, error) {
	n, err := k.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, errors.New("want a string or bytes, got nil")
	}
	if n > k.r.Len() {
		return nil, errShort
	}
	at := len(k.b) - k.r.Len()
	if _, err := k.r.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return k.b[at : at+n : at+n], nil
}

func (k *keyedDecoder) str() (string, error) {
	v, err := k.raw()
	return string(v), err
}

// istr is str for values that repeat across records.
func (k *keyedDecoder) istr() (string, error) {
	v, err := k.raw()
	if err != nil {
		return "", err
	}
	for _, s := range k.interned {
		if s == string(v) {
			return s, nil
		}
	}
	s := string(v)
	if len(k.interned) < 8 {
		k.interned = append(k.interned, s)
	}
	return s, nil
}

// bin returns bytes that alias the decoder's input (never nil).
func (k *keyedDecoder) bin() ([]byte, error) {
	return k.raw()
}

// int reads an integer; a uint64 beyond math.MaxInt64 is refused, not
// wrapped.
func (k *keyedDecoder) int() (int64, error) {
	if k.peek() == msgpcode.Uint64 {
		u, err := k.d.DecodeUint64()
		if err == nil && u > math.MaxInt64 {
			err = fmt.Errorf("integer %d out of range", u)
		}
		return int64(u), err
	}
	return k.d.DecodeInt64()
}

// uint reads an unsigned integer; a negative one is refused, not wrapped.
func (k *keyedDecoder) uint() (uint64, error) {
	if k.peek() == msgpcode.Uint64 {
		return k.d.DecodeUint64()
	}
	v, err := k.d.DecodeInt64()
	if err == nil && v < 0 {
		err = fmt.Errorf("want an unsigned integer, got %d", v)
	}
	return uint64(v), err
}

func (k *keyedDecoder) intv() (int, error) {
	v, err := k.int()
	if err == nil && (v > math.MaxInt || v < math.MinInt) {
		err = fmt.Errorf("integer %d out of range", v)
	}
	return int(v), err
}

func (k *keyedDecoder) state() (store.State, error) {
	v, err := k.uint()
	if err == nil && v > math.MaxUint8 {
		err = fmt.Errorf("state %d out of range", v)
	}
	return store.State(v), err
}

func (k *keyedDecoder) bool() (bool, error) {
	return k.d.DecodeBool()
}

func (k *keyedDecoder) time() (time.Time, error) {
	return k.d.DecodeTime()
}

func (k *keyedDecoder) strs() ([]string, error) {
	n, err := k.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i := range out {
		if out[i], err = k.istr(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// fieldsOf reads a map and calls field for each key; field returns false
// for a key it does not know, whose value (a field a newer peer added) is
// skipped.
func (k *keyedDecoder) fieldsOf(what string, field func(k int64) (bool, error)) error {
	n, err := k.mapLen()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	for range n {
		// A key out of int64's range wraps to a negative key, which no
		// type has: it is skipped as unknown.
		key, err := k.d.DecodeInt64()
		if err != nil {
			return fmt.Errorf("%s: key: %w", what, err)
		}
		known, err := field(key)
		if err == nil && !known {
			err = k.d.Skip()
		}
		if err != nil {
			return fmt.Errorf("%s: field %d: %w", what, key, err)
		}
	}
	return nil
}

func (k *keyedDecoder) instances() ([]*store.Instance, error) {
	if k.nil() {
		return nil, nil
	}
	n, err := k.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]*store.Instance, n)
	for i := range out {
		if out[i], err = k.instance(); err != nil {
			return nil, fmt.Errorf("instance %d: %w", i, err)
		}
	}
	return out, nil
}

func (k *keyedDecoder) instance() (*store.Instance, error) {
	if k.nil() {
		return nil, nil
	}
	in := new(store.Instance)
	err := k.fieldsOf("instance", func(key int64) (bool, error) {
		var err error
		switch key {
		case kInstID:
			in.ID, err = k.str()
		case kInstKind:
			in.Kind, err = k.istr()
		case kInstQueue:
			in.Queue, err = k.istr()
		case kInstArgs:
			in.Args, err = k.bin()
		case kInstPriority:
			in.Priority, err = k.intv()
		case kInstRunAt:
			in.RunAt, err = k.time()
		case kInstState:
			in.State, err = k.state()
		case kInstAttempt:
			in.Attempt, err = k.intv()
		case kInstMaxRetries:
			in.MaxRetries, err = k.intv()
		case kInstTimeout:
			var v int64
			v, err = k.int()
			in.Timeout = time.Duration(v)
		case kInstUniqueKey:
			in.UniqueKey, err = k.str()
		case kInstUniqueUntil:
			in.UniqueUntil, err = k.time()
		case kInstLeaseOwner:
			in.LeaseOwner, err = k.istr()
		case kInstLeaseUntil:
			in.LeaseUntil, err = k.time()
		case kInstCancelRequested:
			in.CancelRequested, err = k.bool()
		case kInstSeq:
			in.Seq, err = k.uint()
		case kInstCreatedAt:
			in.CreatedAt, err = k.time()
		case kInstUpdatedAt:
			in.UpdatedAt, err = k.time()
		case kInstFinishedAt:
			in.FinishedAt, err = k.time()
		case kInstResult:
			in.Result, err = k.bin()
		case kInstError:
			in.Error, err = k.str()
		case kInstLabels:
			in.Labels, err = k.strs()
		case kInstMetadata:
			var n int
			if n, err = k.mapLen(); err != nil {
				return true, err
			}
			in.Metadata = make(map[string]string, n)
			for range n {
				var mk, mv string
				if mk, err = k.istr(); err != nil {
					return true, err
				}
				if mv, err = k.str(); err != nil {
					return true, err
				}
				in.Metadata[mk] = mv
			}
		case kInstParent:
			in.Parent, err = k.istr()
		case kInstShardIndex:
			in.ShardIndex, err = k.intv()
		case kInstShardCount:
			in.ShardCount, err = k.intv()
		case kInstTask:
			var b []byte
			if b, err = k.bin(); err == nil {
				in.Task, err = store.UnmarshalTask(b)
			}
		case kInstLimitKey:
			in.LimitKey, err = k.str()
		default:
			return false, nil
		}
		return true, err
	})
	return in, err
}

func (k *keyedDecoder) finishParams() (*store.FinishParams, error) {
	if k.nil() {
		return nil, nil
	}
	p := new(store.FinishParams)
	err := k.fieldsOf("finish parameters", func(key int64) (bool, error) {
		var err error
		switch key {
		case kFinOwner:
			p.Owner, err = k.str()
		case kFinNow:
			p.Now, err = k.time()
		case kFinOutcomes:
			var n int
			if n, err = k.arrayLen(); err != nil {
				return true, err
			}
			p.Outcomes = make([]store.Outcome, n)
			for i := range p.Outcomes {
				if err = k.outcome(&p.Outcomes[i]); err != nil {
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

func (k *keyedDecoder) outcome(o *store.Outcome) error {
	return k.fieldsOf("outcome", func(key int64) (bool, error) {
		var err error
		switch key {
		case kOutID:
			o.ID, err = k.str()
		case kOutAttempt:
			o.Attempt, err = k.intv()
		case kOutState:
			o.State, err = k.state()
		case kOutRunAt:
			o.RunAt, err = k.time()
		case kOutRelease:
			o.Release, err = k.bool()
		case kOutResult:
			o.Result, err = k.bin()
		case kOutError:
			o.Error, err = k.istr()
		default:
			return false, nil
		}
		return true, err
	})
}

func (k *keyedDecoder) err() (*Err, error) {
	e := new(Err)
	err := k.fieldsOf("error", func(key int64) (bool, error) {
		var err error
		switch key {
		case kErrMessage:
			e.Message, err = k.istr()
		case kErrSentinels:
			e.Sentinels, err = k.strs()
		default:
			return false, nil
		}
		return true, err
	})
	return e, err
}

func (k *keyedDecoder) finishResults() ([]FinishResult, error) {
	if k.nil() {
		return nil, nil
	}
	n, err := k.arrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]FinishResult, n)
	for i := range out {
		r := &out[i]
		err := k.fieldsOf("finish result", func(key int64) (bool, error) {
			var err error
			switch key {
			case kResState:
				r.State, err = k.state()
			case kResErr:
				r.Err, err = k.err()
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

func (k *keyedDecoder) claimParams() (*store.ClaimParams, error) {
	if k.nil() {
		return nil, nil
	}
	p := new(store.ClaimParams)
	var perKey []string
	err := k.fieldsOf("claim parameters", func(key int64) (bool, error) {
		var err error
		switch key {
		case kClaimQueue:
			p.Queue, err = k.str()
		case kClaimOwner:
			p.Owner, err = k.str()
		case kClaimLimit:
			p.Limit, err = k.intv()
		case kClaimNow:
			p.Now, err = k.time()
		case kClaimLeaseUntil:
			p.LeaseUntil, err = k.time()
		case kClaimSeq:
			p.ClaimSeq, err = k.uint()
		case kClaimKinds:
			p.Kinds, err = k.strs()
		case kClaimLabels:
			p.Labels, err = k.strs()
		case kClaimLimits:
			var flat []string
			if flat, err = k.strs(); err == nil {
				p.Limits, err = unflatLimits(flat)
			}
		case kClaimRateLimits:
			var flat []string
			if flat, err = k.strs(); err == nil {
				p.RateLimits, err = unflatRateLimits(flat)
			}
		case kClaimPerKey:
			perKey, err = k.strs()
		default:
			return false, nil
		}
		return true, err
	})
	if err == nil {
		err = setPerKey(p.Limits, perKey)
	}
	return p, err
}

func (k *keyedDecoder) claimResult() (*ClaimResult, error) {
	if k.nil() {
		return nil, nil
	}
	r := new(ClaimResult)
	err := k.fieldsOf("claim result", func(key int64) (bool, error) {
		var err error
		switch key {
		case kCResInstances:
			r.Instances, err = k.instances()
		case kCResNextRunAt:
			r.NextRunAt, err = k.time()
		case kCResLimited:
			r.Limited, err = k.bool()
		case kCResRetryAfter:
			var ns int64
			ns, err = k.int()
			r.RetryAfter = time.Duration(ns)
		case kCResUndecodable:
			var n int
			if n, err = k.arrayLen(); err != nil {
				return true, err
			}
			r.Undecodable = make([]Undecodable, n)
			for i := range r.Undecodable {
				u := &r.Undecodable[i]
				err = k.fieldsOf("undecodable", func(key int64) (bool, error) {
					var err error
					switch key {
					case kUndID:
						u.ID, err = k.str()
					case kUndAttempt:
						u.Attempt, err = k.intv()
					case kUndErr:
						u.Err, err = k.err()
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
