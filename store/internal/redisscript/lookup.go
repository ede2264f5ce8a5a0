package redisscript

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// LookupInstances implements store.History. By ID it reads one instance.
// With states it asks the plan script which is smaller: the states' own
// structures (scheduled sets and ready lists, the run set, done lists) or
// the kind's buckets over the CreatedAt range, and reads that one, so
// looking up what runs, waits or failed never reads the completed history.
// Otherwise it reads the kind's buckets (or every kind's) newest second
// first over the CreatedAt range, so a bounded query reads only its range
// and a limited one stops once it has enough.
func (c *Core) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(q.IDs) > 0 && q.InstanceID == "" {
		return store.LookupIDs(ctx, q, c.byIDs)
	}
	if q.Parent != "" && q.InstanceID == "" {
		return store.LookupShards(ctx, q, c.byIDs)
	}
	if q.InstanceID != "" {
		got, err := c.records(ctx, []string{EncodeID(q.InstanceID)})
		in := got[EncodeID(q.InstanceID)]
		if in == nil || !q.MatchInstance(in) {
			return []*store.Instance{}, err
		}
		return []*store.Instance{in}, err
	}
	var out []*store.Instance
	var errs []error
	// match keeps the instances stored under sids that match q, each once:
	// an ID reused with another kind after it was pruned is in a bucket of
	// each kind.
	kept := map[string]bool{}
	match := func(sids []string) int {
		got, err := c.records(ctx, sids)
		if err != nil {
			errs = append(errs, err)
		}
		n := 0
		for _, sid := range sids {
			if in := got[sid]; in != nil && !kept[sid] && q.MatchInstance(in) {
				kept[sid] = true
				out = append(out, in)
				n++
			}
		}
		return n
	}
	byState := false
	if len(q.States) > 0 {
		var err error
		if byState, err = c.planByState(ctx, q); err != nil {
			return nil, err
		}
	}
	if byState {
		if err := c.eachInState(ctx, q.States, q.Queue, func(sids []string) error { match(sids); return nil }); err != nil {
			return nil, err
		}
	} else {
		kinds, err := c.kinds(ctx, q.Kind)
		if err != nil {
			return nil, err
		}
		for _, k := range kinds {
			matched := 0
			err := c.eachSecond(ctx, k, q.Since, q.Until, func(sec int64, raw string, all, fresh []string) (bool, error) {
				if q.Limit > 0 && len(all) > bigBucket {
					// A big second: read its newest first, only as many
					// as still wanted (lookup_order.go).
					n, err := c.newestOfSecond(ctx, k, sec, raw, all, q.Since, q.Until, q.Limit-matched, match)
					matched += n
					return matched < q.Limit, err
				}
				for len(fresh) > 0 {
					n := min(len(fresh), 1000)
					matched += match(fresh[:n])
					fresh = fresh[n:]
				}
				return q.Limit == 0 || matched < q.Limit, nil
			})
			if err != nil {
				return nil, err
			}
		}
	}
	slices.SortFunc(out, func(a, b *store.Instance) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.Seq, a.Seq)
	})
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []*store.Instance{}
	}
	return out, errors.Join(errs...)
}

// planByState tells whether a lookup of q's states reads fewer entries
// through the states' own structures than through the kind buckets, from
// the plan script's counts. A kind walk with a limit stops once it has
// that many matches: with the states spread evenly over the instances,
// after about Limit × stored ÷ in-state instances.
func (c *Core) planByState(ctx context.Context, q *store.Query) (bool, error) {
	args := []string{q.Kind, q.Queue, us(q.Since), us(q.Until)}
	for _, st := range q.States {
		args = append(args, itoa(int(st)))
	}
	v, err := c.run(ctx, Plan, args...)
	if err != nil {
		return false, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return false, fmt.Errorf("%s: plan: malformed reply", c.name)
	}
	byState, byKind, stored := asInt(a[0]), asInt(a[1]), asInt(a[2])
	if q.Limit > 0 && byState > 0 {
		byKind = min(byKind, int64(q.Limit)*stored/byState)
	}
	return byState < byKind, nil
}

