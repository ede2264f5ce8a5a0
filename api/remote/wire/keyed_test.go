package wire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jobkit/job/store"
)

// keyedTypes are the types MsgpackKeyed writes by hand.
func keyedTypes() []any {
	return []any{&[]*store.Instance{}, new(*store.FinishParams), &[]FinishResult{}, new(*store.ClaimParams), new(*ClaimResult)}
}

// TestKeyedRoundTrip: every field of the types MsgpackKeyed writes by hand
// arrives as it left. The codec names each field itself, so a field added
// to store.Instance, store.Outcome, store.ClaimParams... fails here until
// it has a key of its own.
func TestKeyedRoundTrip(t *testing.T) {
	for _, v := range keyedTypes() {
		typ := reflect.TypeOf(v).Elem()
		t.Run(typ.String(), func(t *testing.T) {
			fill(t, reflect.ValueOf(v).Elem(), typ.String())
			b, err := MarshalKeyed(reflect.ValueOf(v).Elem().Interface())
			if err != nil {
				t.Fatal(err)
			}
			got := reflect.New(typ)
			if err := UnmarshalKeyed(b, got.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Interface(), v) {
				t.Fatalf("round trip changed the value:\n got %+v\nwant %+v", got.Elem().Interface(), reflect.ValueOf(v).Elem().Interface())
			}
			// It is MessagePack: a generic reader reads it too.
			dec := msgpack.NewDecoder(bytes.NewReader(b))
			dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
			if _, err := dec.DecodeInterface(); err != nil {
				t.Fatalf("not MessagePack: %v", err)
			}
			// Truncated, it is refused, never a panic.
			for i := range len(b) {
				if err := UnmarshalKeyed(b[:i], reflect.New(typ).Interface()); err == nil {
					t.Fatalf("%d of %d bytes decoded without an error", i, len(b))
				}
			}
		})
	}
}

// TestKeyedZeroAndEmpty: zero fields are left out, and nil and empty
// slices and maps stay apart; times keep their instant.
func TestKeyedZeroAndEmpty(t *testing.T) {
	now := time.Now()
	in := []*store.Instance{
		{ID: "a", Args: []byte{}, Labels: []string{}, Metadata: map[string]string{}, RunAt: now, MaxRetries: -1, Priority: -300, Timeout: 90 * time.Second},
		{ID: "b", RunAt: time.Unix(-5_000_000_000, 7), LeaseUntil: time.Unix(1<<35, 999_999_999), Seq: 1<<64 - 1},
		nil,
	}
	b, err := MarshalKeyed(in)
	if err != nil {
		t.Fatal(err)
	}
	var got []*store.Instance
	if err := UnmarshalKeyed(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2] != nil {
		t.Fatalf("got %d instances (%v), want 3 with the last nil", len(got), got)
	}
	a := got[0]
	if a.Args == nil || len(a.Args) != 0 || a.Labels == nil || len(a.Labels) != 0 || a.Metadata == nil || len(a.Metadata) != 0 {
		t.Fatalf("empty fields came back as %#v, %#v, %#v; want empty, not nil", a.Args, a.Labels, a.Metadata)
	}
	if a.Result != nil || a.State != 0 || !a.CreatedAt.IsZero() || a.Kind != "" {
		t.Fatalf("zero fields came back as %#v", a)
	}
	if !a.RunAt.Equal(now) || a.MaxRetries != -1 || a.Priority != -300 || a.Timeout != 90*time.Second {
		t.Fatalf("got %+v", a)
	}
	if bb := got[1]; !bb.RunAt.Equal(in[1].RunAt) || !bb.LeaseUntil.Equal(in[1].LeaseUntil) || bb.Seq != in[1].Seq {
		t.Fatalf("got run at %v, lease until %v, seq %d; want %v, %v, %d", bb.RunAt, bb.LeaseUntil, bb.Seq, in[1].RunAt, in[1].LeaseUntil, in[1].Seq)
	}
}

