package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/server/console"
)

var (
	rowRE        = regexp.MustCompile(`<tr data-id="([^"]+)"`)
	searchInfoRE = regexp.MustCompile(`id="search-info"[^>]*>([^<]*)`)
	moreRE       = regexp.MustCompile(`href="([^"]+)" id="search-more"`)
)

// TestInstancesSearchText: the Instances page searches arguments, results
// and errors on the server, says how many instances it has searched of
// how many, continues a search that stopped at its scan limit, and offers
// no bulk action on a search (the server refuses one).
func TestInstancesSearchText(t *testing.T) {
	e := newEnvOn(t, memdb, withConsole(func(c *console.Config) { c.SearchScanLimit = 4 }))
	var want []string
	for _, name := range []string{"Ada", "Grace", "Linus", "Barbara", "Ken", "Adele"} {
		id := e.schedule(t, "greet", `["`+name+`"]`).GetId()
		e.waitState(t, id, pb.State_STATE_COMPLETED)
		if strings.Contains(strings.ToLower(name), "ad") {
			want = append([]string{id}, want...) // newest first
		}
	}
	failed := e.schedule(t, "flaky", "").GetId()
	e.waitState(t, failed, pb.State_STATE_TERMINATED)
	c := browserless(t)
	signIn(t, e, c, operatorToken)

	// 7 instances, 4 a page: two pages; "AD" is in Ada's and Adele's
	// arguments (and results), one on each page.
	p := get(t, c, e.console+"/instances?"+url.Values{"text": {"AD"}}.Encode())
	var got []string
	for _, m := range rowRE.FindAllStringSubmatch(p.body, -1) {
		got = append(got, m[1])
	}
	info := searchInfoRE.FindStringSubmatch(p.body)
	more := moreRE.FindStringSubmatch(p.body)
	if p.status != http.StatusOK || info == nil || !strings.Contains(info[1], "Searched 4 instances of 7 so far") || more == nil {
		t.Fatalf("first page of the search: status %d, info %q, continue link %v:\n%s", p.status, info, more, p.body)
	}
	if strings.Contains(p.body, `id="bulk"`) || !strings.Contains(p.body, `id="bulk-no-text"`) {
		t.Error("a search page offers bulk actions")
	}
	p = get(t, c, e.console+strings.ReplaceAll(strings.TrimPrefix(more[1], "/console"), "&amp;", "&"))
	for _, m := range rowRE.FindAllStringSubmatch(p.body, -1) {
		got = append(got, m[1])
	}
	info = searchInfoRE.FindStringSubmatch(p.body)
	if info == nil || !strings.Contains(info[1], "Searched 7 instances of 7 so far: every instance this filter selects") || moreRE.MatchString(p.body) {
		t.Fatalf("second page of the search: info %q:\n%s", info, p.body)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the search listed %v, want %v", got, want)
	}

	// In an error, narrowed to failed instances.
	p = get(t, c, e.console+"/instances?"+url.Values{"text": {"on purpose"}, "state": {"terminated"}}.Encode())
	if rows := rowRE.FindAllStringSubmatch(p.body, -1); len(rows) != 1 || rows[0][1] != failed {
		t.Fatalf("error search: %v, want %s:\n%s", rows, failed, p.body)
	}
	if info := searchInfoRE.FindStringSubmatch(p.body); info == nil || !strings.Contains(info[1], "Searched 1 instance of 1 so far") {
		t.Fatalf("error search says %q", info)
	}
	// Nothing found says what to do.
	p = get(t, c, e.console+"/instances?"+url.Values{"text": {"nobody"}, "kind": {"flaky"}}.Encode())
	if !strings.Contains(p.body, "No instance holds this text") {
		t.Fatalf("an empty search says:\n%s", p.body)
	}
}
