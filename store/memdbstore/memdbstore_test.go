package memdbstore_test

import (
	"errors"
	"sync"
	"testing"

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
		Open: func(t testing.TB, ns string) store.Store {
			mu.Lock()
			defer mu.Unlock()
			s := stores[ns]
			if s == nil {
				s = newStore(t)
				stores[ns] = s
			}
			return s
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}

// New reports an unusable option instead of ignoring it.
func TestNewRejectsBadOptions(t *testing.T) {
	for _, opt := range []memdbstore.Option{memdbstore.WithPruneLimit(0), memdbstore.WithPruneLimit(-1), nil} {
		if s, err := memdbstore.New(opt); !errors.Is(err, store.ErrInvalid) || s != nil {
			t.Errorf("New with a bad option: %v, %v; want nil and ErrInvalid", s, err)
		}
	}
	if _, err := memdbstore.New(memdbstore.WithPruneLimit(5)); err != nil {
		t.Errorf("New(WithPruneLimit(5)): %v", err)
	}
}
