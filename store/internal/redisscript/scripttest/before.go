package scripttest

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
)

// testManagerBeforeServer: a manager started while its Redis is down.
// Start succeeds (it does no I/O), ScheduleJob reports the connection
// error at once and stores nothing, the claim loop keeps retrying with
// backoff, and once a redis-server comes up on the address, schedules
// succeed and their jobs run with nothing restarted.
func testManagerBeforeServer(t *testing.T, h Harness) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var ran atomic.Int64
	j, err := job.NewJob(job.WithKind("k"), job.WithExecutor(func(n int) { ran.Add(int64(n)) }))
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(h.OpenDown(t, addr, ns(t))),
		job.WithLogger(slog.New(slog.DiscardHandler)), job.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start with Redis down: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = m.Stop(sctx)
	})

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := m.ScheduleJob(sctx, "k", job.WithArguments(1000)); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("ScheduleJob with Redis down: %v, want an error wrapping ECONNREFUSED", err)
	}

	testserver.StartRedisOn(t, port)
	deadline := time.Now().Add(15 * time.Second)
	var inst *job.InstanceInfo
	for inst == nil {
		if inst, err = m.ScheduleJob(ctx, "k", job.WithArguments(1)); err != nil && time.Now().After(deadline) {
			t.Fatalf("ScheduleJob once Redis is up: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for ran.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the job scheduled once Redis came up did not run within 15s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	all, err := m.LookupInstances(ctx, job.NewQuery())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != inst.ID || ran.Load() != 1 {
		t.Fatalf("stored %d instances, ran sum %d; want only the one scheduled once Redis was up, run once", len(all), ran.Load())
	}
}
