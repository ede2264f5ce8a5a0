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

// Runner is what a plugin supplies: its client library's way to run a
// script and to listen on a channel.
type Runner interface {
	// Run evaluates s (EVALSHA, falling back to EVAL when the server
	// answers NOSCRIPT) and returns its reply as nil, int64, string or []any
	// of those.
	Run(ctx context.Context, s *Script, keys, args []string) (any, error)
	// Listen subscribes to channel and blocks until ctx ends or the
	// subscription breaks, calling subscribed each time the server confirms
	// the subscription (again after a reconnect) and message for every
	// message. It returns ctx's error or why the subscription broke.
	Listen(ctx context.Context, channel string, subscribed, message func()) error
	// Do runs one plain command (used for lookups that read indexes).
	Do(ctx context.Context, args ...string) (any, error)
}

// Core is a store.Store and store.Notifier on a Runner. The plugins wrap
// it; all behaviour lives here and in the scripts.
type Core struct {
	r    Runner
	keys Keys
	name string // the plugin's name for error messages
}

// NewCore returns a Core for namespace ns. name prefixes error messages
// ("redisstore").
func NewCore(r Runner, ns, name string) (*Core, error) {
	k, err := NewKeys(ns)
	if err != nil {
		return nil, err
	}
	return &Core{r: r, keys: k, name: name}, nil
}

// Keys returns the namespace's keys.
func (c *Core) Keys() Keys { return c.keys }

var (
	_ store.Store    = (*Core)(nil)
	_ store.Notifier = (*Core)(nil)
)

func (c *Core) run(ctx context.Context, s *Script, args ...string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all := make([]string, 0, len(args)+1)
	all = append(all, c.keys.Prefix)
	all = append(all, args...)
	v, err := c.r.Run(ctx, s, c.keys.Script, all)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %s: %w", c.name, s.Name, ctx.Err())
		}
		if strings.Contains(err.Error(), "WRONGTYPE") {
			return nil, fmt.Errorf("%w: %s: %s: a key of namespace %q holds a value of another type (written by something else? give jobkit its own namespace): %v", store.ErrCorrupt, c.name, s.Name, c.keys.Prefix, err)
		}
		return nil, fmt.Errorf("%s: %s: %w", c.name, s.Name, err)
	}
	return v, nil
}

func us(t time.Time) string { return strconv.FormatInt(Micros(t), 10) }

func itoa(i int) string { return strconv.Itoa(i) }

// reply helpers: a malformed reply is a bug or a foreign script, not data.
func asArray(v any) []any {
	a, _ := v.([]any)
	return a
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	case float64:
		return int64(x)
	}
	return 0
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// Enqueue implements store.Queue.
func (c *Core) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil enqueue parameters", store.ErrInvalid)
	}
	args := make([]string, 0, 2+9*len(p.Instances))
	args = append(args, us(p.Now), p.Node)
	for _, in := range p.Instances {
		if err := in.Validate(); err != nil {
			return nil, err
		}
		args = append(args, EncodeID(in.ID), EncodeSpec(in), in.Kind, in.Queue, itoa(in.Priority),
			us(in.RunAt), in.UniqueKey, us(in.UniqueUntil), us(in.CreatedAt))
	}
	if len(p.Instances) == 0 {
		return []store.EnqueueResult{}, nil
	}
	v, err := c.run(ctx, Enqueue, args...)
	if err != nil {
		return nil, err
	}
	rows := asArray(v)
	if len(rows) != len(p.Instances) {
		return nil, fmt.Errorf("%s: enqueue: %d replies for %d instances", c.name, len(rows), len(p.Instances))
	}
	out := make([]store.EnqueueResult, len(rows))
	for i, row := range rows {
		f := asArray(row)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: enqueue: malformed reply %v", c.name, row)
		}
		in := p.Instances[i]
		id, err := DecodeID(asString(f[1]))
		if err != nil {
			return nil, fmt.Errorf("%s: enqueue: %w", c.name, err)
		}
		switch asInt(f[0]) {
		case 0, 2:
			out[i] = store.EnqueueResult{ID: id, Seq: uint64(asInt(f[2]))}
		case 1:
			out[i] = store.EnqueueResult{ID: id, Err: fmt.Errorf("%w: instance %s: unique key %q is held by instance %s", store.ErrDuplicate, in.ID, in.UniqueKey, id)}
		default:
			out[i] = store.EnqueueResult{ID: id, Err: fmt.Errorf("%w: instance %s: the record stored under this ID cannot be decoded", store.ErrCorrupt, id)}
		}
	}
	return out, nil
}

