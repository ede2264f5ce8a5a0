package scripttest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
	"github.com/jobkit/job/store/memdbstore"
)

// batchCase is one instance of a batch and what it must come to.
type batchCase struct {
	in   *store.Instance
	want string // "stored", "existed", "duplicate"
	// holder is the ID a duplicate names, or the ID an existing one has.
	holder string
}

// testBatchEnqueue: one Enqueue of many instances that differ in every
// way the enqueue script groups them by (kind, queue, priority, labels,
// CreatedAt second, due or delayed, metadata, shard fields, unique keys),
// with repeated IDs, IDs stored before, unique keys held before and
// taken twice in the batch, and IDs of every width the history entry
// packs, gives per-item results, stored instances, claim order, kind
// lookups and history as memdbstore gives them; nothing is stored for
// the rejected ones.
func testBatchEnqueue(t *testing.T, h Harness) {
	addr := testserver.Redis(t)
	rs := h.Open(t, addr, ns(t))
	ms, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	now := base.Add(10 * time.Second)
	mk := func(id, kind, queue string) *store.Instance {
		return &store.Instance{ID: id, Kind: kind, Queue: queue, Args: []byte(`"` + id + `"`), RunAt: now, CreatedAt: now, MaxRetries: 2, Timeout: time.Minute}
	}
	// Before the batch: an instance whose ID the batch repeats, and a
	// holder of a unique key the batch asks for.
	pre := mk("pre-1", "k.a", "q1")
	pre.RunAt = base // due when stored (a due move's place in a lane is the store's own)
	preHolder := mk("pre-holder", "k.a", "q1")
	preHolder.RunAt = base
	preHolder.UniqueKey, preHolder.UniqueUntil = "held", now.Add(time.Hour)
	expired := mk("pre-expired", "k.a", "q1")
	expired.UniqueKey, expired.UniqueUntil = "expired", now.Add(-time.Second)
	expired.CreatedAt, expired.RunAt = base, base
	for _, s := range []store.Store{rs, ms} {
		res, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: []*store.Instance{pre, preHolder, expired}, Node: "n", Now: base})
		if err != nil || res[0].Err != nil || res[1].Err != nil || res[2].Err != nil {
			t.Fatalf("Enqueue before the batch: %v %+v", err, res)
		}
	}

	var cases []batchCase
	add := func(in *store.Instance, want, holder string) { cases = append(cases, batchCase{in, want, holder}) }
	for i := range 1300 { // more than a chunk of 1,000 arguments
		in := mk(fmt.Sprintf("01900000-0000-7000-8000-%012d", i), "k.a", "q1")
		switch {
		case i%7 == 3:
			in.Kind, in.Queue, in.Priority = "k.b", "q2", 3
		case i%11 == 5:
			in.Labels = []string{"gpu", "region=eu"}
			in.Metadata = map[string]string{"tenant": fmt.Sprint(i % 4)}
		case i%13 == 7:
			in.RunAt = now.Add(time.Duration(i) * time.Second) // delayed
		case i%17 == 9:
			in.Priority = -2
			in.CreatedAt = now.Add(time.Second) // another second's bucket
		case i%19 == 1 && i < 19*4:
			in.Parent, in.ShardIndex, in.ShardCount = "parent-x", i/19, 4
			in.ID = store.ShardID(in.Parent, in.ShardIndex)
		case i%23 == 2:
			in.UniqueKey, in.UniqueUntil = fmt.Sprint("uk-", i), now.Add(time.Minute)
		}
		add(in, "stored", "")
		switch i {
		case 100: // the ID stored before the batch
			add(pre, "existed", "pre-1")
		case 200: // a unique key held before the batch
			d := mk("dup-held", "k.a", "q1")
			d.UniqueKey, d.UniqueUntil = "held", now.Add(time.Hour)
			add(d, "duplicate", "pre-holder")
		case 300: // a key held before, but no longer
			d := mk("takes-expired", "k.a", "q1")
			d.UniqueKey, d.UniqueUntil = "expired", now.Add(time.Hour)
			add(d, "stored", "")
		case 400: // an ID of this batch again: exists by then
			add(cases[0].in, "existed", cases[0].in.ID)
		case 500: // a unique key taken earlier in the batch
			first := mk("key-first", "k.c", "q2")
			first.UniqueKey, first.UniqueUntil = "batch-key", now.Add(time.Hour)
			second := mk("key-second", "k.c", "q2")
			second.UniqueKey, second.UniqueUntil = "batch-key", now.Add(time.Hour)
			add(first, "stored", "")
			add(second, "duplicate", "key-first")
		case 600: // a rejected ID again, with a free key: now stored
			again := mk("key-second", "k.c", "q2")
			again.UniqueKey, again.UniqueUntil = "other-key", now.Add(time.Hour)
			add(again, "stored", "")
		case 700: // IDs the history entry packs in each of its widths
			add(mk(strings.Repeat("w", 40), "k.a", "q1"), "stored", "")
			add(mk(strings.Repeat("v", 300), "k.a", "q1"), "stored", "")
			add(mk(strings.Repeat("x", 30), "k.a", "q1"), "stored", "")
		}
	}
	ins := make([]*store.Instance, len(cases))
	for i, c := range cases {
		ins[i] = c.in
	}
	results := map[store.Store][]store.EnqueueResult{}
	for _, s := range []store.Store{rs, ms} {
		res, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Node: "batch-node", Now: now})
		if err != nil {
			t.Fatalf("%T: Enqueue of %d: %v", s, len(ins), err)
		}
		if len(res) != len(ins) {
			t.Fatalf("%T: %d results for %d instances", s, len(res), len(ins))
		}
		results[s] = res
	}
	// Per-item results, as memdbstore has them.
	got := results[rs]
	var lastSeq uint64
	for i, c := range cases {
		r, m := got[i], results[ms][i]
		switch c.want {
		case "stored":
			if r.Err != nil || r.Existed || r.ID != c.in.ID || r.Seq <= lastSeq {
				t.Fatalf("instance %d (%.40s): %+v; want it stored with a Seq above %d", i, c.in.ID, r, lastSeq)
			}
			lastSeq = r.Seq
		case "existed":
			if r.Err != nil || !r.Existed || r.ID != c.holder || r.Seq == 0 {
				t.Fatalf("instance %d (%s): %+v; want it reported as existing", i, c.in.ID, r)
			}
		case "duplicate":
			if !errors.Is(r.Err, store.ErrDuplicate) || r.ID != c.holder || r.Seq != 0 {
				t.Fatalf("instance %d (%s): %+v; want ErrDuplicate naming %s", i, c.in.ID, r, c.holder)
			}
		}
		if (r.Err == nil) != (m.Err == nil) || r.Existed != m.Existed || r.ID != m.ID {
			t.Fatalf("instance %d (%.40s): %+v, memdbstore %+v", i, c.in.ID, r, m)
		}
	}
	// An existing one reports the Seq the instance has.
	for i, c := range cases {
		if c.want == "existed" {
			if g := getOne(t, rs, c.holder); g.Seq != got[i].Seq {
				t.Fatalf("instance %d reported existing with Seq %d, the instance has %d", i, got[i].Seq, g.Seq)
			}
		}
	}
	// What is stored: every field of every instance, as memdbstore has it
	// (Seq aside: each store numbers its own).
	norm := func(in *store.Instance) *store.Instance {
		c := *in
		c.Seq, c.UpdatedAt = 0, time.Time{}
		if len(c.Labels) == 0 {
			c.Labels = nil
		}
		if len(c.Metadata) == 0 {
			c.Metadata = nil
		}
		return &c
	}
	for i, r := range got {
		if r.Err != nil || r.Existed {
			continue
		}
		a, b := getOne(t, rs, r.ID), getOne(t, ms, r.ID)
		if a.Seq != r.Seq {
			t.Fatalf("instance %d: stored with Seq %d, reported %d", i, a.Seq, r.Seq)
		}
		if fmt.Sprintf("%+v", norm(a)) != fmt.Sprintf("%+v", norm(b)) {
			t.Fatalf("instance %d stored as\n%+v\nmemdbstore:\n%+v", i, norm(a), norm(b))
		}
	}
	for _, id := range []string{"dup-held"} {
		if l, err := rs.LookupInstances(t.Context(), &store.Query{InstanceID: id}); err != nil || len(l) != 0 {
			t.Fatalf("rejected %s: lookup %v, %v; want nothing stored", id, ids(l), err)
		}
		if hist, err := rs.LookupHistory(t.Context(), &store.Query{InstanceID: id}); err != nil || len(hist) != 0 {
			t.Fatalf("rejected %s left %d history records (%v)", id, len(hist), err)
		}
	}
	// Lookups by kind (the kind buckets) and history (the shared entry).
	for _, kind := range []string{"k.a", "k.b", "k.c"} {
		a, errA := rs.LookupInstances(t.Context(), &store.Query{Kind: kind})
		b, errB := ms.LookupInstances(t.Context(), &store.Query{Kind: kind})
		if errA != nil || errB != nil || !slices.Equal(batchSortedIDs(a), batchSortedIDs(b)) {
			t.Fatalf("kind %s: %d instances (%v), memdbstore %d (%v)", kind, len(a), errA, len(b), errB)
		}
	}
	for i, r := range got {
		if i%50 != 0 && len(r.ID) < 30 {
			continue
		}
		a, errA := rs.LookupHistory(t.Context(), &store.Query{InstanceID: r.ID})
		b, errB := ms.LookupHistory(t.Context(), &store.Query{InstanceID: r.ID})
		if errA != nil || errB != nil || len(a) != len(b) {
			t.Fatalf("history of %.40s: %d records (%v), memdbstore %d (%v)", r.ID, len(a), errA, len(b), errB)
		}
		for k := range a {
			if a[k].State != b[k].State || a[k].Node != b[k].Node || !a[k].Time.Equal(b[k].Time) {
				t.Fatalf("history of %.40s, record %d: %+v, memdbstore %+v", r.ID, k, a[k], b[k])
			}
		}
	}
	// Claim order, queue by queue, with every label, now and later.
	for _, at := range []time.Time{now, now.Add(time.Hour)} {
		for _, q := range []string{"q1", "q2"} {
			var order [2][]string
			for k, s := range []store.Store{rs, ms} {
				for {
					res, err := s.Claim(t.Context(), &store.ClaimParams{Queue: q, Owner: "w", Limit: 100, Now: at, LeaseUntil: at.Add(time.Hour),
						Labels: []string{"gpu", "region=eu"}})
					if err != nil {
						t.Fatalf("%T: Claim: %v", s, err)
					}
					if len(res.Instances) == 0 {
						break
					}
					order[k] = append(order[k], ids(res.Instances)...)
				}
			}
			if !slices.Equal(order[0], order[1]) {
				k := 0
				for k < len(order[0]) && k < len(order[1]) && order[0][k] == order[1][k] {
					k++
				}
				t.Fatalf("claim order of %s at %v differs from memdbstore's at %d of %d/%d: %q, memdbstore %q",
					q, at, k, len(order[0]), len(order[1]), order[0][k:min(k+4, len(order[0]))], order[1][k:min(k+4, len(order[1]))])
			}
		}
	}
}

