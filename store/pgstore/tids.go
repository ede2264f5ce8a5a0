package pgstore

import "sync"

// tidMemo remembers the tuple ID of each attempt's row version as the
// claim (or the last renewal) left it, so the finish finds the row by
// it (stmts.finishTID). An entry goes at the attempt's finish through
// this Store; attempts finished elsewhere (rescued, or through another
// Store) leave theirs, so the memo is emptied when it reaches maxTIDs.
type tidMemo struct {
	mu sync.Mutex
	m  map[string]tidOf
}

type tidOf struct {
	attempt int32
	tid     string
}

// maxTIDs bounds the memo: far more than the attempts one Store runs at
// once.
const maxTIDs = 1 << 16

func (t *tidMemo) remember(id string, attempt int32, tid string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || len(t.m) >= maxTIDs {
		t.m = make(map[string]tidOf)
	}
	t.m[id] = tidOf{attempt, tid}
}

// take forgets the attempts ids (with their attempts atts) and returns
// their tuple IDs, or nil when it does not know one of them.
func (t *tidMemo) take(ids []string, atts []int32) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, len(ids))
	for i, id := range ids {
		e, ok := t.m[id]
		if ok {
			delete(t.m, id)
		}
		if !ok || e.attempt != atts[i] {
			out = nil
		} else if out != nil {
			out[i] = e.tid
		}
	}
	return out
}
