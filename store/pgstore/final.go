package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// final gathers what a write transaction appends at its end: history
// records, changes of the per-group counters and the queues to wake. Its
// statement is always the transaction's last. It takes no lock beyond
// the rows it writes: each history record takes the place in the event
// feed's order of its instance row (hx, raised by saveRows to the
// transaction's id: migration 0010), and the counter changes are rows of
// their own (count_deltas), which compaction folds into the counters.
type final struct {
	hID, hKind, hQueue, hNode, hErr []string
	hState                          []int16
	hAttempt                        []int32
	hT                              []int64
	hResult                         [][]byte
	// hProc marks records that end a running attempt: the attempt's
	// Processing record, kept on the instance row since the claim
	// (migration 0008), goes into the same history row; hProcNode is the
	// node that claimed it.
	hProc     []bool
	hProcNode []string

	delta map[countKey]int64
	wake  map[string]struct{}
}

type countKey struct {
	queue, kind string
	state       store.State
}

// hist appends a history record.
func (f *final) hist(id, kind, queue string, state store.State, attempt int, t time.Time, node, errMsg string, result []byte) {
	f.hID = append(f.hID, id)
	f.hKind = append(f.hKind, kind)
	f.hQueue = append(f.hQueue, queue)
	f.hState = append(f.hState, int16(state))
	f.hAttempt = append(f.hAttempt, int32(attempt))
	f.hT = append(f.hT, nanos(t))
	f.hNode = append(f.hNode, node)
	f.hErr = append(f.hErr, errMsg)
	f.hResult = append(f.hResult, result)
	f.hProc = append(f.hProc, false)
	f.hProcNode = append(f.hProcNode, "")
}

// endsAttempt marks the record hist appended last as the end of a running
// attempt that owner claimed: its history row takes the attempt's
// Processing record from the instance row (none for an attempt claimed
// before migration 0008, whose record is a row of its own).
func (f *final) endsAttempt(owner string) {
	f.hProc[len(f.hProc)-1] = true
	f.hProcNode[len(f.hProcNode)-1] = owner
}

// move counts an instance of (queue, kind) leaving state from (0: new)
// for state to (0: removed).
func (f *final) move(queue, kind string, from, to store.State) {
	from, to = counted(from), counted(to)
	if from == to {
		return
	}
	if f.delta == nil {
		f.delta = map[countKey]int64{}
	}
	if from != 0 {
		f.delta[countKey{queue, kind, from}]--
	}
	if to != 0 {
		f.delta[countKey{queue, kind, to}]++
	}
}

// counted is the state whose counter holds st: Processing instances are
// counted with the Scheduled ones (migration 0011), so a claim moves no
// counter, and Counts tells them apart by counting the running rows.
func counted(st store.State) store.State {
	if st == store.Processing {
		return store.Scheduled
	}
	return st
}

// wakeQueue wakes the subscribers of queue at the commit.
func (f *final) wakeQueue(queue string) {
	if f.wake == nil {
		f.wake = map[string]struct{}{}
	}
	f.wake[queue] = struct{}{}
}

func (f *final) empty() bool {
	return len(f.hID) == 0 && len(f.delta) == 0 && len(f.wake) == 0
}

var finalSQL sync.Map // quoted schema -> statement

func (s *Store) finalStmt() string {
	if v, ok := finalSQL.Load(s.cfg.quoted); ok {
		return v.(string)
	}
	q := fmt.Sprintf(`WITH h AS (INSERT INTO %[1]s (ns, instance_id, kind, queue, state, attempt, t, node, error, result,
		proc_pos, proc_t, proc_node, hx, proc_hx)
	SELECT $1, x.id, x.kind, x.queue, x.state, x.attempt, x.t, x.node, x.error, x.result,
		CASE WHEN x.proc THEN i.proc_pos END, CASE WHEN x.proc THEN i.proc_t END,
		CASE WHEN x.proc AND i.proc_pos > 0 AND x.pnode <> x.node THEN x.pnode END,
		greatest(pg_current_xact_id(), i.hx), CASE WHEN x.proc AND i.proc_pos > 0 THEN i.proc_hx END
	FROM unnest($2::text[], $3::text[], $4::text[], $5::int2[], $6::int4[], $7::int8[], $8::text[], $9::text[], $10::bytea[],
			$17::bool[], $18::text[])
		WITH ORDINALITY AS x(id, kind, queue, state, attempt, t, node, error, result, proc, pnode, o)
		LEFT JOIN %[3]s i ON i.ns = $1 AND i.id = x.id
	ORDER BY x.o RETURNING 1),
c AS (INSERT INTO %[2]s (ns, queue, kind, state, n)
	SELECT $1, y.queue, y.kind, y.state, y.n
	FROM unnest($11::text[], $12::text[], $13::int2[], $14::int8[]) AS y(queue, kind, state, n)
	WHERE y.n <> 0
	RETURNING 1),
w AS (SELECT pg_notify($15, p) FROM unnest($16::text[]) AS p)
SELECT (SELECT count(*) FROM h), (SELECT count(*) FROM c), (SELECT count(*) FROM w)`, s.t("history"), s.t("count_deltas"), s.t("instances"))
	finalSQL.Store(s.cfg.quoted, q)
	return q
}

// apply runs f's statement as the last of tx.
func (s *Store) apply(ctx context.Context, tx pgx.Tx, f *final) error {
	if f.empty() {
		return nil
	}
	keys := make([]countKey, 0, len(f.delta))
	for k := range f.delta {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b countKey) int {
		return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.kind, b.kind), cmp.Compare(a.state, b.state))
	})
	cq := make([]string, len(keys))
	ck := make([]string, len(keys))
	cs := make([]int16, len(keys))
	cn := make([]int64, len(keys))
	for i, k := range keys {
		cq[i], ck[i], cs[i], cn[i] = k.queue, k.kind, int16(k.state), f.delta[k]
	}
	wake := make([]string, 0, len(f.wake))
	for q := range f.wake {
		wake = append(wake, s.payload(q))
	}
	slices.Sort(wake)
	var a, b, c int64
	err := tx.QueryRow(ctx, s.finalStmt(), s.cfg.ns,
		f.hID, f.hKind, f.hQueue, f.hState, f.hAttempt, f.hT, f.hNode, f.hErr, f.hResult,
		cq, ck, cs, cn, s.channel, wake, f.hProc, f.hProcNode).Scan(&a, &b, &c)
	if err == nil && len(keys) > 0 {
		s.wroteCounts()
	}
	return err
}

// payload is the notification of queue in the store's namespace: the
// namespace's length, a colon, the namespace and the queue.
func (s *Store) payload(queue string) string {
	return strconv.Itoa(len(s.cfg.ns)) + ":" + s.cfg.ns + queue
}
