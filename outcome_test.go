package job

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jobkit/job/store"
)

// A ScheduleJobs whose first store call ends ambiguously: that call's
// items and the call's error wrap ErrOutcomeUnknown (and the cause) and
// name WithIdempotencyKey; the items never sent wrap the cause but not
// ErrOutcomeUnknown, as they certainly stored nothing.
func TestScheduleJobsOutcomeUnknownOnlyForSentItems(t *testing.T) {
	e := newEnqueueTest(t)
	e.open()
	e.g.fail = func(call int) error {
		if call == 1 {
			return store.OutcomeUnknown(fmt.Errorf("teststore: enqueue: %w", context.DeadlineExceeded))
		}
		return nil
	}
	items := make([]BatchItem, MaxScheduleBatch+2)
	for i := range items {
		items[i] = BatchItem{Kind: "k", Options: []ScheduleOption{WithArguments("x"), WithIdempotencyKey(fmt.Sprint(i))}}
	}
	res, err := e.m.ScheduleJobs(context.Background(), items...)
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "WithIdempotencyKey") {
		t.Fatalf("ScheduleJobs: %v; want an error wrapping ErrOutcomeUnknown and context.DeadlineExceeded that names WithIdempotencyKey", err)
	}
	for i, r := range res {
		sent := i < MaxScheduleBatch
		if !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Fatalf("item %d: %v; want it to wrap context.DeadlineExceeded", i, r.Err)
		}
		if errors.Is(r.Err, ErrOutcomeUnknown) != sent {
			t.Fatalf("item %d (sent: %v): %v; want ErrOutcomeUnknown exactly for the items of the failed call", i, sent, r.Err)
		}
		if sent && !strings.Contains(r.Err.Error(), fmt.Sprintf("WithIdempotencyKey(%q)", fmt.Sprint(i))) {
			t.Fatalf("item %d: %q; want the message to name its own key", i, r.Err)
		}
	}
}
