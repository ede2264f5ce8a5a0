package console_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store/redisstore"
)

// TestJobdOverviewChartsInBrowser runs a real jobd process on Redis (it
// runs nothing itself: --workers 0) beside a worker in the test process
// on the same store, and checks in headless Chromium that jobd's Overview
// charts the cluster's work: the attempts the other node ran, how long
// they waited (from the change feed's ready times), and the lag of a kind
// nobody runs (sampled from the store).
func TestJobdOverviewChartsInBrowser(t *testing.T) {
	addr := testserver.Redis(t)
	ns := fmt.Sprintf("charts-%d", os.Getpid())
	base := startJobd(t, addr, ns)

	// Another node: a manager in this process on the same store, running
	// kind "work"; and one that only schedules kind "late", which nobody
	// runs.
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	st, err := redisstore.New(rdb, redisstore.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	worker, err := job.NewManager(job.WithStore(st), job.WithWorkers(4), job.WithPollInterval(50*time.Millisecond), job.WithNodeID("worker-charts"))
	if err != nil {
		t.Fatal(err)
	}
	work, err := job.NewJob(job.WithKind("work"), job.WithExecutor(func() error { time.Sleep(20 * time.Millisecond); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.RegisterJob(work); err != nil {
		t.Fatal(err)
	}
	if err := worker.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = worker.Stop(sctx)
	})
	sched, err := job.NewManager(job.WithStore(st), job.WithWorkers(0))
	if err != nil {
		t.Fatal(err)
	}
	late, err := job.NewJob(job.WithKind("late"), job.WithExecutor(func() error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.RegisterJob(late); err != nil {
		t.Fatal(err)
	}
	// Ten attempts that were ready 20 s before they were scheduled (so
	// each waited 20 s), and one "late" instance ready for 45 s.
	for range 10 {
		if _, err := worker.ScheduleJob(ctx, "work", job.WithScheduleAt(time.Now().Add(-20*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sched.ScheduleJob(ctx, "late", job.WithScheduleAt(time.Now().Add(-45*time.Second))); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t)
	e := &env{url: base, console: base + "/console"}
	b.signIn(e, adminToken)
	// The charts are drawn when the page renders: reload until jobd's
	// Stats has them (the lag is sampled every 10 s).
	peak := regexp.MustCompile(`peak ([0-9.]+)(ms|s|m)`)
	seconds := func(text string) float64 {
		m := peak.FindStringSubmatch(text)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "ms":
			v /= 1000
		case "m":
			v *= 60
		}
		return v
	}
	var wait99, lag string
	deadline := time.Now().Add(40 * time.Second)
	for {
		b.open(e, "/")
		wait99 = eval[string](b, `(() => { const l = Array.from(document.querySelectorAll("#chart-wait .legend li")).find(li => li.textContent.startsWith("p99")); return l ? l.textContent : ""; })()`)
		lag = eval[string](b, `document.querySelector("#chart-lag .legend") ? document.querySelector("#chart-lag .legend").textContent : ""`)
		if seconds(wait99) >= 20 && seconds(lag) >= 45 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 40 s, the wait chart's p99 reads %q (want a peak of 20 s or more) and the lag chart %q (want 45 s or more)", wait99, lag)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if w := seconds(wait99); w > 30 {
		t.Errorf("wait p99 peak %v s, want about the 20 s the attempts waited", w)
	}
	if l := seconds(lag); l > 120 {
		t.Errorf("lag peak %v s, want about the 45 s the late instance has waited", l)
	}
	title := eval[string](b, `document.querySelector("#chart-wait figcaption").textContent`)
	if !regexp.MustCompile(`all nodes`).MatchString(title) {
		t.Errorf("the wait chart is titled %q, want it to say it charts all nodes", title)
	}
	throughput := eval[string](b, `document.querySelector("#chart-throughput .legend").textContent`)
	if !regexp.MustCompile(`completed \(now \d+/min, peak [1-9]\d*/min`).MatchString(throughput) {
		t.Errorf("the throughput legend reads %q, want the 10 attempts the other node completed", throughput)
	}
	b.shot("overview")
}
