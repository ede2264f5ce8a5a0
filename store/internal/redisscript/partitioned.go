package redisscript

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// A partitioned namespace: N ordinary namespaces ("partitions") behind a
// router. Partition 0 is the namespace itself, with today's key layout
// ("jobkit:{ns}:..."); partition i > 0 is the namespace PartitionNamespace(ns, i),
// its keys "jobkit:{ns#pi}:...". Each partition is one hash tag, so one
// slot of a Redis Cluster: every script call touches one partition's keys
// only, exactly as a single-tag namespace does, and the scripts are the
// same. See doc/redis-cluster.md.

// MaxPartitions bounds the partitions of a namespace.
const MaxPartitions = 1024

// PartitionNamespace is the namespace of partition i of ns: ns itself for
// partition 0, "ns#p<i>" for the others. Namespaces of that form are
// reserved for partitions.
func PartitionNamespace(ns string, i int) string {
	if i == 0 {
		return ns
	}
	return ns + "#p" + strconv.Itoa(i)
}

// PartitionsKey is the key, in partition 0, that records how many
// partitions a partitioned namespace was created with. A namespace of one
// partition has none (its layout is exactly that of an unpartitioned
// namespace).
func (k Keys) PartitionsKey() string { return k.Prefix + "partitions" }

// Partitioned is a store.Store over the partitions of one namespace: a
// router that sends each call to the partition (or partitions) holding
// what it names. See doc/redis-cluster.md for what each call does and
// what ordering is kept.
type Partitioned struct {
	parts []*Core
	name  string
	ns    string
	// key places instances without a unique key or a workflow (see
	// WithPartitionKey); nil: by parent, else by ID.
	key func(*store.Instance) string
	// next rotates the partition a claim without a ClaimSeq starts at,
	// and the partition a rescue starts at.
	next atomic.Uint64
	// where remembers the partition of instances this handle enqueued,
	// claimed, rescued or looked up, so calls by ID (Renew, Finish,
	// progress, logs) go straight to it; see locate.
	where idMemo
}

var (
	_ store.Store          = (*Partitioned)(nil)
	_ store.Notifier       = (*Partitioned)(nil)
	_ store.CancelNotifier = (*Partitioned)(nil)
)

// Partition returns a router over n partitions of core's namespace, core
// being partition 0. It checks the count recorded in partition 0 (see
// PartitionsKey), and records n there when none is recorded and n > 1: a
// namespace keeps the count it was created with. A namespace that holds
// data of an unpartitioned store and no count has one partition. n must
// be 1 to MaxPartitions.
func Partition(ctx context.Context, core *Core, n int, opts ...Option) (*Partitioned, error) {
	if n < 1 || n > MaxPartitions {
		return nil, fmt.Errorf("%w: %s: %d partitions; want 1 to %d", store.ErrInvalid, core.name, n, MaxPartitions)
	}
	ns := strings.TrimSuffix(strings.TrimPrefix(core.keys.Prefix, "jobkit:{"), "}:")
	if strings.Contains(ns, "#p") {
		return nil, fmt.Errorf("%w: %s: namespace %q: names holding \"#p\" are reserved for partitions; choose another", store.ErrInvalid, core.name, ns)
	}
	key := core.keys.PartitionsKey()
	v, err := core.r.Do(ctx, "GET", key)
	if err != nil {
		return nil, fmt.Errorf("%s: read the partition count of namespace %q: %w", core.name, ns, err)
	}
	had := 1
	if v != nil {
		if had, err = strconv.Atoi(asString(v)); err != nil || had < 1 {
			return nil, fmt.Errorf("%w: %s: key %s holds %q, not a partition count", store.ErrCorrupt, core.name, key, asString(v))
		}
	} else if n > 1 {
		if !core.isEmpty(ctx) {
			return nil, fmt.Errorf("%w: %s: namespace %q holds data of an unpartitioned store (one partition); open it with 1 partition, or move its jobs into a new partitioned namespace", store.ErrInvalid, core.name, ns)
		}
		if _, err := core.r.Do(ctx, "SET", key, strconv.Itoa(n), "NX"); err != nil {
			return nil, fmt.Errorf("%s: record the partition count of namespace %q: %w", core.name, ns, err)
		}
		v, err := core.r.Do(ctx, "GET", key)
		if err != nil {
			return nil, fmt.Errorf("%s: read the partition count of namespace %q: %w", core.name, ns, err)
		}
		had, _ = strconv.Atoi(asString(v)) // another handle may have won the SET
	}
	if had != n {
		return nil, fmt.Errorf("%w: %s: namespace %q was created with %d partitions, not %d; a namespace keeps its partition count (open it with %d)", store.ErrInvalid, core.name, ns, had, n, had)
	}
	p := &Partitioned{parts: make([]*Core, n), name: core.name, ns: ns, key: Apply(opts).PartitionKey}
	p.parts[0] = core
	for i := 1; i < n; i++ {
		c, err := NewCore(core.r, PartitionNamespace(ns, i), core.name)
		if err != nil {
			return nil, err
		}
		c.acks = core.acks
		p.parts[i] = c
	}
	return p, nil
}

