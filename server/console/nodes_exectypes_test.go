package console_test

import (
	"regexp"
	"testing"
)

// TestNodesPageShowsExecutorTypes: the Nodes page names the executor
// types each node enables.
func TestNodesPageShowsExecutorTypes(t *testing.T) {
	e := newEnvOn(t, memdb, withWebhook(t))
	c := browserless(t)
	signIn(t, e, c, adminToken)
	p := get(t, c, e.console+"/nodes")
	if p.status != 200 {
		t.Fatalf("/nodes: status %d:\n%s", p.status, p.body)
	}
	if !regexp.MustCompile(`<th scope="col">Executor types</th>`).MatchString(p.body) ||
		!regexp.MustCompile(`<td class="exec-types"><span class="badge">webhook</span>`).MatchString(p.body) {
		t.Fatalf("/nodes does not name the webhook type the node enables:\n%s", p.body)
	}
}
