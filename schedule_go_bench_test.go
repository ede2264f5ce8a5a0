package job

import (
	"context"
	"testing"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// BenchmarkScheduleJobGoSide measures the Go side of a lone ScheduleJob
// (issue 19): argument check and encoding, UUIDv7, the record, the
// enqueuer and the Instance returned. "nop" is on a store whose Enqueue
// returns at once (memdbstore for the rest), so CPU time and allocations
// per call are the manager's own; "memdb" stores into memdbstore. No load
// on the machine changes the allocation figures.
//
//	go test -run '^$' -bench ScheduleJobGoSide -benchmem .
func BenchmarkScheduleJobGoSide(b *testing.B) {
	for _, name := range []string{"nop", "memdb"} {
		b.Run(name, func(b *testing.B) {
			m := goSideManager(b, name)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.ScheduleJob(ctx, "email.send", WithArguments("user@example.com", 42)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// goSideManager is the manager of the Go-side benchmarks, with kind
// email.send(to string, n int) registered: on a store whose Enqueue
// returns at once when name is "nop", on memdbstore otherwise.
func goSideManager(b *testing.B, name string) *Manager {
	b.Helper()
	mem, err := memdbstore.New()
	if err != nil {
		b.Fatal(err)
	}
	var st store.Store = mem
	if name == "nop" {
		st = nopEnqueueStore{mem}
	}
	m, err := NewManager(WithStore(st))
	if err != nil {
		b.Fatal(err)
	}
	j, err := NewJob(WithKind("email.send"), WithExecutor(func(to string, n int) {}))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		b.Fatal(err)
	}
	return m
}
