package alert_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store/memdbstore"
)

// channelObserver records the channels a service says it knows.
type channelObserver struct {
	mu    sync.Mutex
	known []string
}

func (o *channelObserver) AlertFired(namespace, rule, condition string)  {}
func (o *channelObserver) DeliveryFailed(namespace, channel, typ string) {}
func (o *channelObserver) Delivered(namespace, channel, typ string)      {}
func (o *channelObserver) ChannelKnown(namespace, channel, typ string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if k := namespace + "/" + channel + "/" + typ; !slices.Contains(o.known, k) {
		o.known = append(o.known, k)
	}
}

func (o *channelObserver) has(k string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.known, k)
}

// TestChannelObserver: an Observer that is a ChannelObserver hears of each
// channel before any notification: those stored before the service runs
// when it starts, those another service stores within a step, and those
// it stores itself at once, so metrics can show their series at 0.
func TestChannelObserver(t *testing.T) {
	t.Setenv("ALERT_TEST_SECRET", secret)
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := alert.Config{Store: st, Namespace: "prod", Node: "a", Interval: 20 * time.Millisecond, Guard: loopbackGuard(t)}
	other, err := alert.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.PutChannel(ctx, &alert.Channel{Name: "before", Type: alert.Webhook, URL: "http://127.0.0.1:9/x", SecretRef: "env:ALERT_TEST_SECRET"}, 0); err != nil {
		t.Fatal(err)
	}
	obs := &channelObserver{}
	cfg.Node, cfg.Observer = "b", obs
	svc, err := alert.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = svc.Run(ctx) }()
	defer wg.Wait()
	defer cancel()
	waitFor(t, "the channel stored before Run to be known", 5*time.Second, func() bool { return obs.has("prod/before/webhook") })
	if _, err := other.PutChannel(ctx, &alert.Channel{Name: "elsewhere", Type: alert.Webhook, URL: "http://127.0.0.1:9/y", SecretRef: "env:ALERT_TEST_SECRET"}, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a channel another service stored to be known", 5*time.Second, func() bool { return obs.has("prod/elsewhere/webhook") })
	if _, err := svc.PutChannel(ctx, &alert.Channel{Name: "here", Type: alert.Webhook, URL: "http://127.0.0.1:9/z", SecretRef: "env:ALERT_TEST_SECRET"}, 0); err != nil {
		t.Fatal(err)
	}
	if !obs.has("prod/here/webhook") {
		t.Fatal("a channel stored through the service is not known at once")
	}
}