// eachInState calls fn with the stored IDs of the instances that may be in
// one of states, in parts of at most 1000 new IDs, from the states' own
// structures: for Scheduled the scheduled set and the ready lists of queue
// (of every queue when it is empty), for Processing the run set, for a
// final state its done list, and the late set. An ID is passed once; an
// instance that has left the states since may be among them, so the
// caller checks each instance's state.
//
// Every instance in one of the states for the whole lookup is passed,
// though instances move between the structures while they are read in
// pages. Each read passes every member present for the whole of it, and
// the reads follow the way instances move: the scheduled set (a due one
// moves to the tail of its ready list), the ready lists (a claimed one
// moves to the run set), the run set (a finished one to a done list), the
// done lists. One that moves on during a read is in a structure read
// later. The only way back is from the run set to a queue (a rescued,
// retried or handed-back attempt), so with both Scheduled and Processing
// asked for, the queues are read again after the run set.
func (c *Core) eachInState(ctx context.Context, states []store.State, queue string, fn func(sids []string) error) error {
	seen := map[string]bool{}
	var part []string
	add := func(sid string) error {
		if seen[sid] {
			return nil
		}
		seen[sid] = true
		part = append(part, sid)
		if len(part) < 1000 {
			return nil
		}
		err := fn(part)
		part = nil
		return err
	}
	// strip passes each member without its first n bytes.
	strip := func(n int) func([]string) error {
		return func(ms []string) error {
			for _, m := range ms {
				if len(m) > n {
					if err := add(m[n:]); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	scheduled := func() error { return c.eachScheduled(ctx, queue, strip(schedHead), strip) }
	sched, proc := slices.Contains(states, store.Scheduled), slices.Contains(states, store.Processing)
	if sched {
		if err := scheduled(); err != nil {
			return err
		}
	}
	if proc {
		if err := c.scanSet(ctx, "SSCAN", c.keys.Run(), strip(0)); err != nil {
			return err
		}
		if sched {
			if err := scheduled(); err != nil {
				return err
			}
		}
	}
	final := false
	for _, st := range finalStates {
		if slices.Contains(states, st) {
			final = true
			if err := c.listTail(ctx, c.keys.Done(st), strip(doneHead)); err != nil {
				return err
			}
		}
	}
	if final {
		if err := c.scanSet(ctx, "ZSCAN", c.keys.Late(), strip(0)); err != nil {
			return err
		}
	}
	if len(part) > 0 {
		return fn(part)
	}
	return nil
}

// finalStates are the states with a done list each.
var finalStates = []store.State{store.Completed, store.Terminated, store.Canceled, store.TimedOut}

// The bytes before the ID in a member of a ready list (Seq), of a
// scheduled set (Seq, priority) and of a done list (FinishedAt); see
// lua/lib.lua.
const (
	readyHead       = 13 // RunAt (7 bytes), Seq (6 bytes)
	legacyReadyHead = 6  // Seq (6 bytes): a ready list written before lanes
	// readySetMark starts the lane part of the lane index member of a
	// lane's ready set, "<prio>/x<lane>" (lua/lib.lua SET_MARK).
	readySetMark = 'x'
	schedHead    = 10
	doneHead     = 7
)

// eachScheduled passes the members of the scheduled set of queue (of
// every queue when it is empty) to sched and then those of its ready lists
// to ready(head), head being the length of their entries' heads, in pages:
// a due instance moves from the set to a ready list, which is read after.
func (c *Core) eachScheduled(ctx context.Context, queue string, sched func([]string) error, ready func(head int) func([]string) error) error {
	queues := []string{queue}
	if queue == "" {
		v, err := c.r.Do(ctx, "SMEMBERS", c.keys.Queues())
		if err != nil {
			return c.wrap(ctx, "lookup", err)
		}
		queues = queues[:0]
		for _, q := range asArray(v) {
			queues = append(queues, asString(q))
		}
	}
	for _, q := range queues {
		if err := c.scanSet(ctx, "ZSCAN", c.keys.Sched(q), sched); err != nil {
			return err
		}
		v, err := c.r.Do(ctx, "ZRANGE", c.keys.Levels(q), "0", "-1")
		if err != nil {
			return c.wrap(ctx, "lookup", err)
		}
		for _, lv := range asArray(v) {
			member := asString(lv)
			key := c.keys.Prefix + "q:" + q + ":r:" + member
			slash := strings.IndexByte(member, '/')
			if slash >= 0 && slash+1 < len(member) && member[slash+1] == readySetMark {
				// A lane's ready set (lua/lib.lua flush_ready).
				if err := c.scanSet(ctx, "ZSCAN", key, ready(readyHead)); err != nil {
					return err
				}
				continue
			}
			head := readyHead
			if slash < 0 {
				head = legacyReadyHead // written before lanes
			}
			if err := c.listTail(ctx, key, ready(head)); err != nil {
				return err
			}
		}
	}
	return nil
}

// pageSize is how many members one lookup command reads.
const pageSize = 1000

// listTail passes the members of list key to fn in pages, from its tail to
// its head. Pages are counted from the tail, so what claims and retention
// take from the head while it reads shifts nothing it has not read, and
// what is pushed at the tail only makes it read some members twice.
func (c *Core) listTail(ctx context.Context, key string, fn func([]string) error) error {
	for end := -1; ; end -= pageSize {
		v, err := c.r.Do(ctx, "LRANGE", key, itoa(end-pageSize+1), itoa(end))
		if err != nil {
			return c.wrap(ctx, "lookup", err)
		}
		a := asArray(v)
		ms := make([]string, len(a))
		for i, m := range a {
			ms[i] = asString(m)
		}
		if err := fn(ms); err != nil {
			return err
		}
		if len(a) < pageSize {
			return nil
		}
	}
}

// scanSet passes the members of the set (cmd SSCAN) or sorted set (cmd
// ZSCAN) key to fn in pages: a member present for the whole scan is passed
// at least once.
func (c *Core) scanSet(ctx context.Context, cmd, key string, fn func([]string) error) error {
	step := 1
	if cmd == "ZSCAN" {
		step = 2 // member, score
	}
	cursor := "0"
	for {
		v, err := c.r.Do(ctx, cmd, key, cursor, "COUNT", itoa(pageSize))
		if err != nil {
			return c.wrap(ctx, "lookup", err)
		}
		a := asArray(v)
		if len(a) != 2 {
			return fmt.Errorf("%s: lookup: malformed %s reply", c.name, cmd)
		}
		flat := asArray(a[1])
		ms := make([]string, 0, len(flat)/step)
		for i := 0; i < len(flat); i += step {
			ms = append(ms, asString(flat[i]))
		}
		if err := fn(ms); err != nil {
			return err
		}
		if cursor = asString(a[0]); cursor == "0" || cursor == "" {
			return nil
		}
	}
}

// kinds returns []string{kind}, or every kind when kind is empty.
func (c *Core) kinds(ctx context.Context, kind string) ([]string, error) {
	if kind != "" {
		return []string{kind}, nil
	}
	v, err := c.r.Do(ctx, "SMEMBERS", c.keys.Kinds())
	if err != nil {
		return nil, c.wrap(ctx, "lookup", err)
	}
	var out []string
	for _, k := range asArray(v) {
		out = append(out, asString(k))
	}
	return out, nil
}

// eachSecond calls fn with each bucket of kind whose second overlaps
// [since, until), newest second first, until fn returns false: the
// second, the bucket's bytes, its stored IDs (all) and those of them not
// passed before (fresh: an ID is in two buckets when it was enqueued
// again after it was pruned). A second's IDs are in enqueue order, not
// CreatedAt order, so a caller that wants the newest reads a second whole
// or in its order (newestOfSecond).
func (c *Core) eachSecond(ctx context.Context, kind string, since, until time.Time, fn func(sec int64, raw string, all, fresh []string) (bool, error)) error {
	maxS, minS := "+inf", "-inf"
	if !until.IsZero() {
		maxS = strconv.FormatInt(floorDiv(Micros(until)-1, 1e6), 10)
	}
	if !since.IsZero() {
		minS = strconv.FormatInt(floorDiv(Micros(since), 1e6), 10)
	}
	seen := map[string]bool{}
	const page = 100
	for offset := 0; ; offset += page {
		v, err := c.r.Do(ctx, "ZRANGE", c.keys.KindDir(kind), maxS, minS, "BYSCORE", "REV", "LIMIT", itoa(offset), itoa(page))
		if err != nil {
			return c.wrap(ctx, "lookup", err)
		}
		secs := asArray(v)
		for _, sv := range secs {
			sec, _ := strconv.ParseInt(asString(sv), 10, 64)
			b, err := c.r.Do(ctx, "GET", c.keys.KindBucket(kind, sec))
			if err != nil {
				return c.wrap(ctx, "lookup", err)
			}
			raw := asString(b)
			sids, err := splitBucket(raw)
			if err != nil {
				return fmt.Errorf("%s: lookup: kind %q second %d: %w", c.name, kind, sec, err)
			}
			fresh := make([]string, 0, len(sids))
			for _, sid := range sids {
				if !seen[sid] {
					seen[sid] = true
					fresh = append(fresh, sid)
				}
			}
			if more, err := fn(sec, raw, sids, fresh); err != nil || !more {
				return err
			}
		}
		if len(secs) < page {
			return nil
		}
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// splitBucket splits a kind bucket into its stored IDs, each preceded by
// its length in 2 bytes.
func splitBucket(b string) ([]string, error) {
	var out []string
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, corrupt("a kind bucket", b)
		}
		n := int(b[0])<<8 | int(b[1])
		if len(b) < 2+n {
			return nil, corrupt("a kind bucket", b)
		}
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out, nil
}

// byIDs reads the instances stored under ids, in the order of ids; it is
// the store.GetInstances of store.LookupShards.
func (c *Core) byIDs(ctx context.Context, ids []string) ([]*store.Instance, error) {
	sids := make([]string, len(ids))
	for i, id := range ids {
		sids[i] = EncodeID(id)
	}
	got, err := c.records(ctx, sids)
	out := make([]*store.Instance, 0, len(got))
	for _, sid := range sids {
		if in := got[sid]; in != nil {
			out = append(out, in)
		}
	}
	return out, err
}

// records reads the instances stored under sids (stored IDs), keyed by
// stored ID; missing ones are left out, undecodable ones too, with an
// error wrapping store.ErrCorrupt naming each.
func (c *Core) records(ctx context.Context, sids []string) (map[string]*store.Instance, error) {
	out := make(map[string]*store.Instance, len(sids))
	var errs []error
	for len(sids) > 0 {
		n := min(len(sids), 1000)
		v, err := c.run(ctx, Records, sids[:n]...)
		if err != nil {
			return out, err
		}
		a := asArray(v)
		if len(a) != 2*n {
			return out, fmt.Errorf("%s: records: malformed reply", c.name)
		}
		for i, sid := range sids[:n] {
			spec := asString(a[2*i])
			if spec == "" {
				continue
			}
			in, err := c.decodeStored(sid, spec, asString(a[2*i+1]))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out[sid] = in
		}
		sids = sids[n:]
	}
	return out, errors.Join(errs...)
}

func (c *Core) wrap(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", c.name, op, ctx.Err())
	}
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: %s: %s: a key of namespace %q holds a value of another type: %v", store.ErrCorrupt, c.name, op, c.keys.Prefix, err)
	}
	return fmt.Errorf("%s: %s: %w", c.name, op, err)
}

// entryRow is one instance as of_instances returns it: its spec and state
// as stored (” when missing) and the indexes of its stream entries.
type entryRow struct {
	sid, spec, state string
	refs             []int
}

// ofInstances reads the specs, states and stream entries ('h' history, 'l'
// logs) of the instances stored under sids, which must be unique, in
// calls of at most ofInstancesBatch, passing each call's rows and its
// entries (each entry once, however many rows refer to it) to fn.
func (c *Core) ofInstances(ctx context.Context, what string, sids []string, fn func(rows []entryRow, entries []string)) error {
	for len(sids) > 0 {
		n := min(len(sids), ofInstancesBatch)
		v, err := c.run(ctx, OfInstances, append([]string{what}, sids[:n]...)...)
		if err != nil {
			return err
		}
		a := asArray(v)
		if len(a) != 2 {
			return fmt.Errorf("%s: of_instances: malformed reply", c.name)
		}
		flat, raw := asArray(a[0]), asArray(a[1])
		if len(flat) != 3*n {
			return fmt.Errorf("%s: of_instances: malformed reply", c.name)
		}
		rows := make([]entryRow, n)
		for i := range rows {
			r := entryRow{sid: sids[i], spec: asString(flat[3*i]), state: asString(flat[3*i+1])}
			for _, x := range asArray(flat[3*i+2]) {
				if j := int(asInt(x)) - 1; j >= 0 && j < len(raw) {
					r.refs = append(r.refs, j)
				}
			}
			rows[i] = r
		}
		entries := make([]string, len(raw))
		for i, e := range raw {
			entries[i] = asString(e)
		}
		fn(rows, entries)
		sids = sids[n:]
	}
	return nil
}

// ofInstancesBatch bounds the instances one of_instances call reads, so a
// call stays short however many a lookup wants.
const ofInstancesBatch = 100

// scan pages through a stream's time range, calling fn for each raw entry
// until fn returns false.
func (c *Core) scan(ctx context.Context, which string, q *store.Query, fn func(raw string) bool) error {
	cursor := ""
	for {
		v, err := c.run(ctx, Range, which, us(q.Since), us(q.Until), "1000", cursor)
		if err != nil {
			return err
		}
		a := asArray(v)
		if len(a) != 2 {
			return fmt.Errorf("%s: stream_range: malformed reply", c.name)
		}
		for _, e := range asArray(a[0]) {
			if !fn(asString(e)) {
				return nil
			}
		}
		cursor = asString(a[1])
		if cursor == "" {
			return nil
		}
	}
}

// LookupHistory implements store.History. By instance it reads the
// instance's own entries. Without a start of the time range, by kind or
// by final states only, it reads the histories of the instances that can
// have such records: the kind's created before the range ends and, when
// every state asked for is final, only those in one of those states (a
// final record belongs to an instance that is in that state); that
// instance lookup reads the cheaper of the kind buckets and the states'
// done lists. Otherwise it reads the history stream over the time range
// (entry IDs are record times). Records of instances that are gone
// (pruned) are left out; the others get their instance's kind.
func (c *Core) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*store.HistoryRecord
	var errs []error
	finals := len(q.States) > 0 && !slices.ContainsFunc(q.States, func(st store.State) bool { return !st.Final() })
	switch {
	case q.InstanceID != "":
		if err := c.histories(ctx, q, []string{EncodeID(q.InstanceID)}, &out, &errs); err != nil {
			return nil, err
		}
	case q.Since.IsZero() && (q.Kind != "" || finals):
		// The instances that can have such records: with final states only,
		// those in one of them, whenever created (a record's time can be
		// before its instance's CreatedAt when the callers' clocks differ);
		// otherwise the kind's, created before the range ends.
		iq := &store.Query{Kind: q.Kind, Until: q.Until}
		if finals {
			iq.States, iq.Until = q.States, time.Time{}
		}
		ins, err := c.LookupInstances(ctx, iq)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
		}
		sids := make([]string, len(ins))
		for i, in := range ins {
			sids[i] = EncodeID(in.ID)
		}
		if err := c.histories(ctx, q, sids, &out, &errs); err != nil {
			return nil, err
		}
	default:
		var recs []*store.HistoryRecord
		err := c.scan(ctx, "h", q, func(raw string) bool {
			hs, err := decodeHistory(raw)
			if err != nil {
				errs = append(errs, err)
				return true
			}
			for _, h := range hs {
				if q.InRange(h.Time) && (len(q.States) == 0 || slices.Contains(q.States, h.State)) {
					recs = append(recs, h)
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		var sids []string
		seen := map[string]bool{}
		for _, h := range recs {
			if sid := EncodeID(h.InstanceID); !seen[sid] {
				seen[sid] = true
				sids = append(sids, sid)
			}
		}
		ins, err := c.records(ctx, sids)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
		}
		for _, h := range recs {
			if in := ins[EncodeID(h.InstanceID)]; in != nil {
				h.Kind = in.Kind
				if q.MatchHistory(h) {
					out = append(out, h)
				}
			}
		}
	}
	orderBySeq(out, func(h *store.HistoryRecord) (string, uint64, time.Time) { return h.InstanceID, h.Seq, h.Time })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []*store.HistoryRecord{}
	}
	return out, errors.Join(errs...)
}

// histories appends to out the history records of the instances stored
// under sids (unique) that match q, each with its instance's kind, and to
// errs what could not be decoded. A missing instance has no history; one
// whose record is damaged gets its records without a kind, and an error.
// Each entry is decoded once however many of the instances share it.
func (c *Core) histories(ctx context.Context, q *store.Query, sids []string, out *[]*store.HistoryRecord, errs *[]error) error {
	return c.ofInstances(ctx, "h", sids, func(rows []entryRow, entries []string) {
		decoded := make([][]*store.HistoryRecord, len(entries))
		done := make([]bool, len(entries))
		for _, r := range rows {
			if r.spec == "" {
				continue
			}
			id, err := DecodeID(r.sid)
			if err != nil {
				*errs = append(*errs, err)
				continue
			}
			in, err := DecodeInstance(id, r.spec, r.state)
			if err != nil {
				*errs = append(*errs, err)
				in = &store.Instance{ID: id}
			}
			for _, j := range r.refs {
				if !done[j] {
					done[j] = true
					if decoded[j], err = decodeHistory(entries[j]); err != nil {
						*errs = append(*errs, err)
					}
				}
				for _, h := range decoded[j] {
					if h.InstanceID == id {
						h.Kind = in.Kind
						if q.MatchHistory(h) {
							*out = append(*out, h)
						}
					}
				}
			}
		}
	})
}

// LookupLogs implements store.Logs: by instance from the instance's list
// of entries, otherwise over the logs stream's time range.
func (c *Core) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*store.LogRecord
	var errs []error
	add := func(raw string) {
		l, err := decodeLog(raw)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if q.MatchLog(l) {
			out = append(out, l)
		}
	}
	if q.InstanceID != "" {
		err := c.ofInstances(ctx, "l", []string{EncodeID(q.InstanceID)}, func(_ []entryRow, entries []string) {
			for _, e := range entries {
				add(e)
			}
		})
		if err != nil {
			return nil, err
		}
	} else if err := c.scan(ctx, "l", q, func(raw string) bool { add(raw); return true }); err != nil {
		return nil, err
	}
	orderBySeq(out, func(l *store.LogRecord) (string, uint64, time.Time) { return l.InstanceID, l.Seq, l.Time })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	if out == nil {
		out = []*store.LogRecord{}
	}
	return out, errors.Join(errs...)
}

// orderBySeq sorts recs oldest first by time, except that the records of
// one instance keep their Seq order (callers' clocks may disagree by a few
// ms; the store's Seq is the true order): each instance's records are put,
// in Seq order, into the places its records hold in the time order.
func orderBySeq[T any](recs []T, key func(T) (string, uint64, time.Time)) {
	slices.SortStableFunc(recs, func(a, b T) int {
		_, _, ta := key(a)
		_, _, tb := key(b)
		return ta.Compare(tb)
	})
	places := map[string][]int{}
	for i, r := range recs {
		id, _, _ := key(r)
		places[id] = append(places[id], i)
	}
	for _, idx := range places {
		if len(idx) < 2 {
			continue
		}
		group := make([]T, len(idx))
		for j, i := range idx {
			group[j] = recs[i]
		}
		slices.SortStableFunc(group, func(a, b T) int {
			_, sa, _ := key(a)
			_, sb, _ := key(b)
			return cmp.Compare(sa, sb)
		})
		for j, i := range idx {
			recs[i] = group[j]
		}
	}
}
