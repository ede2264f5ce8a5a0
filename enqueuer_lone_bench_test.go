package job

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// BenchmarkEnqueuerLoneCaller measures what group commit costs a lone
// caller (issue 19, must-have 2): the same store.Enqueue of one instance
// at a time, once called directly ("direct") and once through the
// manager's enqueuer ("enqueuer"), on a store whose Enqueue returns at
// once (so the figures are the callers' own), and the same two on
// memdbstore. The difference per call is the enqueuer's whole
// overhead for a caller with nobody else scheduling: two mutex sections
// and a deferred call, no goroutine and no channel
// (TestScheduleLoneCallerCallsTheStoreItself pins that the store call
// runs on the caller's goroutine).
//
//	go test -run '^$' -bench EnqueuerLoneCaller -benchmem .
func BenchmarkEnqueuerLoneCaller(b *testing.B) {
	now := time.Now()
	rec := func(i int) *store.Instance {
		return &store.Instance{ID: "lone-" + strconv.Itoa(i), Kind: "k", Queue: "default",
			Args: []byte(`["a",1]`), RunAt: now, CreatedAt: now, MaxRetries: 3}
	}
	for _, st := range []string{"nop", "memdb"} {
		open := func(b *testing.B) store.Store {
			if st == "nop" {
				return nopEnqueueStore{}
			}
			s, err := memdbstore.New()
			if err != nil {
				b.Fatal(err)
			}
			return s
		}
		benchLone(b, st, open, rec)
	}
}

func benchLone(b *testing.B, name string, open func(*testing.B) store.Store, rec func(int) *store.Instance) {
	ctx := context.Background()
	now := time.Now()
	b.Run(name+"/direct", func(b *testing.B) {
		s := open(b)
		recs := make([]*store.Instance, b.N)
		for i := range recs {
			recs[i] = rec(i)
		}
		b.ResetTimer()
		for i := range b.N {
			p := &store.EnqueueParams{Instances: []*store.Instance{recs[i]}, Node: "n", Now: now}
			if _, err := s.Enqueue(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/enqueuer", func(b *testing.B) {
		s := open(b)
		e := &enqueuer{st: s, node: "n", clock: SystemClock{}}
		recs := make([]*store.Instance, b.N)
		for i := range recs {
			recs[i] = rec(i)
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := e.enqueue(ctx, recs[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// nopEnqueueStore stores nothing: its Enqueue returns one result per
// instance at once. Only Enqueue may be called.
type nopEnqueueStore struct{ store.Store }

func (nopEnqueueStore) Enqueue(_ context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	out := make([]store.EnqueueResult, len(p.Instances))
	for i, in := range p.Instances {
		out[i] = store.EnqueueResult{ID: in.ID, Seq: uint64(i + 1)}
	}
	return out, nil
}
