package memdbstore_test

import (
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
				s = memdbstore.New()
				stores[ns] = s
			}
			return s
		},
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}