// TestKeyedUnknownKeys: a reader skips the keys a newer peer added, of any
// MessagePack type, and reads the rest.
func TestKeyedUnknownKeys(t *testing.T) {
	// An instance map as a newer jobd might write it: ID, then new keys
	// 100..107 with values of every shape, then Kind.
	b := []byte{0x91, 0x8a, kInstID}
	b = appendStr(b, "id")
	extras := [][]byte{
		appendStr(nil, "a newer field"),
		appendBin(nil, make([]byte, 300)),
		appendInt(nil, -1<<40),
		{0xcb, 0, 0, 0, 0, 0, 0, 0, 0},                        // float64
		appendTime(nil, time.Unix(1, 2)),                      // ext
		{0x92, 0x81, 0x01, 0xc0, 0x93, 0xc3, 0xc2, 0xa1, 'x'}, // array of a map and an array
		{0xc7, 3, 42, 1, 2, 3},                                // ext8 of another type
		{0xde, 0, 1, 0xa1, 'k', 0xdc, 0, 1, 0xc0},             // map16 holding an array16
	}
	for i, x := range extras {
		b = append(b, byte(100+i))
		b = append(b, x...)
	}
	b = append(b, kInstKind)
	b = appendStr(b, "k")
	var got []*store.Instance
	if err := UnmarshalKeyed(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "id" || got[0].Kind != "k" {
		t.Fatalf("got %+v", got)
	}
	// A known key with a value of another type is an error, not a guess.
	bad := append([]byte{0x91, 0x81, kInstAttempt}, appendStr(nil, "three")...)
	if err := UnmarshalKeyed(bad, &got); err == nil {
		t.Fatal("a string for Attempt decoded")
	}
}

// TestKeyedBadParams: parameters that do not decode are refused with
// store.ErrInvalid; methods without a keyed form fall back to Msgpack.
func TestKeyedBadParams(t *testing.T) {
	for _, m := range []string{MethodFinish, MethodClaim, MethodRenew} {
		if _, err := DecodeKeyed(m, []byte{0xc1}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("%s: got %v, want store.ErrInvalid", m, err)
		}
	}
	b, err := MarshalKeyed(&store.RenewParams{Owner: "n"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodeKeyed(MethodRenew, b)
	if err != nil || p.(*store.RenewParams).Owner != "n" {
		t.Fatalf("renew in msgpack: %v, %v", p, err)
	}
}

// benchTasks are 32 pushed no-op tasks and their outcomes, as in
// bench/cmd/remote-bench.
func benchTasks() ([]*store.Instance, *store.FinishParams, []FinishResult) {
	now := time.Now()
	var ins []*store.Instance
	fp := &store.FinishParams{Owner: "vm-1234-0123abcd", Now: now}
	var rs []FinishResult
	for i := range 32 {
		id := fmt.Sprintf("0b5e6c1c-5f0e-4a7e-9d2a-%012d", i)
		ins = append(ins, &store.Instance{ID: id, Kind: "noop", Queue: "default", Args: []byte("[]"), RunAt: now, State: store.Processing,
			Attempt: 1, MaxRetries: 3, LeaseOwner: fp.Owner, LeaseUntil: now.Add(30 * time.Second), Seq: uint64(1000 + i), CreatedAt: now, UpdatedAt: now})
		fp.Outcomes = append(fp.Outcomes, store.Outcome{ID: id, Attempt: 1, State: store.Completed, Result: []byte("[1795502344336029093]")})
		rs = append(rs, FinishResult{State: store.Completed})
	}
	return ins, fp, rs
}

// BenchmarkSessionEncoding: what one push of 32 tasks and the Finish of
// their outcomes cost to encode and decode, both ends together, in each
// session encoding.
func BenchmarkSessionEncoding(b *testing.B) {
	ins, fp, rs := benchTasks()
	for _, enc := range []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{Msgpack, MarshalMsgpack, UnmarshalMsgpack},
		{MsgpackKeyed, MarshalKeyed, UnmarshalKeyed},
	} {
		b.Run(enc.name, func(b *testing.B) {
			b.ReportAllocs()
			size := 0
			for b.Loop() {
				size = 0
				for _, v := range []struct{ in, out any }{
					{ins, new([]*store.Instance)}, {fp, new(*store.FinishParams)}, {rs, new([]FinishResult)},
				} {
					buf, err := enc.marshal(v.in)
					if err != nil {
						b.Fatal(err)
					}
					size += len(buf)
					if err := enc.unmarshal(buf, v.out); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(size)/32, "bytes/task")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/32, "ns/task")
		})
	}
}
