package main

import (
	"log/slog"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/webhook"
)

// alertServices runs alerting (issue 23) for each namespace of a test
// server, evaluating every 20 ms, allowed to post to loopback (where the
// test server answers POST /hook).
func alertServices(t *testing.T, mgrs map[string]*job.Manager, stores map[string]store.Store) map[string]*alert.Service {
	t.Helper()
	allow, err := webhook.ParseAllowlist("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*alert.Service{}
	for ns, m := range mgrs {
		svc, err := alert.New(alert.Config{
			Namespace: ns, Store: stores[ns], Node: "jobctl-test", Interval: 20 * time.Millisecond,
			Guard: &webhook.Guard{Allow: allow}, Logger: slog.New(slog.DiscardHandler),
			KindKnown: func(k string) bool { _, err := m.GetJob(k); return err == nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = svc.Run(t.Context()) }()
		t.Cleanup(func() { <-done })
		out[ns] = svc
	}
	return out
}
