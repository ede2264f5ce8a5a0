package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testCancelNotifier checks store.CancelNotifier where the store has it
// (required when Harness.CancelNotifier says so): a cancel requested on a
// running attempt through another handle reaches a subscriber, naming that
// attempt; a cancel of a Scheduled instance sends nothing; ending ctx
// closes the channel.
func testCancelNotifier(t *testing.T, h Harness) {
	e := setup(t, h)
	n, ok := e.s.(store.CancelNotifier)
	if !ok && h.CancelNotifier {
		t.Fatalf("the harness says the store implements store.CancelNotifier, but %T does not", e.s)
	}
	if !ok {
		t.Log("store does not implement store.CancelNotifier; nothing to check")
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := n.SubscribeCancels(ctx)
	if err != nil {
		t.Fatalf("SubscribeCancels: %v", err)
	}
	other := e.open()
	e.enqueue(other, base, inst("cn-run", "q-cn"), inst("cn-wait", "q-cn2"), inst("cn-run2", "q-cn"))
	e.claimOne(other, "q-cn", "w1", base, "cn-run")
	e.claimOne(other, "q-cn", "w1", base, "cn-run2")
	next := func(what string) store.LeaseRef {
		t.Helper()
		select {
		case ref, ok := <-ch:
			if !ok {
				t.Fatalf("%s: the channel closed", what)
			}
			return ref
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no notice within 5s", what)
		}
		return store.LeaseRef{}
	}
	cancelOn := func(id string) {
		t.Helper()
		if _, err := other.Cancel(e.ctx, &store.CancelParams{ID: id, Now: at(time.Second), Node: "n-cancel"}); err != nil {
			t.Fatalf("Cancel %s: %v", id, err)
		}
	}
	cancelOn("cn-run")
	if ref := next("Cancel of a running attempt"); ref != (store.LeaseRef{ID: "cn-run", Attempt: 1}) {
		t.Fatalf("notice %+v; want cn-run attempt 1", ref)
	}
	// A Scheduled instance is canceled at once: no notice for it, so the
	// next one is that of the next running attempt canceled.
	cancelOn("cn-wait")
	cancelOn("cn-run2")
	if ref := next("Cancel of a second running attempt"); ref != (store.LeaseRef{ID: "cn-run2", Attempt: 1}) {
		t.Fatalf("notice %+v; want cn-run2 attempt 1 (nothing for the scheduled cn-wait)", ref)
	}
	cancel()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("SubscribeCancels' channel still open 5s after its ctx ended")
		}
	}
}
