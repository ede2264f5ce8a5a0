package memdbstore_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness shares one *Store per namespace: handles of one namespace act
// as managers of one cluster.
func harness() storetest.Harness {
	var mu sync.Mutex
	stores := map[string]*memdbstore.Store{}
	return storetest.Harness{
		CancelNotifier: true,
		Limits:         true,
		KeyedLimits:    true,
		RateLimits:     true,
		Open: func(t testing.TB, ns string) store.Store {
			mu.Lock()
			defer mu.Unlock()
			s := stores[ns]
			if s == nil {
				s = newStore(t, memdbstore.WithEventBuffer(testEventBuffer))
				stores[ns] = s
			}
			return s
		},
		ExpireEvents: overflowEvents,
	}
}

// testEventBuffer is the event buffer of the conformance suite's stores:
// small, so overflowEvents overflows it quickly.
const testEventBuffer = 1024

// overflowEvents writes more events than the buffer holds, into a queue of
// its own, so every cursor taken before has fallen out of it.
func overflowEvents(t testing.TB, s store.Store) {
	t.Helper()
	ins := make([]*store.Instance, testEventBuffer/2+1)
	for i := range ins {
		id := fmt.Sprintf("overflow-%d-%d", time.Now().UnixNano(), i)
		ins[i] = &store.Instance{ID: id, Kind: "overflow", Queue: "overflow", RunAt: time.Unix(0, 0), CreatedAt: time.Unix(0, 0)}
	}
	if _, err := s.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Now: time.Unix(0, 0)}); err != nil {
		t.Fatalf("overflow the event buffer: %v", err)
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}

// New reports an unusable option instead of ignoring it.
func TestNewRejectsBadOptions(t *testing.T) {
	for _, opt := range []memdbstore.Option{memdbstore.WithPruneLimit(0), memdbstore.WithPruneLimit(-1), memdbstore.WithEventBuffer(0), nil} {
		if s, err := memdbstore.New(opt); !errors.Is(err, store.ErrInvalid) || s != nil {
			t.Errorf("New with a bad option: %v, %v; want nil and ErrInvalid", s, err)
		}
	}
	if _, err := memdbstore.New(memdbstore.WithPruneLimit(5)); err != nil {
		t.Errorf("New(WithPruneLimit(5)): %v", err)
	}
}
