package etcdstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// TestDeleteLeavesNoKeys: Delete removes every key of an instance, in
// each state, including a retried one's history of both runs and an
// instance whose history and logs need several transactions.
func TestDeleteLeavesNoKeys(t *testing.T) {
	t.Parallel()
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	ctx := context.Background()
	later := testInst("later")
	later.RunAt = t0.Add(time.Hour)
	held := testInst("held")
	held.UniqueKey, held.UniqueUntil = "u", t0.Add(time.Hour)
	mustEnqueue(t, s, testInst("run"), testInst("done"), held, later)
	claimed := claimN(t, s, "w", 2) // run, done
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: t0, Outcomes: []store.Outcome{{ID: "done", Attempt: claimed[1].Attempt, State: store.Terminated, Error: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retry(ctx, &store.RetryParams{IDs: []string{"done"}, Now: t0, Node: "n"}); err != nil {
		t.Fatal(err)
	}
	again := claimN(t, s, "w", 1)
	if len(again) != 1 || again[0].ID != "done" {
		t.Fatalf("claim after the retry: %v, want done", again)
	}
	if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: t0, Outcomes: []store.Outcome{{ID: "done", Attempt: again[0].Attempt, State: store.Completed}}}); err != nil {
		t.Fatal(err)
	}
	// More log records than one transaction may delete.
	var logs []*store.LogRecord
	for i := range 150 {
		logs = append(logs, &store.LogRecord{InstanceID: "done", Kind: "k", Level: store.LevelInfo, Time: t0.Add(time.Duration(i) * time.Millisecond), Message: fmt.Sprint(i)})
	}
	logs = append(logs, &store.LogRecord{InstanceID: "run", Kind: "k", Level: store.LevelInfo, Time: t0, Message: "r"})
	if err := s.AppendLogs(ctx, logs); err != nil {
		t.Fatal(err)
	}
	res, err := open(t, ns).Delete(ctx, &store.DeleteParams{IDs: []string{"run", "done", "held", "later"}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []store.State{store.Processing, store.Completed, store.Scheduled, store.Scheduled} {
		if res[i].Err != nil || res[i].State != want {
			t.Fatalf("Delete result %d: %+v, want state %v", i, res[i], want)
		}
	}
	cli := newClient(t, testserver.Etcd(t))
	resp, err := cli.Get(ctx, keyPrefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), keyPrefix(ns))
		// The sequence ticket, the ticket key, lane markers, the handle's
		// liveness key and count deltas (checked below) stay.
		if k != "seq" && k != "tk" && !strings.HasPrefix(k, "qp/") && !strings.HasPrefix(k, "a/") && !strings.HasPrefix(k, "cn/") {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		t.Fatalf("Delete left %d keys: %v", len(left), left)
	}
	rows, err := s.Counts(ctx, &store.CountsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Total() != 0 {
			t.Errorf("Counts after deleting every instance: %s/%s has %v", r.Queue, r.Kind, r.States)
		}
	}
}
