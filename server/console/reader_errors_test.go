package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestErrorsNameTheConsolesFix (issue 33 item 6): where the API's
// message names an API call, the console names what to do in the console.
func TestErrorsNameTheConsolesFix(t *testing.T) {
	e := newEnv(t)
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)

	// An unknown kind: the Executors page, not DefinitionService.
	p := post(t, c, e.console+"/schedule", url.Values{"csrf": {csrf}, "kind": {"nosuch"}, "args": {`[]`}}, nil)
	want := `unknown kind "nosuch": the store holds no definition of it and this node does not register it`
	fix := `; define it on the Executors page (a job made of data), or start a worker that registers it (not_found)`
	body := html.UnescapeString(p.body)
	if p.status != http.StatusNotFound || !strings.Contains(body, want) || !strings.Contains(body, fix) || strings.Contains(body, "DefinitionService") {
		t.Errorf("unknown kind: status %d, want 404 with %q and %q; body:\n%s", p.status, want, fix, body)
	}

	// A paused queue: the Queues page, not QueueService.ResumeQueue.
	if err := e.mgrs["default"].Admin().PauseQueue(context.Background(), "default"); err != nil {
		t.Fatal(err)
	}
	in := e.schedule(t, "greet", `["x"]`)
	p = get(t, c, e.console+"/instances/"+in.GetId())
	body = html.UnescapeString(p.body)
	if want := `queue "default" is paused; resume it on the Queues page to run its instances`; p.status != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("instance in a paused queue: status %d, want %q; body:\n%s", p.status, want, body)
	}
}
