package scripttest

import (
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// ExpireEvents is the storetest.Harness.ExpireEvents of the Redis and
// Valkey stores: it prunes every history entry (HistoryBefore far in the
// future), which makes every event cursor taken before expire.
func ExpireEvents(t testing.TB, s store.Store) {
	t.Helper()
	far := time.Date(2200, time.January, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.Prune(t.Context(), &store.PruneParams{Now: far, HistoryBefore: far, Limit: 1 << 20}); err != nil {
		t.Fatalf("prune the history stream: %v", err)
	}
}
