package console_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// openFeed opens the console's event stream with client c and returns
// its reader once the stream said "open".
func openFeed(t *testing.T, ctx context.Context, e *env, c *http.Client) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.console+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /events: %d", res.StatusCode)
	}
	r := bufio.NewReader(res.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before it opened: %v", err)
		}
		if strings.HasPrefix(line, ": open") {
			return r
		}
	}
}

// fragmentConfig reads page path as a live refresh does and returns the
// configuration digest its answer carries.
func fragmentConfig(t *testing.T, ctx context.Context, e *env, c *http.Client, path string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.console+path, nil)
	req.Header.Set("X-Jobkit-Fragment", "1")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	tag := res.Header.Get("X-Jobkit-Config")
	if res.StatusCode != http.StatusOK || tag == "" {
		t.Fatalf("GET %s as a live refresh: %d, X-Jobkit-Config %q", path, res.StatusCode, tag)
	}
	return tag
}

// untilConfigOtherThan reads the feed until a configuration digest other
// than tag arrives, and fails when the stream ends first.
func untilConfigOtherThan(t *testing.T, r *bufio.Reader, tag string, since time.Time) {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no configuration other than %s reached the stream %v after the change: %v", tag, time.Since(since), err)
		}
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "config":
			if got := strings.TrimPrefix(line, "data: "); got != tag {
				return
			}
		}
	}
}

// TestEventsSeeAPauseMadeRightAfterOpen: a page refreshes its content
// when its feed opens, so every change after that must reach the feed.
// A queue paused elsewhere just after the feed said "open" must be told to
// the page (a digest other than its content's), within about the
// configuration check's second.
func TestEventsSeeAPauseMadeRightAfterOpen(t *testing.T) {
	e := newEnv(t)
	e.schedule(t, "tagged", "") // queue default exists
	c := browserless(t)
	signIn(t, e, c, viewerToken)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := openFeed(t, ctx, e, c)
	shown := fragmentConfig(t, ctx, e, c, "/queues")
	start := time.Now()
	if err := e.mgrs["default"].Admin().PauseQueue(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	untilConfigOtherThan(t, r, shown, start)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the pause reached the stream after %v, want within about a second", d)
	}
}

// TestEventsSeeAPauseUndoneBetweenChecks: a page that read its content
// while a queue was paused must be told when the queue is resumed, even
// when the pause and the resume both fall between two of the feed's
// checks (the feed then saw the queue running both times; the queues'
// flags carry no version that would show the round trip).
func TestEventsSeeAPauseUndoneBetweenChecks(t *testing.T) {
	e := newEnv(t)
	e.schedule(t, "tagged", "") // queue default exists
	c := browserless(t)
	signIn(t, e, c, viewerToken)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := openFeed(t, ctx, e, c)
	m := e.mgrs["default"]
	if err := m.Admin().PauseQueue(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	paused := fragmentConfig(t, ctx, e, c, "/queues") // the page now shows it paused
	start := time.Now()
	if err := m.Admin().ResumeQueue(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	untilConfigOtherThan(t, r, paused, start)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the resume reached the stream after %v, want within about a second", d)
	}
}
