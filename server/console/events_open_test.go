package console_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEventsSeeAPauseMadeRightAfterOpen: a page refreshes its content
// when its feed opens, so every change after that must reach the feed.
// A queue paused elsewhere just after the feed said "open" (before the
// feed had read the configuration it compares against) must still be
// told to the page, within about the configuration check's second.
func TestEventsSeeAPauseMadeRightAfterOpen(t *testing.T) {
	e := newEnv(t)
	e.schedule(t, "tagged", "") // queue default exists
	c := browserless(t)
	signIn(t, e, c, viewerToken)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.console+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
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
			break
		}
	}
	start := time.Now()
	if err := e.mgrs["default"].PauseQueue(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no change reached the stream %v after the pause: %v", time.Since(start), err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"config":true`) {
			break
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the pause reached the stream after %v, want within about a second", d)
	}
}
