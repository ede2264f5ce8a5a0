package pgstore_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store/pgstore"
)

// privatePG starts a PostgreSQL of t's own and returns it with a migrated
// store on it.
func privatePG(t *testing.T) (*testserver.Process, *pgxpool.Pool, *pgstore.Store) {
	t.Helper()
	p := testserver.StartPostgres(t)
	t.Cleanup(p.Kill)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testserver.PostgresURL(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema("outcome")); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(ctx, pool, pgstore.WithSchema("outcome"), pgstore.WithNamespace("outcome"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return p, pool, s
}

// A ScheduleJob whose deadline ends while PostgreSQL is frozen (SIGSTOP
// of all its processes) after the insert was sent says the outcome is
// unknown and names WithIdempotencyKey; the retry with the same key after
// SIGCONT leaves one instance. Before, it returned a plain "pgstore:
// enqueue: context deadline exceeded".
func TestScheduleOutcomeUnknown(t *testing.T) {
	t.Parallel()
	p, _, s := privatePG(t)
	gone, gonePool, refused := privatePG(t)
	// Refused connections: the server stopped, and the pool's idle
	// connections closed, so the next call has to connect.
	gone.Stop()
	gonePool.Reset()
	jobtest.OutcomeUnknown(t, jobtest.Stalled{
		Store:   s,
		Refused: refused,
		Stall: func(t testing.TB) func() {
			// PostgreSQL is a postmaster and a process per connection,
			// each a process group of its own: stop them all.
			pids := append(childrenOf(t, p.PID()), p.PID())
			for _, pid := range pids {
				if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
					t.Fatalf("SIGSTOP postgres process %d: %v", pid, err)
				}
			}
			resumed := false
			resume := func() {
				if !resumed {
					resumed = true
					for _, pid := range pids {
						if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
							t.Errorf("SIGCONT postgres process %d: %v", pid, err)
						}
					}
				}
			}
			t.Cleanup(resume)
			return resume
		},
	})
}

// childrenOf returns the processes whose parent is pid, from /proc.
func childrenOf(t testing.TB, pid int) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var out []int
	for _, d := range dirs {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}
