package valkeystore_test

import (
	"syscall"
	"testing"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
)

// A ScheduleJob whose deadline ends while the server is frozen (SIGSTOP)
// after the enqueue was sent says the outcome is unknown and names
// WithIdempotencyKey; the retry with the same key after SIGCONT leaves
// one instance. Before, the error was a plain "valkeystore: enqueue:
// context deadline exceeded".
func TestScheduleOutcomeUnknown(t *testing.T) {
	t.Parallel()
	p := testserver.StartRedis(t)
	// For the certain failure, a closed client: valkey-go dials when the
	// client is made, so no client of a server that refuses connections
	// can be had, and one whose server stopped since may write the
	// command on the dead connection before it notices (the outcome is
	// then unknown as far as the client can tell).
	gone := testserver.StartRedis(t)
	rc := newClient(t, gone.Addr)
	refused := newStore(t, rc, "outcome")
	rc.Close()
	jobtest.OutcomeUnknown(t, jobtest.Stalled{
		Store:   newStore(t, newClient(t, p.Addr), "outcome"),
		Refused: refused,
		Stall: func(t testing.TB) func() {
			if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
				t.Fatalf("SIGSTOP: %v", err)
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
						t.Errorf("SIGCONT: %v", err)
					}
				}
			}
			t.Cleanup(resume)
			return resume
		},
	})
}
