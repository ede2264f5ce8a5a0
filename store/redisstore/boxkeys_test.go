package redisstore

import (
	"testing"

	"github.com/jobkit/job/store/internal/redisscript"
)

// TestBoxKeysKeepsBothSlices: a Core's calls alternate between its three
// key slices (the enqueue's seven keys, the lean enqueue's one, the
// other scripts' twelve), and each keeps its interface values: no
// allocation per call once all were seen, and each call gets its own
// keys.
func TestBoxKeysKeepsBothSlices(t *testing.T) {
	k, err := redisscript.NewKeys("boxkeys")
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{}
	check := func(keys []string) {
		got := r.boxKeys(keys)
		if len(got) != len(keys) {
			t.Fatalf("%d keys boxed, want %d", len(got), len(keys))
		}
		for i, v := range got {
			if v != any(keys[i]) {
				t.Fatalf("key %d boxed as %v, want %q", i, v, keys[i])
			}
		}
	}
	check(k.Enqueue)
	check(k.Script)
	check(k.EnqueueOne)
	if n := testing.AllocsPerRun(100, func() {
		r.boxKeys(k.Enqueue)
		r.boxKeys(k.Script)
		r.boxKeys(k.EnqueueOne)
	}); n != 0 {
		t.Fatalf("%v allocations per enqueue, claim and lone enqueue call, want 0: a slice's boxed keys were not kept", n)
	}
	check(k.Enqueue)
	check(k.Script)
	check(k.EnqueueOne)
}