// isEmpty reports whether the namespace holds no instance (its spec hash
// does not exist). An error counts as not empty.
func (c *Core) isEmpty(ctx context.Context) bool {
	v, err := c.r.Do(ctx, "EXISTS", c.keys.Inst())
	return err == nil && asInt(v) == 0
}

// Partitions returns how many partitions the namespace has.
func (p *Partitioned) Partitions() int { return len(p.parts) }

// Part returns partition i, an ordinary single-tag store.
func (p *Partitioned) Part(i int) *Core { return p.parts[i] }

// hash is the partition of a placement key.
func (p *Partitioned) hash(kind byte, s string) int {
	if len(p.parts) == 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte{kind, 0})
	h.Write([]byte(s))
	return int(h.Sum32() % uint32(len(p.parts)))
}

// home is the partition of a shard of parent id (its parent's ID's).
func (p *Partitioned) home(id string) int { return p.hash('i', id) }

// freeBatch is how many instances with nothing to place them by one
// Enqueue puts in one partition: a call's instances share a partition
// (one script call), and a larger call is spread over consecutive
// partitions in parts of this many.
const freeBatch = 256

// Place returns the partition in is placed in by its record: its
// partition key's when the store has one (WithPartitionKey); else its
// workflow's for a workflow task (so a workflow's release stays in one
// partition), its unique key's when it has one (so uniqueness is one
// partition's check), its parent's ID's for a shard. It returns -1 for
// an instance with none of these: Enqueue puts those of one call in one
// partition, the next call in the next partition (freeBatch), an even
// spread over the calls at one script call each.
func (p *Partitioned) Place(in *store.Instance) int {
	switch {
	case p.key != nil:
		return p.hash('k', p.key(in))
	case in.Task != nil && in.Task.Workflow != "":
		return p.hash('w', in.Task.Workflow)
	case in.UniqueKey != "":
		return p.hash('u', in.UniqueKey)
	case in.Parent != "":
		return p.home(in.Parent)
	}
	return -1
}

// idMemo maps instance IDs to partitions, bounded: when full it starts
// afresh (it is only a hint; a miss costs a look at other partitions).
type idMemo struct {
	mu sync.Mutex
	m  map[string]int
}

const idMemoMax = 1 << 18

func (m *idMemo) put(id string, part int) {
	m.mu.Lock()
	if m.m == nil || len(m.m) >= idMemoMax {
		m.m = make(map[string]int)
	}
	m.m[id] = part
	m.mu.Unlock()
}

func (m *idMemo) get(id string) (int, bool) {
	m.mu.Lock()
	part, ok := m.m[id]
	m.mu.Unlock()
	return part, ok
}

func (m *idMemo) forget(id string) {
	m.mu.Lock()
	delete(m.m, id)
	m.mu.Unlock()
}

// locate returns the partition instance id lives in, and whether that
// is known (remembered, or found by find) rather than a guess (partition
// 0, for an ID no partition holds).
func (p *Partitioned) locate(id string) (int, bool) {
	if len(p.parts) == 1 {
		return 0, true
	}
	if part, ok := p.where.get(id); ok {
		return part, true
	}
	return 0, false
}

// learn looks up, in every partition at once, those of ids this handle
// does not remember, so that locate knows them.
func (p *Partitioned) learn(ctx context.Context, ids []string) error {
	if len(p.parts) == 1 {
		return nil
	}
	var unknown []string
	for _, id := range ids {
		if _, ok := p.where.get(id); !ok && !slices.Contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	_, err := p.find(ctx, unknown)
	return err
}

// others returns the partitions but skip, in order.
func (p *Partitioned) others(skip int) []int {
	out := make([]int, 0, len(p.parts)-1)
	for i := range p.parts {
		if i != skip {
			out = append(out, i)
		}
	}
	return out
}

// each runs fn for every partition at once and returns the first error.
func (p *Partitioned) each(fn func(i int, c *Core) error) error {
	if len(p.parts) == 1 {
		return fn(0, p.parts[0])
	}
	errs := make([]error, len(p.parts))
	var wg sync.WaitGroup
	for i, c := range p.parts {
		wg.Go(func() { errs[i] = fn(i, c) })
	}
	wg.Wait()
	return firstError(errs)
}

// firstError returns the first error of errs that is not ErrCorrupt, or
// the first ErrCorrupt one (a lookup returns what it decoded with it).
func firstError(errs []error) error {
	var corrupt error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, store.ErrCorrupt):
			if corrupt == nil {
				corrupt = err
			}
		default:
			return err
		}
	}
	return corrupt
}

