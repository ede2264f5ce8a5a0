package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// keepAlive is how often the event stream sends a comment when nothing
// happens, so proxies do not close it.
const keepAlive = 15 * time.Second

// configCheck is how often a live page's feed compares the digest of the
// queues' paused flags, the triggers and the definitions, so a change made
// outside this console shows within about as long.
const configCheck = time.Second

// liveEvent is one change as the page's script receives it.
type liveEvent struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Queue string `json:"queue"`
	State string `json:"state,omitempty"`
	// Log is a line the instance's executor logged (with ?instance=).
	Log string `json:"log,omitempty"`
}

// events streams the namespace's changes to a page as Server-Sent Events,
// read from JobService.Watch with the user's token: the page refreshes its
// content when one arrives. Optional query "instance" narrows the feed to
// one instance and adds the lines its executor logs (JobService.FollowLogs),
// so its page follows the logs while it runs.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported by this server", http.StatusInternalServerError)
		return
	}
	ctx := r.Context()
	instance := r.URL.Query().Get("instance")
	stream, err := s.api.jobs.Watch(ctx, connect.NewRequest(&pb.WatchRequest{InstanceId: instance}))
	if err != nil {
		http.Error(w, apiMessage(err), http.StatusBadGateway)
		return
	}
	defer stream.Close()
	// Wait until the server has opened the feed (it sends its headers
	// then), so that every change after the page's "open" reaches it.
	stream.ResponseHeader()
	var logs *connect.ServerStreamForClient[pb.FollowLogsResponse]
	if instance != "" {
		if logs, err = s.api.jobs.FollowLogs(ctx, connect.NewRequest(&pb.FollowLogsRequest{InstanceId: instance})); err != nil {
			http.Error(w, apiMessage(err), http.StatusBadGateway)
			return
		}
		defer logs.Close()
	}
	// Subscribed before the stream answers, so no change after the page's
	// "open" is missed.
	changed, unsubscribe := c.bus.subscribe(s.ns)
	defer unsubscribe()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 1000\n: open\n\n")
	fl.Flush()

	msgs := make(chan liveEvent)
	done := make(chan error, 1)
	go relayChanges(ctx, stream, msgs, done)
	if logs != nil {
		// The log stream ends when the instance is final; the change feed
		// goes on (a retry makes it run again).
		go relayLogs(ctx, logs, msgs)
	}
	c.sendEvents(ctx, w, fl, s, changed, msgs, done)
}

// relayChanges passes the change feed's events on to msgs until it ends,
// then its error to done.
func relayChanges(ctx context.Context, stream *connect.ServerStreamForClient[pb.WatchResponse], msgs chan<- liveEvent, done chan<- error) {
	for stream.Receive() {
		if e := stream.Msg().GetEvent(); e != nil {
			select {
			case msgs <- liveEvent{ID: e.GetInstanceId(), Kind: e.GetKind(), Queue: e.GetQueue(), State: stateName(e.GetState())}:
			case <-ctx.Done():
				return
			}
		}
	}
	done <- stream.Err()
}

// relayLogs passes the instance's log lines on to msgs until the log
// stream ends.
func relayLogs(ctx context.Context, logs *connect.ServerStreamForClient[pb.FollowLogsResponse], msgs chan<- liveEvent) {
	for logs.Receive() {
		if rec := logs.Msg().GetRecord(); rec != nil {
			select {
			case msgs <- liveEvent{ID: rec.GetInstanceId(), Kind: rec.GetKind(), Log: rec.GetMessage()}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// sendEvents writes the page's Server-Sent Events until ctx ends, the
// change feed ends (done) or a write fails: the changes and log lines of
// msgs, the console's own changes, the digest of the configuration and
// keep-alives.
func (c *Console) sendEvents(ctx context.Context, w http.ResponseWriter, fl http.Flusher, s *session, changed <-chan struct{}, msgs <-chan liveEvent, done <-chan error) {
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	// Queue pauses, triggers and definitions changed outside this console
	// (another jobd, jobctl, a user's own Manager) have no event in the
	// change feed: send their digest every configCheck, and the page
	// refreshes when it differs from the digest its content was read
	// after. Compared here against the digest sent last, a pause and a
	// resume between two checks would go unseen by a page that read the
	// queue paused in between (the queues' flags carry no version).
	config := time.NewTicker(configCheck)
	defer config.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-config.C:
			now, err := s.configDigest(ctx)
			if err != nil {
				continue
			}
			if _, err := fmt.Fprintf(w, "event: config\ndata: %s\n\n", digestTag(now)); err != nil {
				return
			}
			fl.Flush()
		case <-changed:
			if _, err := fmt.Fprint(w, "event: change\ndata: {\"config\":true}\n\n"); err != nil {
				return
			}
			fl.Flush()
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				c.cfg.Logger.Info("jobkit console: the change feed ended", "err", err)
			}
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		case e := <-msgs:
			b, _ := json.Marshal(e)
			if _, err := fmt.Fprintf(w, "event: change\ndata: %s\n\n", b); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// changeBus tells the live pages of one console process about the changes
// its users make that the change feed does not carry (it carries instance
// state changes only): a queue paused or resumed, a trigger created,
// changed, paused, resumed or deleted, a definition changed.
type changeBus struct {
	mu   sync.Mutex
	subs map[chan struct{}]string // a page's channel → its namespace
}

// subscribe returns a channel that receives after each change in
// namespace ns (changes close together may arrive as one), and the
// function that ends the subscription.
func (b *changeBus) subscribe(ns string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[chan struct{}]string{}
	}
	b.subs[ch] = ns
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// publish tells every page of namespace ns that something changed. It
// never blocks: a page with a change pending needs no second one.
func (b *changeBus) publish(ns string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch, n := range b.subs {
		if n == ns {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// digestTag is a short fixed-length tag of a configDigest, as sent to pages.
func digestTag(d string) string {
	sum := sha256.Sum256([]byte(d))
	return hex.EncodeToString(sum[:12])
}

// configDigest sums up what the change feed has no event for: the paused
// queues, and each trigger's and definition's name and version (a
// trigger's version also moves when it fires). Three List calls with the
// session's token, the first page of each (up to 1,000).
func (s *session) configDigest(ctx context.Context) (string, error) {
	var b strings.Builder
	qs, err := s.api.queues.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{}))
	if err != nil {
		return "", err
	}
	for _, q := range qs.Msg.GetQueues() {
		if q.GetPaused() {
			fmt.Fprintf(&b, "q %s\x00", q.GetName())
		}
	}
	ts, err := s.api.triggers.ListTriggers(ctx, connect.NewRequest(&pb.ListTriggersRequest{PageSize: 1000}))
	if err != nil {
		return "", err
	}
	for _, t := range ts.Msg.GetTriggers() {
		fmt.Fprintf(&b, "t %s %d\x00", t.GetName(), t.GetVersion())
	}
	ds, err := s.api.defs.ListDefinitions(ctx, connect.NewRequest(&pb.ListDefinitionsRequest{PageSize: 1000}))
	if err != nil {
		return "", err
	}
	for _, d := range ds.Msg.GetDefinitions() {
		fmt.Fprintf(&b, "d %s %d\x00", d.GetKind(), d.GetVersion())
	}
	return b.String(), nil
}
