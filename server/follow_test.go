package server

import (
	"fmt"
	"testing"
	"time"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestFollowerForgetsOldRecords: following a long-running instance keeps
// only the records it may still see again (those within followSkew of the
// newest sent) in memory, not every record it ever sent; and still sends
// each record once, in order.
func TestFollowerForgetsOldRecords(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(st))
	if err != nil {
		t.Fatal(err)
	}
	const id, n, step = "inst-1", 120, 10 * time.Second // 20 minutes of records
	var sent []string
	f := &follower{m: m, id: id, seen: map[uint64]time.Time{}, send: func(r *store.LogRecord) error {
		sent = append(sent, r.Message)
		return nil
	}}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	for i := range n {
		rec := &store.LogRecord{InstanceID: id, Kind: "k", Attempt: 1, Level: store.LevelInfo, Time: t0.Add(time.Duration(i) * step), Node: "n", Message: fmt.Sprint(i)}
		if err := st.AppendLogs(t.Context(), []*store.LogRecord{rec}); err != nil {
			t.Fatal(err)
		}
		if err := f.round(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(sent) != n {
		t.Fatalf("sent %d records, want %d: %v", len(sent), n, sent)
	}
	for i, msg := range sent {
		if msg != fmt.Sprint(i) {
			t.Fatalf("record %d sent as %q; want each once, in order: %v", i, msg, sent)
		}
	}
	if limit := int(followSkew/step) + 1; len(f.seen) > limit {
		t.Fatalf("the follower remembers %d records after sending %d; want at most %d (those within followSkew of the newest)", len(f.seen), n, limit)
	}
}
