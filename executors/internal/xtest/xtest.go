// Package xtest runs executor types under a real job.Manager for the
// executors' tests.
package xtest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// Manager starts a manager on a new memdb store with types enabled and
// stops it when the test ends.
func Manager(t testing.TB, types ...job.ExecutorType) *job.Manager {
	t.Helper()
	m, err := job.NewManager(job.WithWorkers(8), job.WithExecutorTypes(types...), job.WithExecutorSync(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	return m
}

// Define stores a definition of kind run by typ with config, retries and
// timeout; it fails the test on error.
func Define(t testing.TB, m *job.Manager, kind, typ string, config any, retries int, timeout time.Duration) {
	t.Helper()
	if err := TryDefine(m, kind, typ, config, retries, timeout); err != nil {
		t.Fatalf("define %s: %v", kind, err)
	}
}

// TryDefine is Define returning the error.
func TryDefine(m *job.Manager, kind, typ string, config any, retries int, timeout time.Duration) error {
	raw, err := json.Marshal(config)
	if err != nil {
		return err
	}
	_, err = m.Admin().PutDefinition(context.Background(), job.Definition{Kind: kind, MaxRetries: retries, Timeout: timeout,
		Backoff:  store.Backoff{Kind: store.BackoffConstant, Base: 10 * time.Millisecond},
		Executor: &store.ExecutorSpec{Type: typ, Config: raw}}, store.AnyVersion)
	return err
}

// Run schedules kind with args and waits for it to end in a final state.
func Run(t testing.TB, m *job.Manager, kind string, args ...any) *job.InstanceInfo {
	t.Helper()
	a, err := m.ScheduleJob(context.Background(), kind, job.WithArguments(args...))
	if err != nil {
		t.Fatalf("schedule %s: %v", kind, err)
	}
	return Wait(t, m, a.ID, job.Completed, job.Terminated, job.TimedOut, job.Canceled)
}

// Wait waits up to 2 minutes for instance id to reach one of states.
func Wait(t testing.TB, m *job.Manager, id string, states ...job.State) *job.InstanceInfo {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		i, err := m.GetInstance(context.Background(), id)
		if err == nil && slices.Contains(states, i.State) {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s: %v (%v), want one of %v", id, i, err, states)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Logs returns the instance's log messages, one a line.
func Logs(t testing.TB, m *job.Manager, id string) string {
	t.Helper()
	// Logs are written in batches: wait for the store to hold what the
	// attempt wrote before it ended.
	var out []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs, err := m.LookupInstanceLogs(context.Background(), job.NewQuery(job.WithQueryInstanceID(id)))
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for _, r := range recs {
			out = append(out, r.Message)
		}
		if len(out) > 0 || time.Now().After(deadline) {
			return strings.Join(out, "\n")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Everything returns every text the manager keeps of an instance (its
// error, results, history and logs) for a test that a secret is in none.
func Everything(t testing.TB, m *job.Manager, id string) string {
	t.Helper()
	i, err := m.GetInstance(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(i.Error)
	res, _ := json.Marshal(i.Results())
	b.Write(res)
	hist, _ := m.LookupInstanceHistory(context.Background(), job.NewQuery(job.WithQueryInstanceID(id)))
	for _, h := range hist {
		hb, _ := json.Marshal(h)
		b.Write(hb)
	}
	b.WriteString(Logs(t, m, id))
	return b.String()
}
