package valkeystore_test

import (
	"context"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// A feed whose client is closed under it ends with an error event instead
// of retrying until its ctx ends.
func TestFollowClientClosed(t *testing.T) {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{testserver.Redis(t)}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, c, "follow-closed-"+time.Now().Format("150405.000000"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := s.Follow(ctx, &store.FollowParams{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case ev, ok := <-ch:
		if !ok || ev.Err == nil {
			t.Fatalf("feed after the client closed: %+v (open %v), want an error event", ev, ok)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("feed gave nothing within 5s of its client closing")
	}
	// The feed's goroutine has ended once its channel is closed; only
	// then are the client's connections all given back and closed.
	cancel()
	for range ch {
	}
}
