package redisstore_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestPagesOfADenseSecond: a lookup whose page ends inside a second holding
// thousands of instances of a kind (read newest first through the order
// keys, not whole; redisscript/lookup_order.go) pages through them in the
// exact order (CreatedAt, then Seq, newest first), each once, with filters
// and a time range, while CreatedAt order differs from enqueue order.
func TestPagesOfADenseSecond(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, client(t), fmt.Sprintf("dense-%d", time.Now().UnixNano()))
	sec := time.Date(2026, 11, 24, 3, 0, 0, 0, time.UTC)
	const n = 5000
	var all []*store.Instance
	for i := range n {
		q := "qa"
		if i%3 == 0 {
			q = "qb"
		}
		all = append(all, &store.Instance{
			ID: fmt.Sprintf("d-%05d", i), Kind: "dense", Queue: q, Args: []byte(`[]`),
			// Many share a microsecond, so Seq orders them.
			CreatedAt: sec.Add(time.Duration(rand.IntN(400)) * 2 * time.Microsecond),
			RunAt:     sec.Add(time.Hour),
		})
	}
	// A few in the seconds around it.
	for i, d := range []time.Duration{-time.Second, -time.Second, time.Second, 2 * time.Second} {
		all = append(all, &store.Instance{ID: fmt.Sprintf("o-%d", i), Kind: "dense", Queue: "qa", Args: []byte(`[]`),
			CreatedAt: sec.Add(d + time.Millisecond), RunAt: sec.Add(time.Hour)})
	}
	for i := 0; i < len(all); i += 1000 {
		part := all[i:min(i+1000, len(all))]
		res, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: part, Node: "n", Now: sec})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	stored, err := s.LookupInstances(ctx, &store.Query{Kind: "dense"})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != len(all) {
		t.Fatalf("stored %d, want %d", len(stored), len(all))
	}
	newest := func(a, b *store.Instance) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.Seq, a.Seq))
	}
	slices.SortFunc(stored, newest)

	for _, tc := range []struct {
		name string
		q    store.Query
	}{
		{"all", store.Query{}},
		{"kind", store.Query{Kind: "dense"}},
		{"queue", store.Query{Queue: "qb"}},
		{"range", store.Query{Kind: "dense", Since: sec.Add(100 * time.Microsecond), Until: sec.Add(700 * time.Microsecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for _, in := range stored {
				if tc.q.MatchInstance(in) {
					want = append(want, in.ID)
				}
			}
			for _, size := range []int{1, 100, 1000} {
				if size == 1 && len(want) > 600 {
					continue
				}
				var got []string
				q := tc.q
				q.Limit = size
				for range 10_000 {
					p, err := s.PageInstances(ctx, &q)
					if err != nil {
						t.Fatal(err)
					}
					for _, in := range p.Instances {
						got = append(got, in.ID)
					}
					if p.Next == "" {
						break
					}
					q.Cursor = p.Next
				}
				if !slices.Equal(got, want) {
					i := 0
					for i < min(len(got), len(want)) && got[i] == want[i] {
						i++
					}
					t.Fatalf("pages of %d: %d instances, want %d; first difference at %d", size, len(got), len(want), i)
				}
			}
		})
	}
}