// Enqueue implements store.Queue: each instance goes to its partition
// (Place); a call whose instances fall in several partitions makes one
// call per partition, at once. Results keep the order of p.Instances.
func (p *Partitioned) Enqueue(ctx context.Context, ep *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Enqueue(ctx, ep)
	}
	if err := ep.Validate(); err != nil {
		return nil, err
	}
	groups := map[int][]int{} // partition: indexes into ep.Instances
	free, start := 0, 0
	for i, in := range ep.Instances {
		part := p.Place(in)
		if part < 0 {
			if known, ok := p.where.get(in.ID); ok {
				part = known
			} else {
				if free == 0 {
					// The call's first such instance's ID picks, so a
					// repeated call (a retry after a lost reply, the same
					// call from another process) finds what it stored
					// and answers Existed instead of storing it again
					// in another partition.
					start = p.hash('i', in.ID)
				}
				part = (start + free/freeBatch) % len(p.parts)
				free++
			}
		}
		groups[part] = append(groups[part], i)
	}
	out := make([]store.EnqueueResult, len(ep.Instances))
	run := func(part int, idx []int) error {
		sub := *ep
		sub.Instances = make([]*store.Instance, len(idx))
		for j, i := range idx {
			sub.Instances[j] = ep.Instances[i]
		}
		res, err := p.parts[part].Enqueue(ctx, &sub)
		if err != nil {
			return err
		}
		for j, i := range idx {
			out[i] = res[j]
			if res[j].Err == nil {
				p.where.put(ep.Instances[i].ID, part)
			}
		}
		return nil
	}
	if len(groups) == 1 {
		for part, idx := range groups {
			if err := run(part, idx); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for part, idx := range groups {
		wg.Go(func() {
			if err := run(part, idx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		// Some partitions may have stored theirs: the call as a whole
		// is of unknown outcome unless every failure changed nothing.
		err := errs[0]
		if len(errs) < len(groups) && !errors.Is(err, store.ErrOutcomeUnknown) {
			err = store.OutcomeUnknown(err)
		}
		return nil, err
	}
	return out, nil
}

// Claim implements store.Queue: it visits the partitions in turn, from a
// start that rotates (derived from ClaimSeq when set, so the repeat of a
// claim visits the same partitions in the same order), taking what each
// offers until Limit is reached. Within a partition the claim order of
// store.Queue.Claim holds (priority, then readiness); across partitions
// a claim takes the first partitions' best before the next ones'.
func (p *Partitioned) Claim(ctx context.Context, cp *store.ClaimParams) (*store.ClaimResult, error) {
	n := len(p.parts)
	if n == 1 {
		return p.parts[0].Claim(ctx, cp)
	}
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	if len(cp.Limits) > 0 {
		return nil, fmt.Errorf("%w: %s: concurrency limits are not enforced across the partitions of namespace %q (it has %d); use an unpartitioned namespace for limited work", store.ErrInvalid, p.name, p.ns, n)
	}
	if len(cp.RateLimits) > 0 {
		return nil, fmt.Errorf("%w: %s: rate limits are not enforced across the partitions of namespace %q (it has %d); use an unpartitioned namespace for rate-limited work", store.ErrInvalid, p.name, p.ns, n)
	}
	var start int
	if cp.ClaimSeq != 0 {
		start = int(cp.ClaimSeq % uint64(n))
	} else {
		start = int(p.next.Add(1) % uint64(n))
	}
	out := &store.ClaimResult{}
	for k := range n {
		part := (start + k) % n
		sub := *cp
		sub.Limit = cp.Limit - len(out.Instances) - len(out.Undecodable)
		res, err := p.parts[part].Claim(ctx, &sub)
		if err != nil {
			if len(out.Instances)+len(out.Undecodable) > 0 {
				// What was claimed runs; the rest waits for the next claim.
				break
			}
			return nil, err
		}
		for _, in := range res.Instances {
			p.where.put(in.ID, part)
		}
		for _, u := range res.Undecodable {
			p.where.put(u.ID, part)
		}
		out.Instances = append(out.Instances, res.Instances...)
		out.Undecodable = append(out.Undecodable, res.Undecodable...)
		out.Limited = out.Limited || res.Limited
		if !res.NextRunAt.IsZero() && (out.NextRunAt.IsZero() || res.NextRunAt.Before(out.NextRunAt)) {
			out.NextRunAt = res.NextRunAt
		}
		if len(out.Instances)+len(out.Undecodable) >= cp.Limit {
			break
		}
	}
	return out, nil
}

// byID routes a call over IDs: ids grouped by locate, call made per
// partition; the IDs call reports missing (missing(j) for the j-th ID
// of a group's call) and whose partition was only guessed are tried in
// the other partitions in turn.
func (p *Partitioned) byID(ctx context.Context, ids []string, call func(part int, idx []int) (missing []int, err error)) error {
	if err := p.learn(ctx, ids); err != nil {
		return err
	}
	pending := map[int][]int{}
	tried := make([][]int, len(ids))
	known := make([]bool, len(ids))
	for i, id := range ids {
		part, ok := p.locate(id)
		known[i] = ok
		pending[part] = append(pending[part], i)
	}
	for len(pending) > 0 {
		next := map[int][]int{}
		for _, part := range sortedKeys(pending) {
			idx := pending[part]
			for _, i := range idx {
				tried[i] = append(tried[i], part)
			}
			miss, err := call(part, idx)
			if err != nil {
				return err
			}
			for _, i := range miss {
				if known[i] && len(tried[i]) == 1 {
					continue // remembered: the answer stands
				}
				for _, o := range p.others(-1) {
					if !slices.Contains(tried[i], o) {
						next[o] = append(next[o], i)
						break
					}
				}
			}
		}
		pending = next
	}
	return nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Renew implements store.Queue, each lease in its partition.
func (p *Partitioned) Renew(ctx context.Context, rp *store.RenewParams) (*store.RenewResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Renew(ctx, rp)
	}
	if err := rp.Validate(); err != nil {
		return nil, err
	}
	ids := make([]string, len(rp.Leases))
	for i, l := range rp.Leases {
		ids[i] = l.ID
	}
	lost := make([]bool, len(ids))
	out := &store.RenewResult{}
	err := p.byID(ctx, ids, func(part int, idx []int) ([]int, error) {
		sub := *rp
		sub.Leases = make([]store.LeaseRef, len(idx))
		for j, i := range idx {
			sub.Leases[j] = rp.Leases[i]
		}
		res, err := p.parts[part].Renew(ctx, &sub)
		if err != nil {
			return nil, err
		}
		out.CancelRequested = append(out.CancelRequested, res.CancelRequested...)
		var miss []int
		for _, i := range idx {
			if slices.Contains(res.Lost, rp.Leases[i]) {
				miss = append(miss, i)
				lost[i] = true
			} else {
				lost[i] = false
				p.where.put(ids[i], part)
			}
		}
		return miss, nil
	})
	if err != nil {
		return nil, err
	}
	for i, l := range lost {
		if l {
			out.Lost = append(out.Lost, rp.Leases[i])
		}
	}
	return out, nil
}

// Finish implements store.Queue, each outcome in its partition.
func (p *Partitioned) Finish(ctx context.Context, fp *store.FinishParams) ([]store.FinishResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Finish(ctx, fp)
	}
	if err := fp.Validate(); err != nil {
		return nil, err
	}
	ids := make([]string, len(fp.Outcomes))
	for i, o := range fp.Outcomes {
		ids[i] = o.ID
	}
	out := make([]store.FinishResult, len(ids))
	err := p.byID(ctx, ids, func(part int, idx []int) ([]int, error) {
		sub := *fp
		sub.Outcomes = make([]store.Outcome, len(idx))
		for j, i := range idx {
			sub.Outcomes[j] = fp.Outcomes[i]
		}
		res, err := p.parts[part].Finish(ctx, &sub)
		if err != nil {
			return nil, err
		}
		var miss []int
		for j, i := range idx {
			out[i] = res[j]
			if errors.Is(res[j].Err, store.ErrLeaseLost) {
				miss = append(miss, i)
			} else if res[j].Err == nil && res[j].State.Final() {
				p.where.forget(ids[i])
			}
		}
		return miss, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Rescue implements store.Queue: the partitions in turn from a rotating
// start, until Limit instances are rescued.
func (p *Partitioned) Rescue(ctx context.Context, rp *store.RescueParams) ([]*store.Instance, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Rescue(ctx, rp)
	}
	if err := rp.Validate(); err != nil {
		return nil, err
	}
	n := len(p.parts)
	start := int(p.next.Add(1) % uint64(n))
	var out []*store.Instance
	for k := range n {
		part := (start + k) % n
		sub := *rp
		sub.Limit = rp.Limit - len(out)
		got, err := p.parts[part].Rescue(ctx, &sub)
		if err != nil {
			return out, err
		}
		out = append(out, got...)
		if len(out) >= rp.Limit {
			break
		}
	}
	return out, nil
}

// one runs call on the partition of id, then on the others while it
// reports store.ErrNotFound (when that partition was only guessed).
func one[T any](ctx context.Context, p *Partitioned, id string, call func(c *Core) (T, error)) (T, error) {
	if err := p.learn(ctx, []string{id}); err != nil {
		var zero T
		return zero, err
	}
	part, known := p.locate(id)
	v, err := call(p.parts[part])
	if !errors.Is(err, store.ErrNotFound) || known {
		return v, err
	}
	for _, o := range p.others(part) {
		v2, err2 := call(p.parts[o])
		if !errors.Is(err2, store.ErrNotFound) {
			if err2 == nil {
				p.where.put(id, o)
			}
			return v2, err2
		}
	}
	return v, err
}

// Cancel implements store.Queue in the instance's partition.
func (p *Partitioned) Cancel(ctx context.Context, cp *store.CancelParams) (*store.Instance, error) {
	if cp == nil {
		return p.parts[0].Cancel(ctx, cp)
	}
	return one(ctx, p, cp.ID, func(c *Core) (*store.Instance, error) { return c.Cancel(ctx, cp) })
}

// Wake implements store.Shards: in every partition (an ID absent from
// one is nothing to wake there).
func (p *Partitioned) Wake(ctx context.Context, wp *store.WakeParams) error {
	return p.each(func(_ int, c *Core) error { return c.Wake(ctx, wp) })
}

// AppendLogs implements store.Logs: each record in its instance's
// partition (see find), where Prune removes it with the instance.
func (p *Partitioned) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	if len(p.parts) == 1 {
		return p.parts[0].AppendLogs(ctx, recs)
	}
	var ids []string
	for _, r := range recs {
		if r != nil && !slices.Contains(ids, r.InstanceID) {
			ids = append(ids, r.InstanceID)
		}
	}
	parts, err := p.find(ctx, ids)
	if err != nil {
		return err
	}
	groups := map[int][]*store.LogRecord{}
	for _, r := range recs {
		part := 0
		if r != nil {
			part = parts[r.InstanceID]
		}
		groups[part] = append(groups[part], r)
	}
	for _, part := range sortedKeys(groups) {
		if err := p.parts[part].AppendLogs(ctx, groups[part]); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// find returns the partition of each of ids: the remembered one, else
// where a lookup in every partition at once finds it (remembered from
// then on), else partition 0.
func (p *Partitioned) find(ctx context.Context, ids []string) (map[string]int, error) {
	out := make(map[string]int, len(ids))
	var unknown []string
	for _, id := range ids {
		if part, ok := p.where.get(id); ok {
			out[id] = part
			continue
		}
		out[id] = 0
		unknown = append(unknown, id)
	}
	if len(unknown) == 0 {
		return out, nil
	}
	var mu sync.Mutex
	err := p.each(func(i int, c *Core) error {
		for chunk := range slices.Chunk(unknown, store.MaxQueryIDs) {
			got, err := c.LookupInstances(ctx, &store.Query{IDs: chunk})
			if err != nil && !errors.Is(err, store.ErrCorrupt) {
				return err
			}
			mu.Lock()
			for _, in := range got {
				out[in.ID] = i
				p.where.put(in.ID, i)
			}
			mu.Unlock()
		}
		return nil
	})
	return out, err
}

// Prune implements store.Pruner in every partition. A Limit bounds each
// rule over the whole call: the partitions are pruned in turn, each with
// what the previous ones left of it. KeepFinished holds over the whole
// namespace: it becomes a FinishedAt bound, that of the KeepFinished-th
// most recently finished instance of all partitions (see keepCutoff).
func (p *Partitioned) Prune(ctx context.Context, pp *store.PruneParams) (*store.PruneResult, error) {
	if len(p.parts) == 1 || pp == nil {
		return p.parts[0].Prune(ctx, pp)
	}
	if pp.KeepFinished > 0 {
		cut, err := p.keepCutoff(ctx, pp.KeepFinished)
		if err != nil {
			return nil, err
		}
		sub := *pp
		sub.KeepFinished = 0
		if cut.After(sub.FinishedBefore) {
			sub.FinishedBefore = cut
		}
		pp = &sub
	}
	out := &store.PruneResult{}
	if pp.Limit <= 0 {
		var mu sync.Mutex
		err := p.each(func(_ int, c *Core) error {
			r, err := c.Prune(ctx, pp)
			if r != nil {
				mu.Lock()
				out.Instances += r.Instances
				out.History += r.History
				out.Logs += r.Logs
				mu.Unlock()
			}
			return err
		})
		return out, err
	}
	n := len(p.parts)
	start := int(p.next.Add(1) % uint64(n))
	for k := range n {
		sub := *pp
		sub.Limit = pp.Limit - max(out.Instances, out.History, out.Logs)
		if sub.Limit <= 0 {
			break
		}
		r, err := p.parts[(start+k)%n].Prune(ctx, &sub)
		if r != nil {
			out.Instances += r.Instances
			out.History += r.History
			out.Logs += r.Logs
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// gather runs look in every partition and returns what they found,
// concatenated, with the first error.
func gather[T any](p *Partitioned, look func(c *Core) ([]T, error)) ([]T, error) {
	if len(p.parts) == 1 {
		return look(p.parts[0])
	}
	found := make([][]T, len(p.parts))
	err := p.each(func(i int, c *Core) error {
		var err error
		found[i], err = look(c)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, err
	}
	return slices.Concat(found...), err
}

// LookupInstances implements store.History: every partition's answer,
// merged newest first by (CreatedAt, Seq), cut at the limit.
func (p *Partitioned) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if len(p.parts) == 1 {
		return p.parts[0].LookupInstances(ctx, q)
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return lookupMerged(p, q.Limit, func(i int, c *Core) ([]*store.Instance, error) {
		found, err := c.LookupInstances(ctx, q)
		for _, in := range found {
			p.where.put(in.ID, i)
		}
		return found, err
	}, func(a, b *store.Instance) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.Seq, a.Seq))
	})
}

// merge merges lists, each in before's order, into one: a k-way merge
// that keeps each list's own order (a partition's lookup orders records
// of one time as its store does).
func merge[T any](lists [][]T, before func(a, b T) int) []T {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	out := make([]T, 0, n)
	heads := make([]int, len(lists))
	for len(out) < n {
		best := -1
		for i, l := range lists {
			if heads[i] < len(l) && (best < 0 || before(l[heads[i]], lists[best][heads[best]]) < 0) {
				best = i
			}
		}
		out = append(out, lists[best][heads[best]])
		heads[best]++
	}
	return out
}

// lookupMerged runs look in every partition and merges the answers, each
// in before's order, into one cut at limit (0: no limit). A partition's
// ErrCorrupt is returned with the others' answers.
func lookupMerged[T any](p *Partitioned, limit int, look func(i int, c *Core) ([]T, error), before func(a, b T) int) ([]T, error) {
	lists := make([][]T, len(p.parts))
	err := p.each(func(i int, c *Core) error {
		var err error
		lists[i], err = look(i, c)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, err
	}
	all := merge(lists, before)
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	return all, err
}

// LookupHistory implements store.History: every partition's answer,
// merged oldest first by Time (each partition's records keep their own
// order), cut at the limit.
func (p *Partitioned) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	if len(p.parts) == 1 {
		return p.parts[0].LookupHistory(ctx, q)
	}
	return lookupMerged(p, q.Limit, func(_ int, c *Core) ([]*store.HistoryRecord, error) { return c.LookupHistory(ctx, q) },
		func(a, b *store.HistoryRecord) int { return a.Time.Compare(b.Time) })
}

// LookupLogs implements store.Logs: every partition's answer, merged
// oldest first by Time (each partition's records keep their own order),
// cut at the limit.
func (p *Partitioned) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	if len(p.parts) == 1 {
		return p.parts[0].LookupLogs(ctx, q)
	}
	return lookupMerged(p, q.Limit, func(_ int, c *Core) ([]*store.LogRecord, error) { return c.LookupLogs(ctx, q) },
		func(a, b *store.LogRecord) int { return a.Time.Compare(b.Time) })
}

// PageInstances implements store.Inspector over the merged lookup.
func (p *Partitioned) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	return store.PageInstances(ctx, p.parts[0].keys.Prefix, p.LookupInstances, q)
}

// PageHistory implements store.Inspector over the merged lookup.
func (p *Partitioned) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	return store.PageHistory(ctx, p.parts[0].keys.Prefix, p.LookupHistory, q)
}

// PageLogs implements store.Inspector over the merged lookup.
func (p *Partitioned) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	return store.PageLogs(ctx, p.parts[0].keys.Prefix, p.LookupLogs, q)
}

// SetProgress implements store.Progress in the instance's partition.
func (p *Partitioned) SetProgress(ctx context.Context, pp *store.ProgressParams) error {
	if pp == nil {
		return p.parts[0].SetProgress(ctx, pp)
	}
	_, err := one(ctx, p, pp.ID, func(c *Core) (struct{}, error) { return struct{}{}, c.SetProgress(ctx, pp) })
	return err
}

// LookupProgress implements store.Progress in every partition.
func (p *Partitioned) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	return gather(p, func(c *Core) ([]*store.ProgressRecord, error) { return c.LookupProgress(ctx, ids) })
}

// admin runs an admin call over ids, each in its partition.
func (p *Partitioned) admin(ctx context.Context, ids []string, call func(c *Core, ids []string) ([]store.AdminResult, error)) ([]store.AdminResult, error) {
	out := make([]store.AdminResult, len(ids))
	err := p.byID(ctx, ids, func(part int, idx []int) ([]int, error) {
		sub := make([]string, len(idx))
		for j, i := range idx {
			sub[j] = ids[i]
		}
		res, err := call(p.parts[part], sub)
		if err != nil {
			return nil, err
		}
		var miss []int
		for j, i := range idx {
			out[i] = res[j]
			if errors.Is(res[j].Err, store.ErrNotFound) {
				miss = append(miss, i)
			}
		}
		return miss, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Retry implements store.Admin, each ID in its partition.
func (p *Partitioned) Retry(ctx context.Context, rp *store.RetryParams) ([]store.AdminResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Retry(ctx, rp)
	}
	if err := rp.Validate(); err != nil {
		return nil, err
	}
	return p.admin(ctx, rp.IDs, func(c *Core, ids []string) ([]store.AdminResult, error) {
		sub := *rp
		sub.IDs = ids
		return c.Retry(ctx, &sub)
	})
}

// Delete implements store.Admin, each ID in its partition.
func (p *Partitioned) Delete(ctx context.Context, dp *store.DeleteParams) ([]store.AdminResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Delete(ctx, dp)
	}
	if err := dp.Validate(); err != nil {
		return nil, err
	}
	return p.admin(ctx, dp.IDs, func(c *Core, ids []string) ([]store.AdminResult, error) {
		sub := *dp
		sub.IDs = ids
		return c.Delete(ctx, &sub)
	})
}

// Counts implements store.Inspector: every partition's counts, summed.
func (p *Partitioned) Counts(ctx context.Context, cp *store.CountsParams) ([]store.GroupCount, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Counts(ctx, cp)
	}
	all, err := gather(p, func(c *Core) ([]store.GroupCount, error) { return c.Counts(ctx, cp) })
	if err != nil {
		return nil, err
	}
	sum := map[[2]string]*store.GroupCount{}
	var out []store.GroupCount
	for _, g := range all {
		k := [2]string{g.Queue, g.Kind}
		if s := sum[k]; s != nil {
			for i := range s.States {
				s.States[i] += g.States[i]
			}
			continue
		}
		g := g
		sum[k] = &g
	}
	for _, g := range sum {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b store.GroupCount) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Kind, b.Kind))
	})
	return out, nil
}