// decodeTriples decodes a flat id, spec, state, id, ... list.
func (c *Core) decodeTriples(v any) ([]*store.Instance, error) {
	a := asArray(v)
	out := make([]*store.Instance, 0, len(a)/3)
	var errs []error
	for i := 0; i+2 < len(a); i += 3 {
		in, err := c.decodeStored(asString(a[i]), asString(a[i+1]), asString(a[i+2]))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, in)
	}
	return out, errors.Join(errs...)
}

// decodeStored decodes an instance from its stored ID, spec and state.
func (c *Core) decodeStored(sid, spec, state string) (*store.Instance, error) {
	id, err := DecodeID(sid)
	if err != nil {
		return nil, err
	}
	return DecodeInstance(id, spec, state)
}

// Claim implements store.Queue.
func (c *Core) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	v, err := c.run(ctx, Claim, us(p.Now), p.Owner, us(p.LeaseUntil), itoa(p.Limit), p.Queue)
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return nil, fmt.Errorf("%s: claim: malformed reply", c.name)
	}
	rows := asArray(a[0])
	res := &store.ClaimResult{Instances: make([]*store.Instance, 0, len(rows)/3), NextRunAt: FromMicros(asInt(a[1]))}
	bad := map[string]bool{}
	for _, b := range asArray(a[2]) {
		bad[asString(b)] = true
	}
	for i := 0; i+2 < len(rows); i += 3 {
		sid, spec, state := asString(rows[i]), asString(rows[i+1]), asString(rows[i+2])
		id, err := DecodeID(sid)
		if err != nil {
			// Not an ID this store wrote: nothing can finish it, so it
			// stays Processing until its lease ends and Rescue ends it.
			continue
		}
		in, err := DecodeInstance(id, spec, state)
		if err == nil && !bad[sid] {
			res.Instances = append(res.Instances, in)
			continue
		}
		if err := c.keepDamaged(ctx, sid, id, spec, p); err != nil {
			return res, err
		}
		attempt := 1
		if t, err := decodeArray(state, stateSchema); err == nil {
			attempt = int(t[1].(int64))
		}
		res.Undecodable = append(res.Undecodable, store.UndecodableRecord{
			LeaseRef: store.LeaseRef{ID: id, Attempt: attempt},
			Err:      fmt.Errorf("%w: instance %s in queue %s: its stored record could not be decoded (written by something else or damaged); its bytes are kept as the instance's args", store.ErrCorrupt, id, p.Queue),
		})
	}
	return res, nil
}

// keepDamaged replaces a damaged spec that Claim returned with one that
// decodes, keeping the damaged bytes as the args, so the instance can be
// finished, looked up and pruned. The spec is only ever written at enqueue
// and the instance is Processing under the caller's lease, so nothing
// else writes it meanwhile.
func (c *Core) keepDamaged(ctx context.Context, sid, id, spec string, p *store.ClaimParams) error {
	if _, err := DecodeInstance(id, spec, ""); err == nil {
		return nil // only the state was damaged; the script replaced it
	}
	fixed := &store.Instance{Queue: p.Queue, Args: []byte(spec), RunAt: p.Now, CreatedAt: p.Now}
	if _, err := c.r.Do(ctx, "HSET", c.keys.Inst(), sid, encodeFullSpec(fixed, p.Now)); err != nil {
		return c.wrap(ctx, "claim", err)
	}
	return nil
}

