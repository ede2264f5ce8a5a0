package redisscript

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jobkit/job/store"
)

// pack encodes values the way cmsgpack does (ints in their smallest form,
// strings as str, []any as arrays), for records the Go side never writes
// (states, history entries, log records) and for malformed ones.
func pack(t testing.TB, vals ...any) string {
	t.Helper()
	var b strings.Builder
	e := msgpack.NewEncoder(&b)
	var put func(v any) error
	put = func(v any) error {
		switch x := v.(type) {
		case nil:
			return e.EncodeNil()
		case bool:
			return e.EncodeBool(x)
		case int:
			return e.EncodeInt(int64(x))
		case int64:
			return e.EncodeInt(x)
		case uint64:
			return e.EncodeUint(x)
		case float32:
			return e.EncodeFloat32(x)
		case float64:
			return e.EncodeFloat64(x)
		case string:
			return e.EncodeString(x)
		case []byte:
			return e.EncodeBytes(x)
		case map[string]any:
			return e.Encode(x)
		case []any:
			if err := e.EncodeArrayLen(len(x)); err != nil {
				return err
			}
			for _, y := range x {
				if err := put(y); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("pack: %T", v)
	}
	for _, v := range vals {
		if err := put(v); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// specOf is a spec as the enqueue script stores it: Seq, the Go side's
// values, then its time, history delta and history sequence.
func specOf(t testing.TB, seq any, goPart string, tail ...any) string {
	return pack(t, seq) + goPart + pack(t, tail...)
}

var codecAt = time.Date(2026, 7, 8, 9, 10, 11, 123456000, time.UTC)

func codecInstance() *store.Instance {
	return &store.Instance{
		ID: "0193a7c2-5d1e-7c3b-9f2a-4b8c6d0e1f23", Kind: "email.send", Queue: "default",
		Args: []byte(`[{"to":"someone@example.com","template":"welcome"}]`), Priority: 0,
		RunAt: codecAt, State: store.Scheduled, MaxRetries: 25, Timeout: 30 * time.Minute,
		Seq: 123_456, CreatedAt: codecAt, UpdatedAt: codecAt,
	}
}

// stateOf is the state cmsgpack writes for in (lua/lib.lua T_*).
func stateOf(t testing.TB, in *store.Instance, refs string, hn int) string {
	cancel := 0
	if in.CancelRequested {
		cancel = 1
	}
	return pack(t, []any{int(in.State), in.Attempt, Micros(in.RunAt), in.LeaseOwner, Micros(in.LeaseUntil), cancel,
		Micros(in.UpdatedAt), Micros(in.FinishedAt), string(in.Result), in.Error, refs, hn})
}

// Codec micro-benchmarks: what the Go side spends per record.
func BenchmarkCodec(b *testing.B) {
	in := codecInstance()
	spec := encodeFullSpec(in, codecAt)
	done := *in
	done.State, done.Attempt, done.LeaseOwner, done.Result = store.Completed, 1, "host-1/1234", []byte(`{"sent":true}`)
	done.FinishedAt, done.UpdatedAt = codecAt.Add(time.Second), codecAt.Add(time.Second)
	state := stateOf(b, &done, "1732400000000-0 1732400000001-0 ", 4)
	sid := EncodeID(in.ID)
	hist := pack(b, "t", Micros(codecAt), "host-1/1234")
	for i := 0; i < 16; i++ {
		hist += pack(b, []any{sid, 4, 1, "", `{"sent":true}`, 4})
	}
	logRec := pack(b, []any{sid, in.Kind, 1, 2, Micros(codecAt), "host-1/1234", "sent the welcome email to someone", 7})

	b.Run("EncodeSpec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = EncodeSpec(in)
		}
	})
	b.Run("DecodeInstance", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeInstance(in.ID, spec, state); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeHistory16", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeHistory(hist); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DecodeLog", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeLog(logRec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
