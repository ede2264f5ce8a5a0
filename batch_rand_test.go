package job

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/jobkit/job/store/memdbstore"
)

// TestScheduleJobsIDs: the instances of a ScheduleJobs call, which take
// their IDs' random bytes from one batchRand (refilled every 256 IDs),
// get distinct UUIDv7 IDs in the items' order, as ScheduleJob's do.
func TestScheduleJobsIDs(t *testing.T) {
	mem, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJob(WithKind("k"), WithExecutor(func(n int) {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	items := make([]BatchItem, 1300)
	for i := range items {
		items[i] = BatchItem{Kind: "k", Options: []ScheduleOption{WithArguments(i)}}
	}
	res, err := m.ScheduleJobs(context.Background(), items...)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uuid.UUID]bool{}
	tails := map[[8]byte]bool{} // the random bytes after the variant
	prev := ""
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
		id := r.Instance.ID
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || u.String() != id {
			t.Fatalf("item %d: ID %q is not a canonical UUIDv7 (%v)", i, id, err)
		}
		if seen[u] {
			t.Fatalf("item %d: ID %s repeated", i, id)
		}
		seen[u] = true
		var tail [8]byte
		copy(tail[:], u[8:])
		if tails[tail] {
			t.Fatalf("item %d: ID %s repeats another's random bytes", i, id)
		}
		tails[tail] = true
		if id <= prev {
			t.Fatalf("item %d: ID %s not after %s", i, id, prev)
		}
		prev = id
	}
}

// TestBatchRand: reads take fresh bytes each time, across refills, and a
// read larger than the buffer is served whole.
func TestBatchRand(t *testing.T) {
	var r batchRand
	seen := map[[16]byte]bool{}
	for i := range 1000 {
		var b [16]byte
		if n, err := r.Read(b[:]); n != 16 || err != nil {
			t.Fatalf("read %d: %d, %v", i, n, err)
		}
		if seen[b] {
			t.Fatalf("read %d repeats an earlier one: %x", i, b)
		}
		seen[b] = true
	}
	big := make([]byte, 10000)
	if n, err := r.Read(big); n != len(big) || err != nil {
		t.Fatalf("large read: %d, %v", n, err)
	}
	var zero [16]byte
	if [16]byte(big[len(big)-16:]) == zero {
		t.Fatal("large read left its end zero")
	}
}