// Renew implements store.Queue.
func (c *Core) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	if p == nil || p.Owner == "" {
		return nil, fmt.Errorf("%w: renew without an owner", store.ErrInvalid)
	}
	res := &store.RenewResult{}
	if len(p.Leases) == 0 {
		return res, ctx.Err()
	}
	args := []string{us(p.Now), p.Owner, us(p.Until)}
	for _, l := range p.Leases {
		args = append(args, EncodeID(l.ID), itoa(l.Attempt))
	}
	v, err := c.run(ctx, Renew, args...)
	if err != nil {
		return nil, err
	}
	codes := asArray(v)
	if len(codes) != len(p.Leases) {
		return nil, fmt.Errorf("%s: renew: %d replies for %d leases", c.name, len(codes), len(p.Leases))
	}
	for i, code := range codes {
		switch asInt(code) {
		case 1:
			res.Lost = append(res.Lost, p.Leases[i])
		case 2:
			res.CancelRequested = append(res.CancelRequested, p.Leases[i])
		}
	}
	return res, nil
}

// Finish implements store.Queue.
func (c *Core) Finish(ctx context.Context, p *store.FinishParams) ([]error, error) {
	if p == nil || p.Owner == "" {
		return nil, fmt.Errorf("%w: finish without an owner", store.ErrInvalid)
	}
	out := make([]error, len(p.Outcomes))
	args := []string{us(p.Now), p.Owner}
	var sent []int
	for i := range p.Outcomes {
		o := &p.Outcomes[i]
		if err := o.Validate(); err != nil {
			out[i] = err
			continue
		}
		rel := "0"
		if o.Release {
			rel = "1"
		}
		args = append(args, EncodeID(o.ID), itoa(o.Attempt), itoa(int(o.State)), us(o.RunAt), rel, string(o.Result), o.Error)
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return out, ctx.Err()
	}
	v, err := c.run(ctx, Finish, args...)
	if err != nil {
		return nil, err
	}
	codes := asArray(v)
	if len(codes) != len(sent) {
		return nil, fmt.Errorf("%s: finish: %d replies for %d outcomes", c.name, len(codes), len(sent))
	}
	for j, code := range codes {
		i := sent[j]
		o := &p.Outcomes[i]
		switch asInt(code) {
		case 1:
			out[i] = fmt.Errorf("%w: instance %s attempt %d is no longer held by %s (rescued, finished or canceled)", store.ErrLeaseLost, o.ID, o.Attempt, p.Owner)
		case 2:
			out[i] = fmt.Errorf("%w: instance %s: the stored record cannot be decoded", store.ErrCorrupt, o.ID)
		}
	}
	return out, nil
}

// Rescue implements store.Queue.
func (c *Core) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if p == nil || p.Limit <= 0 {
		return nil, fmt.Errorf("%w: rescue limit must be > 0", store.ErrInvalid)
	}
	v, err := c.run(ctx, Rescue, us(p.Now), p.Node, itoa(p.Limit))
	if err != nil {
		return nil, err
	}
	return c.decodeTriples(v)
}

// Cancel implements store.Queue.
func (c *Core) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	if p == nil || p.ID == "" {
		return nil, fmt.Errorf("%w: cancel without an instance ID", store.ErrInvalid)
	}
	v, err := c.run(ctx, Cancel, us(p.Now), p.Node, EncodeID(p.ID))
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return nil, fmt.Errorf("%s: cancel: malformed reply", c.name)
	}
	switch asInt(a[0]) {
	case 1:
		return nil, fmt.Errorf("%w: instance %s", store.ErrNotFound, p.ID)
	case 3:
		return nil, fmt.Errorf("%w: instance %s: the stored record cannot be decoded", store.ErrCorrupt, p.ID)
	case 2:
		in, err := DecodeInstance(p.ID, asString(a[1]), asString(a[2]))
		if err != nil {
			return nil, err
		}
		return in, fmt.Errorf("%w: instance %s is %v", store.ErrFinished, p.ID, in.State)
	}
	return DecodeInstance(p.ID, asString(a[1]), asString(a[2]))
}

