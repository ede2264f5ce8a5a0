package redisscript

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jobkit/job/store"
)

// The record is a MessagePack array that Lua's cmsgpack reads and writes.
// Only what cmsgpack produces is decoded: nil, booleans, integers, floats,
// strings (str and bin) and arrays.

var errMsgpack = errors.New("not a record")

// enc appends MessagePack values.
type enc struct{ b []byte }

func (e *enc) int(v int64) {
	switch {
	case v >= 0 && v < 128:
		e.b = append(e.b, byte(v))
	case v < 0 && v >= -32:
		e.b = append(e.b, byte(v))
	case v >= math.MinInt8 && v <= math.MaxInt8:
		e.b = append(e.b, 0xd0, byte(v))
	case v >= math.MinInt16 && v <= math.MaxInt16:
		e.b = append(e.b, 0xd1)
		e.b = binary.BigEndian.AppendUint16(e.b, uint16(v))
	case v >= math.MinInt32 && v <= math.MaxInt32:
		e.b = append(e.b, 0xd2)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(v))
	default:
		e.b = append(e.b, 0xd3)
		e.b = binary.BigEndian.AppendUint64(e.b, uint64(v))
	}
}

func (e *enc) str(s string) {
	n := len(s)
	switch {
	case n < 32:
		e.b = append(e.b, 0xa0|byte(n))
	case n < 1<<8:
		e.b = append(e.b, 0xd9, byte(n))
	case n < 1<<16:
		e.b = append(e.b, 0xda, byte(n>>8), byte(n))
	default:
		e.b = append(e.b, 0xdb)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
	e.b = append(e.b, s...)
}

// dec reads MessagePack values.
type dec struct {
	b   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = errMsgpack
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) u(n int) uint64 {
	p := d.take(n)
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v
}

// value decodes one value: int64, float64, string, bool, nil or []any.
func (d *dec) value() any {
	p := d.take(1)
	if p == nil {
		return nil
	}
	c := p[0]
	switch {
	case c < 0x80:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c&0xf0 == 0x90:
		return d.arr(int(c & 0x0f))
	case c&0xe0 == 0xa0:
		return string(d.take(int(c & 0x1f)))
	}
	switch c {
	case 0xc0:
		return nil
	case 0xc2:
		return false
	case 0xc3:
		return true
	case 0xc4, 0xd9:
		return string(d.take(int(d.u(1))))
	case 0xc5, 0xda:
		return string(d.take(int(d.u(2))))
	case 0xc6, 0xdb:
		return string(d.take(int(d.u(4))))
	case 0xca:
		return float64(math.Float32frombits(uint32(d.u(4))))
	case 0xcb:
		return math.Float64frombits(d.u(8))
	case 0xcc:
		return int64(d.u(1))
	case 0xcd:
		return int64(d.u(2))
	case 0xce:
		return int64(d.u(4))
	case 0xcf:
		return int64(d.u(8))
	case 0xd0:
		return int64(int8(d.u(1)))
	case 0xd1:
		return int64(int16(d.u(2)))
	case 0xd2:
		return int64(int32(d.u(4)))
	case 0xd3:
		return int64(d.u(8))
	case 0xdc:
		return d.arr(int(d.u(2)))
	case 0xdd:
		return d.arr(int(d.u(4)))
	}
	d.err = errMsgpack
	return nil
}

func (d *dec) arr(n int) []any {
	if n > len(d.b) {
		d.err = errMsgpack
		return nil
	}
	a := make([]any, n)
	for i := range a {
		a[i] = d.value()
	}
	return a
}

// decodeArray decodes raw as an array of n values whose types follow
// schema ('s' string, 'n' number).
func decodeArray(raw string, schema string) ([]any, error) {
	d := dec{b: []byte(raw)}
	v := d.value()
	a, ok := v.([]any)
	if d.err != nil || !ok || len(d.b) != 0 {
		return nil, errMsgpack
	}
	return a, checkSchema(a, schema)
}

// checkSchema checks that a holds one value per schema letter of the
// right type, turning integral floats into int64.
func checkSchema(a []any, schema string) error {
	if len(a) != len(schema) {
		return errMsgpack
	}
	for i, c := range schema {
		switch c {
		case 's':
			if _, ok := a[i].(string); !ok {
				return errMsgpack
			}
		case 'n':
			switch f := a[i].(type) {
			case int64:
			case float64:
				// cmsgpack writes integral Lua numbers as integers; a
				// float here is still accepted when it is integral.
				if f != math.Trunc(f) {
					return errMsgpack
				}
				a[i] = int64(f)
			default:
				return errMsgpack
			}
		}
	}
	return nil
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
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

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

// Spec and state schemas, in lua/lib.lua's P_* and T_* order.
const (
	specSchema  = "nsssnnnnsnnnnn"
	stateSchema = "nnnsnnnnsssn"
)

// EncodeSpec returns the ten values of in's spec that the Go side writes
// (lua/lib.lua); the enqueue script puts Seq before them and three values
// after.
func EncodeSpec(in *store.Instance) string {
	var e enc
	e.str(in.Kind)
	e.str(in.Queue)
	e.str(string(in.Args))
	e.int(int64(in.Priority))
	e.int(Micros(in.RunAt))
	e.int(int64(in.MaxRetries))
	e.int(int64(in.Timeout))
	e.str(in.UniqueKey)
	e.int(Micros(in.UniqueUntil))
	e.int(Micros(in.CreatedAt))
	return string(e.b)
}

// encodeFullSpec is EncodeSpec with the enqueue script's tail, for a spec
// written from Go (a damaged one replaced, see Core.Claim); hseq -1 names
// no history entry.
func encodeFullSpec(in *store.Instance, enq time.Time) string {
	var e enc
	e.int(int64(in.Seq))
	e.b = append(e.b, EncodeSpec(in)...)
	e.int(Micros(enq))
	e.int(0)
	e.int(-1)
	return string(e.b)
}

// decodeValues decodes raw as consecutive values following schema.
func decodeValues(raw, schema string) ([]any, error) {
	d := dec{b: []byte(raw)}
	var a []any
	for len(d.b) > 0 && d.err == nil {
		a = append(a, d.value())
	}
	if d.err != nil {
		return nil, errMsgpack
	}
	return a, checkSchema(a, schema)
}

// DecodeInstance decodes the instance stored under id from its spec and
// its state ("" when it has not run yet). The error wraps store.ErrCorrupt
// and names the instance.
func DecodeInstance(id, spec, state string) (*store.Instance, error) {
	p, err := decodeValues(spec, specSchema)
	if err != nil {
		return nil, corrupt("instance "+id, spec)
	}
	s := func(i int) string { return p[i].(string) }
	n := func(i int) int64 { return p[i].(int64) }
	in := &store.Instance{
		ID:          id,
		Seq:         uint64(n(0)),
		Kind:        s(1),
		Queue:       s(2),
		Priority:    int(n(4)),
		RunAt:       FromMicros(n(5)),
		State:       store.Scheduled,
		MaxRetries:  int(n(6)),
		Timeout:     time.Duration(n(7)),
		UniqueKey:   s(8),
		UniqueUntil: FromMicros(n(9)),
		CreatedAt:   FromMicros(n(10)),
		UpdatedAt:   FromMicros(n(11)),
	}
	if a := s(3); a != "" {
		in.Args = []byte(a)
	}
	if state == "" {
		return in, nil
	}
	t, err := decodeArray(state, stateSchema)
	if err != nil {
		return nil, corrupt("the state of instance "+id, state)
	}
	ts := func(i int) string { return t[i].(string) }
	tn := func(i int) int64 { return t[i].(int64) }
	in.State = store.State(tn(0))
	in.Attempt = int(tn(1))
	if r := tn(2); r != 0 {
		in.RunAt = FromMicros(r)
	}
	in.LeaseOwner = ts(3)
	in.LeaseUntil = FromMicros(tn(4))
	in.CancelRequested = tn(5) == 1
	in.UpdatedAt = FromMicros(tn(6))
	in.FinishedAt = FromMicros(tn(7))
	if r := ts(8); r != "" {
		in.Result = []byte(r)
	}
	in.Error = ts(9)
	if !in.State.Valid() {
		return nil, corrupt("the state of instance "+id, state)
	}
	return in, nil
}

// decodeHistory decodes a history stream entry value: 'e' (an enqueue:
// now, node, then IDs, each standing for a Created and a Scheduled record)
// or 't' (now, node, then one {id, state, attempt, error, result, seq} per
// record). Records carry their stored ID in InstanceID, decoded, and no
// Kind: the caller fills it in from the instance's spec.
func decodeHistory(raw string) ([]*store.HistoryRecord, error) {
	d := dec{b: []byte(raw)}
	tag, _ := d.value().(string)
	at, ok1 := d.value().(int64)
	node, ok2 := d.value().(string)
	if d.err != nil || !ok1 || !ok2 || (tag != "e" && tag != "t") {
		return nil, corrupt("history entry", raw)
	}
	t := FromMicros(at)
	var out []*store.HistoryRecord
	for len(d.b) > 0 {
		v := d.value()
		if d.err != nil {
			return nil, corrupt("history entry", raw)
		}
		if tag == "e" {
			sid, ok := v.(string)
			id, err := DecodeID(sid)
			if !ok || err != nil {
				return nil, corrupt("history entry", raw)
			}
			out = append(out,
				&store.HistoryRecord{InstanceID: id, State: store.Created, Time: t, Node: node, Seq: 1},
				&store.HistoryRecord{InstanceID: id, State: store.Scheduled, Time: t, Node: node, Seq: 2})
			continue
		}
		a, ok := v.([]any)
		if !ok || checkSchema(a, "snnssn") != nil {
			return nil, corrupt("history entry", raw)
		}
		id, err := DecodeID(a[0].(string))
		if err != nil {
			return nil, corrupt("history entry", raw)
		}
		h := &store.HistoryRecord{
			InstanceID: id,
			State:      store.State(a[1].(int64)),
			Attempt:    int(a[2].(int64)),
			Time:       t,
			Node:       node,
			Error:      a[3].(string),
			Seq:        uint64(a[5].(int64)),
		}
		if r := a[4].(string); r != "" {
			h.Result = []byte(r)
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, corrupt("history entry", raw)
	}
	return out, nil
}

const logSchema = "ssnnnssn"

// decodeLog decodes a logs stream entry value.
func decodeLog(raw string) (*store.LogRecord, error) {
	a, err := decodeArray(raw, logSchema)
	if err != nil {
		return nil, corrupt("log record", raw)
	}
	id, err := DecodeID(a[0].(string))
	if err != nil {
		return nil, corrupt("log record", raw)
	}
	return &store.LogRecord{
		InstanceID: id,
		Kind:       a[1].(string),
		Attempt:    int(a[2].(int64)),
		Level:      store.LogLevel(a[3].(int64)),
		Time:       FromMicros(a[4].(int64)),
		Node:       a[5].(string),
		Message:    a[6].(string),
		Seq:        uint64(a[7].(int64)),
	}, nil
}

func corrupt(what, raw string) error {
	if len(raw) > 32 {
		raw = raw[:32] + "..."
	}
	return fmt.Errorf("%w: %s holds %q, which is not a jobkit record (written by something else or damaged; delete it or restore it)", store.ErrCorrupt, what, raw)
}
