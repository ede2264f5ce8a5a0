package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// BenchmarkScheduleBreakdown takes one ScheduleJob on Redis apart, one
// call at a time from one goroutine (issue 19): a PING (the client's
// round trip), a script that does nothing, the shared lib.lua prelude
// alone (whole, as most scripts have it, and the part the enqueue script
// has), one store.Enqueue of one instance, and Manager.ScheduleJob.
// server-µs/call is Redis's own time (INFO commandstats).
//
//	go test -run '^$' -bench ScheduleBreakdown -benchtime 20000x ./store/redisstore/
func BenchmarkScheduleBreakdown(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	ns := fmt.Sprintf("bench_brk_%d", time.Now().UnixNano())
	keys, err := redisscript.NewKeys(ns)
	if err != nil {
		b.Fatal(err)
	}
	lean, _, ok := strings.Cut(redisscript.Enqueue.Source, "\n-- ---- enqueue.lua ----")
	if !ok {
		b.Fatal("no enqueue.lua marker in the enqueue script")
	}
	full, _, ok := strings.Cut(redisscript.Claim.Source, "\n-- ---- claim.lua ----")
	if !ok {
		b.Fatal("no claim.lua marker in the claim script")
	}
	b.Run("ping", func(b *testing.B) {
		for range b.N {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct{ name, src string }{
		{"script_bare", "return 1"},
		{"script_lib_full", full + "\nreturn 1"},
		{"script_lib_enqueue", lean + "\nreturn 1"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sc := redis.NewScript(tc.src)
			args := []any{keys.Prefix, "1", "n"}
			if err := sc.Run(ctx, c, keys.Script, args...).Err(); err != nil {
				b.Fatal(err)
			}
			u0, n0 := serverMicros(b, c)
			for range b.N {
				if err := sc.Run(ctx, c, keys.Script, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			u1, n1 := serverMicros(b, c)
			b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
		})
	}
	s := newStore(b, c, ns)
	b.Run("store_enqueue_1", func(b *testing.B) {
		u0, n0 := serverMicros(b, c)
		for range b.N {
			now := time.Now()
			in := &store.Instance{ID: uuid.Must(uuid.NewV7()).String(), Kind: "email.send", Queue: "default",
				Args: []byte(`["user@example.com",42]`), RunAt: now, CreatedAt: now, MaxRetries: 3}
			if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Node: "n", Now: now}); err != nil {
				b.Fatal(err)
			}
		}
		u1, n1 := serverMicros(b, c)
		b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
	})
	m, err := job.NewManager(job.WithStore(s))
	if err != nil {
		b.Fatal(err)
	}
	j, err := job.NewJob(job.WithKind("email.send"), job.WithExecutor(func(to string, n int) {}))
	if err != nil {
		b.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		b.Fatal(err)
	}
	b.Run("schedulejob_1", func(b *testing.B) {
		u0, n0 := serverMicros(b, c)
		for range b.N {
			if _, err := m.ScheduleJob(ctx, "email.send", job.WithArguments("user@example.com", 42)); err != nil {
				b.Fatal(err)
			}
		}
		u1, n1 := serverMicros(b, c)
		b.ReportMetric(float64(u1-u0)/float64(n1-n0), "server-µs/call")
	})
}
