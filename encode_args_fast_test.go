package job

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAppendArgJSONIsMarshal checks that appendArgJSON writes exactly
// what json.Marshal writes, for the values it writes itself (strings,
// integers of every width, bools) at their edges and for strings that
// json.Marshal escapes (HTML characters, control characters, non-ASCII,
// invalid UTF-8, U+2028), and for values it leaves to json.Marshal.
func TestAppendArgJSONIsMarshal(t *testing.T) {
	vals := []any{
		"", "user@example.com", "a b", "~", "\x7f", "<", ">", "&", `"`, `\`, "\n", "\x00", "\x1f",
		"é", "日本", "\u2028", "\u2029", "\xff", "a\xc3", "tab\there",
		0, 1, -1, math.MaxInt, math.MinInt,
		int8(math.MinInt8), int8(math.MaxInt8), int16(math.MinInt16), int16(math.MaxInt16),
		int32(math.MinInt32), int32(math.MaxInt32), int64(math.MinInt64), int64(math.MaxInt64),
		uint(0), uint(math.MaxUint), uint8(0), uint8(math.MaxUint8), uint16(math.MaxUint16),
		uint32(math.MaxUint32), uint64(math.MaxUint64),
		true, false,
		1.5, float32(0.1), 1e21, math.Copysign(0, -1), nil, []byte("x"), []int{1}, level(3), htmlish{},
		map[string]int{"b": 1, "a": 2}, struct{ A string }{"<"},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(2) == 0 {
				b[i] = byte(0x20 + r.IntN(0x60)) // mostly printable ASCII
			}
		}
		vals = append(vals, string(b), r.Int64(), int(r.Int32()), r.Uint64())
	}
	for _, v := range vals {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendArgJSON([]byte("[x,"), v)
		if err != nil {
			t.Fatalf("appendArgJSON(%#v): %v", v, err)
		}
		if string(got) != "[x,"+string(want) {
			t.Errorf("appendArgJSON(%#v) = %s, want [x,%s", v, got, want)
		}
	}
	// An argument json.Marshal refuses is refused.
	if _, err := appendArgJSON(nil, math.NaN()); err == nil {
		t.Error("appendArgJSON(NaN): no error")
	}
	if _, err := encodeJSONArgs([]any{"a", make(chan int)}); err == nil {
		t.Error("encodeJSONArgs of a channel: no error")
	}
}
