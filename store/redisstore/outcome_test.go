package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
)

// A ScheduleJob whose deadline ends while redis-server is frozen
// (SIGSTOP) after the enqueue was sent says the outcome is unknown and
// names WithIdempotencyKey; the retry with the same key after SIGCONT
// leaves one instance. Before, it returned "redisstore: enqueue: context
// deadline exceeded", and Redis stored the instance once it resumed.
func TestScheduleOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", ctxTimeouts), func(t *testing.T) {
			t.Parallel()
			p := testserver.StartRedis(t)
			c := redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { c.Close() })
			port, err := testserver.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			refused := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
			t.Cleanup(func() { refused.Close() })
			jobtest.OutcomeUnknown(t, jobtest.Stalled{
				Store:   newStore(t, c, "outcome"),
				Refused: newStore(t, refused, "outcome"),
				Stall:   func(t testing.TB) func() { return freeze(t.(*testing.T), p) },
			})
		})
	}
}