// Lag implements store.Inspector: each (queue, kind)'s oldest ready
// instance is the oldest of its partitions'.
func (p *Partitioned) Lag(ctx context.Context, lp *store.LagParams) (*store.LagResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Lag(ctx, lp)
	}
	if err := lp.Validate(); err != nil {
		return nil, err
	}
	type part struct {
		groups []store.GroupCount
		oldest map[[2]string]time.Time
	}
	found := make([]part, len(p.parts))
	err := p.each(func(i int, c *Core) error {
		var err error
		found[i].groups, found[i].oldest, err = c.lagOldest(ctx, lp)
		return err
	})
	if err != nil {
		return nil, err
	}
	oldest := map[[2]string]time.Time{}
	var keys [][2]string
	for _, f := range found {
		for _, g := range f.groups {
			if lp.Kind != "" && g.Kind != lp.Kind {
				continue
			}
			k := [2]string{g.Queue, g.Kind}
			t, seen := oldest[k]
			if !seen {
				keys = append(keys, k)
			}
			if o := f.oldest[k]; !o.IsZero() && (t.IsZero() || o.Before(t)) {
				t = o
			}
			oldest[k] = t
		}
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	var b store.LagBuilder
	for _, k := range keys {
		b.Add(k[0], k[1], oldest[k])
	}
	return b.Result(lp.Now), nil
}

