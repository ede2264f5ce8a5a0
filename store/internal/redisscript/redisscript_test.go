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
	keys := append([]string{}, k.Script...)
	keys = append(keys, k.Ready("q{x}"), k.Sched("q"), k.Kind("a}b"), k.Wake("q"), k.Prefix+"l:some-id")
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

func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 7, 8, 9, 10, 11, 123456000, time.UTC)
	in := &store.Instance{
		ID: "id-1", Kind: "k", Queue: "q", Args: []byte(`[1,"two",{"x":3}]`), Priority: -7,
		RunAt: at, State: store.Processing, Attempt: 2, MaxRetries: -1, Timeout: 90 * time.Second,
		UniqueKey: "u", UniqueUntil: at.Add(time.Hour), LeaseOwner: "node", LeaseUntil: at.Add(time.Minute),
		CancelRequested: true, Seq: 1 << 40, CreatedAt: at, UpdatedAt: at.Add(time.Second),
		FinishedAt: at.Add(2 * time.Second), Result: []byte(strings.Repeat("r", 70000)), Error: "boom",
	}
	got, err := DecodeRecord("id-1", EncodeRecord(in, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", got, in)
	}
	for _, bad := range []string{"", "x", "\x91\xa1k", EncodeRecord(in, "", 0)[:40]} {
		if _, err := DecodeRecord("id-2", bad); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "id-2") {
			t.Errorf("DecodeRecord(%q): %v, want ErrCorrupt naming id-2", bad, err)
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
