package scripttest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestDueAheadOfAll checks that an instance that fell due goes ahead of
// every ready entry that became ready after its RunAt, however many (it
// goes to its lane's ready set, lib.lua flush_ready; until issue 38 the
// claim looked back at most 1,000 entries from the list's tail).
func TestDueAheadOfAll(t *testing.T) {
	for _, tc := range []struct{ newer, want int }{{600, 0}, {1500, 0}, {5000, 0}} {
		t.Run(fmt.Sprint(tc.newer), func(t *testing.T) {
			c, r := hookCore(t)
			e := &interleave{t: t, c: c, r: r}
			e.enqueue(ibase, iinst("due", "k", ibase.Add(time.Second)))
			for b := 0; b < tc.newer; b += 100 {
				var ins []*store.Instance
				for i := b; i < b+100 && i < tc.newer; i++ {
					ins = append(ins, iinst(fmt.Sprintf("new-%04d", i), "k", ibase.Add(2*time.Second)))
				}
				e.enqueue(ibase.Add(2*time.Second), ins...)
			}
			got := e.claim("q", tc.newer+1, ibase.Add(3*time.Second), ibase.Add(time.Hour))
			ids := make([]string, len(got))
			for i, in := range got {
				ids[i] = in.ID
			}
			if len(ids) != tc.newer+1 {
				t.Fatalf("claimed %d, want %d", len(ids), tc.newer+1)
			}
			if at := slices.Index(ids, "due"); at != tc.want {
				t.Fatalf("the due instance was claimed at %d, want %d (ahead of all %d entries that became ready after its RunAt)", at, tc.want, tc.newer)
			}
			for i, id := range slices.Delete(ids, tc.want, tc.want+1) {
				if want := fmt.Sprintf("new-%04d", i); id != want {
					t.Fatalf("claim %d is %s, want %s: the ready entries keep their order", i, id, want)
				}
			}
		})
	}
}
