package valkeystore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
)

// BenchmarkLoneAfterConcurrent times lone ScheduleJob calls (p50, and
// this process's CPU per call) on a client whose pipelined connection has
// once served concurrent callers, which switches it to valkey-go's
// background writer and reader for good (issue 39), beside a fresh client
// and one with DisableAutoPipelining.
//
//	go test -run '^$' -bench LoneAfterConcurrent -benchtime 10000x -benchmem ./store/valkeystore/
func BenchmarkLoneAfterConcurrent(b *testing.B) {
	for _, tc := range []struct {
		name       string
		concurrent bool
		opt        valkey.ClientOption
	}{
		{"fresh", false, valkey.ClientOption{DisableCache: true}},
		{"after_concurrent", true, valkey.ClientOption{DisableCache: true}},
		{"after_concurrent_noautopipe", true, valkey.ClientOption{DisableCache: true, DisableAutoPipelining: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tc.opt.InitAddress = []string{testserver.Redis(b)}
			c, err := valkey.NewClient(tc.opt)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			m, ctx := emailManager(b, c, "bench_lone_pipe")
			if tc.concurrent {
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range 200 {
							_ = c.Do(context.Background(), c.B().Ping().Build()).Error()
						}
					})
				}
				wg.Wait()
			}
			lat := make([]time.Duration, 0, b.N)
			cpu0 := processCPU(b)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "go-cpu-µs/call")
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