// PauseQueue implements store.QueueAdmin in every partition.
func (p *Partitioned) PauseQueue(ctx context.Context, qp *store.QueueParams) error {
	return p.each(func(_ int, c *Core) error { return c.PauseQueue(ctx, qp) })
}

// ResumeQueue implements store.QueueAdmin in every partition.
func (p *Partitioned) ResumeQueue(ctx context.Context, qp *store.QueueParams) error {
	return p.each(func(_ int, c *Core) error { return c.ResumeQueue(ctx, qp) })
}

// ListQueues implements store.QueueAdmin: the queues of every partition;
// a queue is paused when partition 0 says so (a pause or resume writes
// every partition, partition 0 last to answer... see doc/redis-cluster.md).
func (p *Partitioned) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	if len(p.parts) == 1 {
		return p.parts[0].ListQueues(ctx)
	}
	all, err := gather(p, func(c *Core) ([]store.QueueInfo, error) { return c.ListQueues(ctx) })
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	var out []store.QueueInfo
	for _, q := range all {
		if i, ok := seen[q.Name]; ok {
			out[i].Paused = out[i].Paused || q.Paused
			continue
		}
		seen[q.Name] = len(out)
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b store.QueueInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Heartbeat implements store.Nodes in every partition (each rescues the
// attempts it holds of a dead node); partition 0's answer, with WasDead
// when any partition had declared the node dead.
func (p *Partitioned) Heartbeat(ctx context.Context, hp *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Heartbeat(ctx, hp)
	}
	res := make([]*store.HeartbeatResult, len(p.parts))
	err := p.each(func(i int, c *Core) error {
		var err error
		res[i], err = c.Heartbeat(ctx, hp)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := *res[0]
	for _, r := range res[1:] {
		out.WasDead = out.WasDead || r.WasDead
	}
	return &out, nil
}

// ListNodes implements store.Nodes from partition 0.
func (p *Partitioned) ListNodes(ctx context.Context, lp *store.ListNodesParams) ([]*store.NodeInfo, error) {
	return p.parts[0].ListNodes(ctx, lp)
}

// RescueNodes implements store.Nodes in every partition, partition 0
// first. Partition 0's registry alone judges liveness (each partition
// keeps a registry of its own, from the heartbeats every partition
// receives, but their clocks and the heartbeats' arrival differ), so a
// node is declared dead once however many call at once, and no partition
// rescues the attempts of a node partition 0 holds alive. The other
// partitions follow: they declare dead the nodes partition 0 declared in
// this call, and name the nodes stale in their own registry; those
// partition 0 lists dead (declared by an earlier call that did not reach
// every partition: it failed, or ran out of Limit) are declared there too.
// Limit bounds the attempts of the whole call.
func (p *Partitioned) RescueNodes(ctx context.Context, rp *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	if len(p.parts) == 1 || rp == nil {
		return p.parts[0].RescueNodes(ctx, rp)
	}
	out, err := p.parts[0].RescueNodes(ctx, rp)
	if err != nil {
		return nil, err
	}
	stale := map[int][]string{} // partition -> nodes stale there, not declared
	follow := func(i int, dead []string) error {
		sub := *rp
		sub.Limit = rp.Limit - len(out.Rescued)
		if sub.Limit <= 0 {
			return nil
		}
		r, candidates, err := p.parts[i].rescueNodes(ctx, &sub, true, dead)
		if err != nil {
			return err
		}
		out.Rescued = append(out.Rescued, r.Rescued...)
		if len(candidates) > 0 {
			stale[i] = candidates
		}
		return nil
	}
	for i := 1; i < len(p.parts); i++ {
		if err := follow(i, out.Dead); err != nil {
			return out, err
		}
	}
	if len(stale) == 0 {
		return out, nil
	}
	nodes, err := p.parts[0].ListNodes(ctx, &store.ListNodesParams{Now: rp.Now, DeadAfter: rp.DeadAfter})
	if err != nil {
		return out, err
	}
	dead := map[string]bool{}
	for _, n := range nodes {
		dead[n.ID] = n.Status == store.NodeDead
	}
	for i := 1; i < len(p.parts); i++ {
		var held []string
		for _, id := range stale[i] {
			if dead[id] {
				held = append(held, id)
			}
		}
		if len(held) > 0 {
			if err := follow(i, held); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// Definitions, triggers and documents live in partition 0.

// PutDefinition implements store.Definitions in partition 0.
func (p *Partitioned) PutDefinition(ctx context.Context, dp *store.PutDefinitionParams) (*store.Definition, error) {
	return p.parts[0].PutDefinition(ctx, dp)
}

// GetDefinition implements store.Definitions in partition 0.
func (p *Partitioned) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	return p.parts[0].GetDefinition(ctx, kind)
}

// ListDefinitions implements store.Definitions in partition 0.
func (p *Partitioned) ListDefinitions(ctx context.Context, lp *store.ListDefinitionsParams) ([]*store.Definition, error) {
	return p.parts[0].ListDefinitions(ctx, lp)
}

// DeleteDefinition implements store.Definitions in partition 0.
func (p *Partitioned) DeleteDefinition(ctx context.Context, dp *store.DeleteDefinitionParams) error {
	return p.parts[0].DeleteDefinition(ctx, dp)
}

// UpgradeTriggers implements store.TriggerUpgrader in partition 0, where
// the namespace's triggers (documents) live: it moves the triggers of the
// layout before triggers were documents.
func (p *Partitioned) UpgradeTriggers(ctx context.Context) (int, error) {
	return p.parts[0].UpgradeTriggers(ctx)
}

// PutDocument implements store.Documents in partition 0.
func (p *Partitioned) PutDocument(ctx context.Context, dp *store.PutDocumentParams) (*store.Document, error) {
	return p.parts[0].PutDocument(ctx, dp)
}

// GetDocument implements store.Documents in partition 0.
func (p *Partitioned) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	return p.parts[0].GetDocument(ctx, collection, name)
}

// ListDocuments implements store.Documents in partition 0.
func (p *Partitioned) ListDocuments(ctx context.Context, lp *store.ListDocumentsParams) (*store.DocumentPage, error) {
	return p.parts[0].ListDocuments(ctx, lp)
}

// DeleteDocument implements store.Documents in partition 0.
func (p *Partitioned) DeleteDocument(ctx context.Context, dp *store.DeleteDocumentParams) error {
	return p.parts[0].DeleteDocument(ctx, dp)
}

// PruneDocuments implements store.Documents in partition 0.
func (p *Partitioned) PruneDocuments(ctx context.Context, pp *store.PruneDocumentsParams) (int, error) {
	return p.parts[0].PruneDocuments(ctx, pp)
}

// Subscribe implements store.Notifier: a signal when any partition's
// queue has new work.
func (p *Partitioned) Subscribe(ctx context.Context, queue string) (<-chan struct{}, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Subscribe(ctx, queue)
	}
	ins := make([]<-chan struct{}, len(p.parts))
	for i, c := range p.parts {
		ch, err := c.Subscribe(ctx, queue)
		if err != nil {
			return nil, err
		}
		ins[i] = ch
	}
	out := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, ch := range ins {
		wg.Go(func() {
			for range ch {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		})
	}
	go func() { wg.Wait(); close(out) }()
	return out, nil
}

// SubscribeCancels implements store.CancelNotifier over every partition.
func (p *Partitioned) SubscribeCancels(ctx context.Context) (<-chan store.LeaseRef, error) {
	if len(p.parts) == 1 {
		return p.parts[0].SubscribeCancels(ctx)
	}
	ins := make([]<-chan store.LeaseRef, len(p.parts))
	for i, c := range p.parts {
		ch, err := c.SubscribeCancels(ctx)
		if err != nil {
			return nil, err
		}
		ins[i] = ch
	}
	out := make(chan store.LeaseRef, cancelBuffer)
	var wg sync.WaitGroup
	for _, ch := range ins {
		wg.Go(func() {
			for r := range ch {
				select {
				case out <- r:
				default: // the owner sees it at its next Renew
				}
			}
		})
	}
	go func() { wg.Wait(); close(out) }()
	return out, nil
}

// EnforcesConcurrencyLimits implements store.LimitEnforcer: only a
// namespace of one partition enforces them (a limit counts Processing
// instances over the whole namespace, which no one script of one
// partition can see).
func (p *Partitioned) EnforcesConcurrencyLimits() bool { return len(p.parts) == 1 }

// EnforcesRateLimits implements store.RateLimitEnforcer: only a namespace
// of one partition enforces them (each partition's claim would keep a
// limit's GCRA time of its own, and together let the rate start once in
// each partition).
func (p *Partitioned) EnforcesRateLimits() bool { return len(p.parts) == 1 }

// DelayRateLimit implements store.RateLimitDelayer on a namespace of one
// partition; on more it is refused, as their claims refuse rate limits.
func (p *Partitioned) DelayRateLimit(ctx context.Context, l store.RateLimit, d time.Duration) error {
	if n := len(p.parts); n != 1 {
		return fmt.Errorf("%w: %s: rate limits are not enforced across the partitions of namespace %q (it has %d)", store.ErrInvalid, p.name, p.ns, n)
	}
	return p.parts[0].DelayRateLimit(ctx, l, d)
}

// PartitionOf returns the partition instance id lives in, and false when
// no partition holds it.
func (p *Partitioned) PartitionOf(ctx context.Context, id string) (int, bool, error) {
	p.where.forget(id)
	parts, err := p.find(ctx, []string{id})
	if err != nil {
		return 0, false, err
	}
	_, ok := p.where.get(id)
	return parts[id], ok, nil
}
