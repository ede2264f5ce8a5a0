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

func (e *enc) array(n int) {
	switch {
	case n < 16:
		e.b = append(e.b, 0x90|byte(n))
	case n < 1<<16:
		e.b = append(e.b, 0xdc, byte(n>>8), byte(n))
	default:
		e.b = append(e.b, 0xdd)
		e.b = binary.BigEndian.AppendUint32(e.b, uint32(n))
	}
}

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

// Record field schema, in lua/lib.lua's F_* order.
const recordSchema = "sssnnnnnnsnsnnnnnnsssn"

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

// EncodeRecord encodes in for the scripts. Times keep microseconds.
func EncodeRecord(in *store.Instance, hist string, hn int) string {
	var e enc
	e.array(22)
	e.str(in.Kind)
	e.str(in.Queue)
	e.str(string(in.Args))
	e.int(int64(in.Priority))
	e.int(Micros(in.RunAt))
	e.int(int64(in.State))
	e.int(int64(in.Attempt))
	e.int(int64(in.MaxRetries))
	e.int(int64(in.Timeout))
	e.str(in.UniqueKey)
	e.int(Micros(in.UniqueUntil))
	e.str(in.LeaseOwner)
	e.int(Micros(in.LeaseUntil))
	if in.CancelRequested {
		e.int(1)
	} else {
		e.int(0)
	}
	e.int(int64(in.Seq))
	e.int(Micros(in.CreatedAt))
	e.int(Micros(in.UpdatedAt))
	e.int(Micros(in.FinishedAt))
	e.str(string(in.Result))
	e.str(in.Error)
	e.str(hist)
	e.int(int64(hn))
	return string(e.b)
}

// DecodeRecord decodes the record of instance id. The error wraps
// store.ErrCorrupt and names the instance.
func DecodeRecord(id, raw string) (*store.Instance, error) {
	a, err := decodeArray(raw, recordSchema)
	if err != nil {
		return nil, corrupt("instance "+id, raw)
	}
	s := func(i int) string { return a[i].(string) }
	n := func(i int) int64 { return a[i].(int64) }
	in := &store.Instance{
		ID:              id,
		Kind:            s(0),
		Queue:           s(1),
		Priority:        int(n(3)),
		RunAt:           FromMicros(n(4)),
		State:           store.State(n(5)),
		Attempt:         int(n(6)),
		MaxRetries:      int(n(7)),
		Timeout:         time.Duration(n(8)),
		UniqueKey:       s(9),
		UniqueUntil:     FromMicros(n(10)),
		LeaseOwner:      s(11),
		LeaseUntil:      FromMicros(n(12)),
		CancelRequested: n(13) == 1,
		Seq:             uint64(n(14)),
		CreatedAt:       FromMicros(n(15)),
		UpdatedAt:       FromMicros(n(16)),
		FinishedAt:      FromMicros(n(17)),
		Error:           s(19),
	}
	if a := s(2); a != "" {
		in.Args = []byte(a)
	}
	if r := s(18); r != "" {
		in.Result = []byte(r)
	}
	if !in.State.Valid() {
		return nil, corrupt("instance "+id, raw)
	}
	return in, nil
}

const historySchema = "ssnnnsssn"

// decodeHistory decodes a history stream entry value: one or more records.
func decodeHistory(raw string) ([]*store.HistoryRecord, error) {
	d := dec{b: []byte(raw)}
	var out []*store.HistoryRecord
	for len(d.b) > 0 {
		v := d.value()
		a, ok := v.([]any)
		if d.err != nil || !ok || checkSchema(a, historySchema) != nil {
			return nil, corrupt("history record", raw)
		}
		h := &store.HistoryRecord{
			InstanceID: a[0].(string),
			Kind:       a[1].(string),
			State:      store.State(a[2].(int64)),
			Attempt:    int(a[3].(int64)),
			Time:       FromMicros(a[4].(int64)),
			Node:       a[5].(string),
			Error:      a[6].(string),
			Seq:        uint64(a[8].(int64)),
		}
		if r := a[7].(string); r != "" {
			h.Result = []byte(r)
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		return nil, corrupt("history record", raw)
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
	return &store.LogRecord{
		InstanceID: a[0].(string),
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