func getOne(t *testing.T, s store.Store, id string) *store.Instance {
	t.Helper()
	l, err := s.LookupInstances(t.Context(), &store.Query{InstanceID: id})
	if err != nil || len(l) != 1 {
		t.Fatalf("%T: lookup of %.40s: %d, %v", s, id, len(l), err)
	}
	return l[0]
}

func batchSortedIDs(ins []*store.Instance) []string {
	s := ids(ins)
	slices.Sort(s)
	return s
}

// testBatchSeqWidths: a batch whose Seqs cross each width at which the
// spec's MessagePack Seq and the ready entries' 6-byte Seq change bytes
// other than the last (127/128, multiples of 256, 65,536, 2^32) stores
// each instance with its own Seq and claims them in order.
func testBatchSeqWidths(t *testing.T, h Harness) {
	addr := testserver.Redis(t)
	for _, start := range []int64{0, 65_400, 1<<32 - 300} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			n := ns(t)
			s := h.Open(t, addr, n)
			keys, _ := redisscript.NewKeys(n)
			if err := raw(t, addr).HSet(t.Context(), keys.Prefix+"ctr", "seq", start).Err(); err != nil {
				t.Fatal(err)
			}
			var ins []*store.Instance
			for i := range 600 {
				ins = append(ins, inst(fmt.Sprintf("sw-%04d", i), "q"))
			}
			res, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Node: "n", Now: base})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if r.Err != nil || r.Seq != uint64(start)+uint64(i)+1 {
					t.Fatalf("instance %d: %+v, want Seq %d", i, r, start+int64(i)+1)
				}
				if i%37 == 0 || r.Seq%256 == 0 || r.Seq%256 == 255 || r.Seq == 128 {
					if g := getOne(t, s, r.ID); g.Seq != r.Seq {
						t.Fatalf("instance %d stored with Seq %d, reported %d", i, g.Seq, r.Seq)
					}
				}
			}
			var order []string
			for {
				c := claim(t, s, "q", 250, base)
				if len(c.Instances) == 0 {
					break
				}
				for _, in := range c.Instances {
					if in.Seq != res[len(order)].Seq {
						t.Fatalf("claimed %s with Seq %d, enqueued with %d", in.ID, in.Seq, res[len(order)].Seq)
					}
					order = append(order, in.ID)
				}
			}
			if !slices.Equal(order, ids(ins)) {
				t.Fatalf("claimed %d in another order than enqueued", len(order))
			}
		})
	}
}
