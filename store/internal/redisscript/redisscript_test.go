package redisscript

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// hashTag returns the part of key Redis Cluster hashes: the first {...}
// with something inside, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestKeysShareOneHashTag(t *testing.T) {
	k, err := NewKeys("tenant-7")
	if err != nil {
		t.Fatal(err)
	}
	keys := append(append([]string{}, k.Script...), k.Enqueue...)
	keys = append(keys, k.Ready("q{x}", -3), k.Sched("q"), k.KindDir("a}b"), k.KindBucket("a}b", 7), k.Levels("q"), k.Wake("q"), k.Prefix+"l:some-id")
	for _, key := range keys {
		if got := hashTag(key); got != "tenant-7" {
			t.Errorf("key %q hashes on %q, want the namespace tag", key, got)
		}
	}
	for _, bad := range []string{"", "a{b", "a}b"} {
		if _, err := NewKeys(bad); err == nil {
			t.Errorf("NewKeys(%q) accepted a namespace that breaks the hash tag", bad)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	at := time.Date(2026, 7, 8, 9, 10, 11, 123456000, time.UTC)
	in := &store.Instance{
		ID: "id-1", Kind: "k", Queue: "q", Args: []byte(`[1,"two",{"x":3}]`), Priority: -7,
		RunAt: at, State: store.Scheduled, MaxRetries: -1, Timeout: 90 * time.Second,
		UniqueKey: "u", UniqueUntil: at.Add(time.Hour), Seq: 1 << 40, CreatedAt: at, UpdatedAt: at.Add(time.Second),
	}
	spec := encodeFullSpec(in, in.UpdatedAt)
	got, err := DecodeInstance("id-1", spec, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip changed the instance:\n got %+v\nwant %+v", got, in)
	}
	for _, bad := range []string{"", "x", "\xa1k", spec[:40], spec + "\xc0"} {
		if _, err := DecodeInstance("id-2", bad, ""); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "id-2") {
			t.Errorf("DecodeInstance(%q): %v, want ErrCorrupt naming id-2", bad, err)
		}
	}
	for _, bad := range []string{"x", "\x93\x01\x02\x03"} {
		if _, err := DecodeInstance("id-3", spec, bad); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "id-3") {
			t.Errorf("DecodeInstance with state %q: %v, want ErrCorrupt naming id-3", bad, err)
		}
	}
}

func TestIDEncoding(t *testing.T) {
	for _, tc := range []struct {
		id   string
		size int
	}{
		{"0193a7c2-5d1e-7c3b-9f2a-4b8c6d0e1f23", 17},
		{"0193A7C2-5D1E-7C3B-9F2A-4B8C6D0E1F23", 37}, // not canonical: kept as text
		{"0193a7c2x5d1e-7c3b-9f2a-4b8c6d0e1f23", 37},
		{"ns-1", 5},
		{"", 1},
		{string([]byte{1, 2, 3}), 4},
	} {
		enc := EncodeID(tc.id)
		if len(enc) != tc.size {
			t.Errorf("EncodeID(%q) is %d bytes, want %d", tc.id, len(enc), tc.size)
		}
		got, err := DecodeID(enc)
		if err != nil || got != tc.id {
			t.Errorf("DecodeID(EncodeID(%q)) = %q, %v", tc.id, got, err)
		}
	}
	for _, bad := range []string{"", "\x01short", "\x02abc"} {
		if _, err := DecodeID(bad); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("DecodeID(%q): %v, want ErrCorrupt", bad, err)
		}
	}
}

func TestScriptsCarryTheirContract(t *testing.T) {
	for _, s := range All {
		own := s.Source[strings.Index(s.Source, "-- ---- "+s.Name+".lua ----"):]
		for _, part := range []string{"KEYS:", "ARGV:", "Returns"} {
			if !strings.Contains(own, part) {
				t.Errorf("script %s has no %q in its header", s.Name, part)
			}
		}
	}
}
