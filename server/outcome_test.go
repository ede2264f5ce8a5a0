package server

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store/redisstore"
)

// frozenJobd serves namespace "default" from a jobd whose store is Redis
// on a redis-server of the test's own, and returns jobd's URL, its
// manager and the func that freezes Redis (SIGSTOP) until the func it
// returns resumes it (SIGCONT).
func frozenJobd(t *testing.T) (url string, m *job.Manager, freeze func(testing.TB) func()) {
	return frozenJobdWith(t, &redis.Options{ContextTimeoutEnabled: true})
}

// frozenJobdWith is frozenJobd with jobd's Redis client made with opts.
func frozenJobdWith(t *testing.T, opts *redis.Options) (url string, m *job.Manager, freeze func(testing.TB) func()) {
	t.Helper()
	p := testserver.StartRedis(t)
	opts.Addr = p.Addr
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(c, redisstore.WithNamespace("outcome"))
	if err != nil {
		t.Fatal(err)
	}
	srv, url := executorServer(t, st, nil, "default")
	freeze = func(t testing.TB) func() {
		if err := syscall.Kill(p.PID(), syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP redis-server: %v", err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				if err := syscall.Kill(p.PID(), syscall.SIGCONT); err != nil {
					t.Errorf("SIGCONT redis-server: %v", err)
				}
			}
		}
		t.Cleanup(resume)
		return resume
	}
	return url, srv.cfg.Namespaces["default"], freeze
}

// A worker's ScheduleJob through jobd (the remote store), cut short while
// jobd's store is frozen, says the outcome is unknown and names
// WithIdempotencyKey; the retry with the same key leaves one instance.
// Before, it returned a plain "remote: Enqueue: context deadline
// exceeded".
func TestRemoteScheduleOutcomeUnknown(t *testing.T) {
	t.Parallel()
	url, _, freeze := frozenJobd(t)
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "w1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	jobtest.OutcomeUnknown(t, jobtest.Stalled{Store: rs, Stall: freeze})
}

// The API client's ScheduleJob and ScheduleJobs, cut short while jobd's
// store is frozen, wrap job.ErrOutcomeUnknown (and
// context.DeadlineExceeded) and name WithIdempotencyKey; the retry with
// the same key leaves one instance. A server that refuses connections
// gives an error that does not claim the outcome is unknown.
func TestClientScheduleOutcomeUnknown(t *testing.T) {
	t.Parallel()
	url, m, freeze := frozenJobd(t)
	j, err := job.NewJob(job.WithKind("outcome"), job.WithExecutor(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.ScheduleJob(ctx, "outcome", client.WithIdempotencyKey("warm"), client.WithScheduleAfter(time.Hour)); err != nil {
		t.Fatalf("ScheduleJob before the freeze: %v", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, job.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s while jobd's store was frozen: %v; want an error wrapping job.ErrOutcomeUnknown and context.DeadlineExceeded", what, err)
		}
		if err != nil && !strings.Contains(err.Error(), "WithIdempotencyKey") {
			t.Errorf("%s while jobd's store was frozen: %q; want the message to name WithIdempotencyKey", what, err)
		}
	}
	resume := freeze(t)
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.ScheduleJob(sctx, "outcome", client.WithIdempotencyKey("one"), client.WithScheduleAfter(time.Hour))
	cancel()
	check("ScheduleJob", err)
	t.Logf("ScheduleJob while frozen: %v", err)
	sctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = c.ScheduleJobs(sctx, client.BatchItem{Kind: "outcome", Options: []client.ScheduleOption{client.WithIdempotencyKey("batch"), client.WithScheduleAfter(time.Hour)}})
	cancel()
	check("ScheduleJobs", err)
	resume()
	if t.Failed() {
		t.FailNow()
	}

	ids := map[string]bool{}
	for _, key := range []string{"one", "one", "batch", "warm"} {
		in, err := c.ScheduleJob(ctx, "outcome", client.WithIdempotencyKey(key), client.WithScheduleAfter(time.Hour))
		if err != nil {
			t.Fatalf("ScheduleJob repeated with key %q after the store resumed: %v", key, err)
		}
		ids[in.ID()] = true
	}
	got, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("outcome")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(ids) != 3 {
		t.Fatalf("%d instances stored and %d IDs returned, want 3 of each (warm, one, batch)", len(got), len(ids))
	}

	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead, err := client.New("http://127.0.0.1:" + strconv.Itoa(port))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dead.ScheduleJob(ctx, "outcome", client.WithIdempotencyKey("refused"))
	if err == nil || errors.Is(err, job.ErrOutcomeUnknown) {
		t.Fatalf("ScheduleJob on a refusing server: %v; want an error that does not wrap job.ErrOutcomeUnknown", err)
	}
}

// When jobd's own store call times out first (its Redis client's read
// timeout, while the client's deadline is far), jobd answers: the error
// of ScheduleJob and each ScheduleJobs item wraps job.ErrOutcomeUnknown
// through the Jobkit-Outcome metadata and ItemError.outcome_unknown.
func TestClientScheduleOutcomeUnknownAnsweredByJobd(t *testing.T) {
	t.Parallel()
	url, m, freeze := frozenJobdWith(t, &redis.Options{ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	j, err := job.NewJob(job.WithKind("outcome"), job.WithExecutor(func() {}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := c.ScheduleJob(ctx, "outcome", client.WithIdempotencyKey("warm")); err != nil {
		t.Fatalf("ScheduleJob before the freeze: %v", err)
	}
	resume := freeze(t)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.ScheduleJob(sctx, "outcome", client.WithIdempotencyKey("one"))
	if !errors.Is(err, job.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "WithIdempotencyKey") || sctx.Err() != nil {
		t.Errorf("ScheduleJob answered by jobd after its store timed out: %v; want an error wrapping job.ErrOutcomeUnknown naming WithIdempotencyKey, before the client's deadline", err)
	}
	res, err := c.ScheduleJobs(sctx, client.BatchItem{Kind: "outcome", Options: []client.ScheduleOption{client.WithIdempotencyKey("batch")}})
	if err != nil {
		t.Fatalf("ScheduleJobs answered by jobd after its store timed out: %v; want per-item errors", err)
	}
	if e := res[0].Err; !errors.Is(e, job.ErrOutcomeUnknown) || !strings.Contains(e.Error(), "WithIdempotencyKey") {
		t.Errorf("ScheduleJobs item answered by jobd after its store timed out: %v; want an error wrapping job.ErrOutcomeUnknown naming WithIdempotencyKey", e)
	}
	resume()
	for _, key := range []string{"one", "batch"} {
		if _, err := c.ScheduleJob(ctx, "outcome", client.WithIdempotencyKey(key)); err != nil {
			t.Fatalf("ScheduleJob repeated with key %q: %v", key, err)
		}
	}
	got, err := m.LookupInstances(ctx, job.NewQuery(job.WithQueryKind("outcome")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d instances stored, want 3 (warm, one, batch)", len(got))
	}
}
