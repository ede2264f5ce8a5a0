package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInstancePageSaysWhyItWaits: the detail page of an instance no node
// may run shows the reason and the node that fails its labels.
func TestInstancePageSaysWhyItWaits(t *testing.T) {
	e := newEnv(t)
	tagged := e.schedule(t, "tagged", "")
	c := browserless(t)
	signIn(t, e, c, viewerToken)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := get(t, c, e.console+"/instances/"+tagged.GetId())
		if p.status != http.StatusOK {
			t.Fatalf("instance page: status %d", p.status)
		}
		if strings.Contains(p.body, `data-reason="no_node_with_labels"`) {
			for _, want := range []string{"Why it waits", `id="waiting-nodes"`, "gpu", "region=eu"} {
				if !strings.Contains(p.body, want) {
					t.Errorf("instance page lacks %q", want)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instance page never said no node has the labels; body:\n%s", p.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
