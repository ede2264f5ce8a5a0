package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestNewCalendarIsAtVersionOne: a calendar created after others shows
// version 1, and 2 after one change, not a number counted across every
// document of the namespace.
func TestNewCalendarIsAtVersionOne(t *testing.T) {
	e := newEnv(t)
	c := browserless(t)
	csrf := signIn(t, e, c, adminToken)
	for _, name := range []string{"first", "second", "third"} {
		p := post(t, c, e.console+"/calendars", url.Values{"csrf": {csrf}, "name": {name}, "tz": {"UTC"}, "workdays": {"2", "3"}}, nil)
		if p.status != http.StatusSeeOther {
			t.Fatalf("create %s: %d\n%s", name, p.status, p.body)
		}
	}
	if p := get(t, c, e.console+"/calendars/third"); !strings.Contains(p.body, "<dt>Version</dt><dd>1, changed") {
		t.Fatalf("a new calendar's page does not show version 1:\n%s", p.body)
	}
}
