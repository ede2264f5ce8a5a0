package job

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkScheduleJobsGoSide measures the Go side of Manager.ScheduleJobs
// with 1,000 items per call (issue 19), the bench program's batch: one
// kind, each item with its own arguments. "nop" is on a store whose
// Enqueue returns at once (memdbstore for the rest), so CPU time and
// allocations per call are the manager's own; "memdb" stores into
// memdbstore. Per-op figures are per call of 1,000; ns/job (wall time)
// and cpu-ns/job (this process's CPU time, GC included) are per item. No load on the machine changes the allocation figures.
//
//	go test -run '^$' -bench ScheduleJobsGoSide -benchmem .
func BenchmarkScheduleJobsGoSide(b *testing.B) {
	for _, name := range []string{"nop", "memdb"} {
		b.Run(name, func(b *testing.B) {
			m := goSideManager(b, name)
			items := make([]BatchItem, 1000)
			for i := range items {
				items[i] = BatchItem{Kind: "email.send", Options: []ScheduleOption{WithArguments("user@example.com", i)}}
			}
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := processCPUTime()
			for b.Loop() {
				res, err := m.ScheduleJobs(ctx, items...)
				if err != nil {
					b.Fatal(err)
				}
				if res[0].Err != nil || res[len(res)-1].Err != nil {
					b.Fatal(res[0].Err, res[len(res)-1].Err)
				}
			}
			jobs := float64(b.N * len(items))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/jobs, "ns/job")
			b.ReportMetric(float64((processCPUTime()-cpu0).Nanoseconds())/jobs, "cpu-ns/job")
		})
	}
}

// processCPUTime is the CPU time (user and system) this process has used.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
