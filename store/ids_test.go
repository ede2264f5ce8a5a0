package store

import "testing"

// Shard and workflow task IDs are stored and derived again by every
// process, so they must not change from one version to the next.
func TestNameBasedIDsAreStable(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{ShardID("p-1", 7), "db893c12-0967-5a18-97d7-cbf6640e6730"},
		{WorkflowTaskID("wf-1", "resize"), "96216881-3eeb-5457-b9f5-2d427b9c4e73"},
	} {
		if c.got != c.want {
			t.Errorf("got ID %s, want %s (IDs stored by earlier versions)", c.got, c.want)
		}
	}
}