// AppendLogs implements store.Logs.
func (c *Core) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	if len(recs) == 0 {
		return ctx.Err()
	}
	args := make([]string, 0, 7*len(recs))
	for _, l := range recs {
		if l == nil || l.InstanceID == "" {
			return fmt.Errorf("%w: log record without an instance ID", store.ErrInvalid)
		}
		args = append(args, EncodeID(l.InstanceID), l.Kind, itoa(l.Attempt), itoa(int(l.Level)), us(l.Time), l.Node, l.Message)
	}
	_, err := c.run(ctx, AppendLogs, args...)
	return err
}

// Prune implements store.Pruner.
func (c *Core) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil prune parameters", store.ErrInvalid)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	v, err := c.run(ctx, Prune, us(p.Now), us(p.FinishedBefore), itoa(p.KeepFinished), us(p.HistoryBefore), us(p.LogsBefore), itoa(limit))
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return nil, fmt.Errorf("%s: prune: malformed reply", c.name)
	}
	return &store.PruneResult{Instances: int(asInt(a[0])), History: int(asInt(a[1])), Logs: int(asInt(a[2]))}, nil
}

// Subscribe implements store.Notifier: a SUBSCRIBE to the queue's channel,
// which the enqueue, finish (retry, release) and rescue scripts PUBLISH to.
// It returns once the server confirmed the subscription. A broken
// connection is re-subscribed with backoff, and every (re)subscription
// sends a signal, since messages may have been missed meanwhile.
func (c *Core) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	if queue == "" {
		return nil, fmt.Errorf("%w: subscribe without a queue", store.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	signal := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	first := make(chan struct{})
	var confirmed bool
	subscribed := func() {
		if !confirmed {
			confirmed = true
			close(first)
		}
		signal()
	}
	go func() {
		defer close(out)
		backoff := 10 * time.Millisecond
		for ctx.Err() == nil {
			start := time.Now()
			_ = c.r.Listen(ctx, c.keys.Wake(queue), subscribed, signal)
			if ctx.Err() != nil {
				return
			}
			if time.Since(start) > 5*time.Second {
				backoff = 10 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
	select {
	case <-first:
		// The first signal tells the caller nothing; drop it.
		select {
		case <-out:
		default:
		}
		return out, nil
	case <-ctx.Done():
		return out, nil // closed by the goroutine
	case <-time.After(10 * time.Second):
		// Keep trying in the background; the caller polls meanwhile.
		return out, nil
	}
}

// ---- lookups ----

// LookupInstances implements store.History. By ID it reads one instance;
// otherwise it reads the kind's buckets (or every kind's) newest second
// first over the CreatedAt range, so a bounded query reads only its range
// and a limited one stops once it has enough.
func (c *Core) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if q.InstanceID != "" {
		got, err := c.records(ctx, []string{EncodeID(q.InstanceID)})
		in := got[EncodeID(q.InstanceID)]
		if in == nil || !q.MatchInstance(in) {
			return []*store.Instance{}, err
		}
		return []*store.Instance{in}, err
	}
	kinds, err := c.kinds(ctx, q.Kind)
	if err != nil {
		return nil, err
	}
	var out []*store.Instance
	var errs []error
	for _, k := range kinds {
		matched := 0
		err := c.eachBucket(ctx, k, q.Since, q.Until, func(sids []string, last bool) (bool, error) {
			got, err := c.records(ctx, sids)
			if err != nil {
				errs = append(errs, err)
			}
			for _, sid := range sids {
				if in := got[sid]; in != nil && q.MatchInstance(in) {
					out = append(out, in)
					matched++
				}
			}
			return !last || q.Limit == 0 || matched < q.Limit, nil
		})
		if err != nil {
			return nil, err
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

// eachBucket calls fn with the stored IDs of each bucket of kind whose
// second overlaps [since, until), newest second first, in parts of at most
// 1000 (last is true for a second's last part), until fn returns false. An
// ID is passed once even when it is in two buckets (enqueued again after
// it was pruned). A second's IDs are in enqueue order, not CreatedAt
// order, so a caller that wants the newest stops only after a last part.
func (c *Core) eachBucket(ctx context.Context, kind string, since, until time.Time, fn func(sids []string, last bool) (bool, error)) error {
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
			sids, err := splitBucket(asString(b))
			if err != nil {
				return fmt.Errorf("%s: lookup: kind %q second %d: %w", c.name, kind, sec, err)
			}
			fresh := sids[:0]
			for _, sid := range sids {
				if !seen[sid] {
					seen[sid] = true
					fresh = append(fresh, sid)
				}
			}
			for len(fresh) > 0 {
				n := min(len(fresh), 1000)
				more, err := fn(fresh[:n], n == len(fresh))
				if err != nil || !more {
					return err
				}
				fresh = fresh[n:]
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

// ofInstance returns one instance's spec, state and raw stream entries
// ('h' history, 'l' logs).
func (c *Core) ofInstance(ctx context.Context, sid, what string) (spec, state string, entries []any, err error) {
	v, err := c.run(ctx, OfInstance, sid, what)
	if err != nil {
		return "", "", nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return "", "", nil, fmt.Errorf("%s: of_instance: malformed reply", c.name)
	}
	return asString(a[0]), asString(a[1]), asArray(a[2]), nil
}

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
// instance's own entries; by kind it reads the histories of the kind's
// instances created before the range ends; otherwise it reads the history
// stream over the time range (entry IDs are record times). Records of
// instances that are gone (pruned) are left out; the others get their
// instance's kind.
func (c *Core) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*store.HistoryRecord
	var errs []error
	// one adds the records of instance in (decoded) from entries.
	one := func(in *store.Instance, entries []any) {
		for _, e := range entries {
			hs, err := decodeHistory(asString(e))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, h := range hs {
				if h.InstanceID == in.ID {
					h.Kind = in.Kind
					if q.MatchHistory(h) {
						out = append(out, h)
					}
				}
			}
		}
	}
	switch {
	case q.InstanceID != "":
		if err := c.historyOf(ctx, q.InstanceID, one); err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				return nil, err
			}
			errs = append(errs, err)
		}
	case q.Kind != "" && q.Since.IsZero():
		ins, err := c.LookupInstances(ctx, &store.Query{Kind: q.Kind, Until: q.Until})
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
		}
		for _, in := range ins {
			if err := c.historyOf(ctx, in.ID, one); err != nil {
				if !errors.Is(err, store.ErrCorrupt) {
					return nil, err
				}
				errs = append(errs, err)
			}
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

// historyOf reads the history entries of instance id and passes them to
// fn with the decoded instance. A missing instance has no history; one
// whose record is damaged gets its records without a kind, and an error.
func (c *Core) historyOf(ctx context.Context, id string, fn func(in *store.Instance, entries []any)) error {
	spec, state, entries, err := c.ofInstance(ctx, EncodeID(id), "h")
	if err != nil || spec == "" {
		return err
	}
	in, err := DecodeInstance(id, spec, state)
	if err != nil {
		fn(&store.Instance{ID: id}, entries)
		return err
	}
	fn(in, entries)
	return nil
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
		_, _, es, err := c.ofInstance(ctx, EncodeID(q.InstanceID), "l")
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			add(asString(e))
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
