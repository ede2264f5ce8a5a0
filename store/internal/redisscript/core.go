package redisscript

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Runner is what a plugin supplies: its client library's way to run a
// script and to listen on a channel.
type Runner interface {
	// Run runs s (as a function of Library, or with EVALSHA on servers
	// without Functions: see Functions) and returns its reply as nil,
	// int64, string or []any of those.
	Run(ctx context.Context, s *Script, keys, args []string) (any, error)
	// Listen subscribes to channel and blocks until ctx ends or the
	// subscription breaks, calling subscribed each time the server confirms
	// the subscription (again after a reconnect) and message for every
	// message with its payload. It returns ctx's error or why the
	// subscription broke.
	Listen(ctx context.Context, channel string, subscribed func(), message func(payload string)) error
	// Do runs one plain command (used for lookups that read indexes).
	Do(ctx context.Context, args ...string) (any, error)
}

// Core is a store.Store and store.Notifier on a Runner. The plugins wrap
// it; all behaviour lives here and in the scripts.
type Core struct {
	r    Runner
	keys Keys
	name string // the plugin's name for error messages
	// order keeps the sorted order keys of big seconds (lookup_order.go).
	order orderCache
	// acks: the enqueues wait for replicas (WithReplicaAcks, replicas.go).
	acks replicaAcks
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
	_ store.Store          = (*Core)(nil)
	_ store.Notifier       = (*Core)(nil)
	_ store.CancelNotifier = (*Core)(nil)
)

func (c *Core) run(ctx context.Context, s *Script, args ...string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all := make([]string, 0, len(args)+1)
	all = append(all, c.keys.Prefix)
	all = append(all, args...)
	return c.runAll(ctx, s, all)
}

// runAll is run with the script's whole ARGV, the prefix first.
func (c *Core) runAll(ctx context.Context, s *Script, all []string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.acks.n > 0 && (s == Enqueue || s == EnqueueOne) {
		return c.runAcked(ctx, s, all)
	}
	v, err := c.r.Run(ctx, s, c.keys.For(s), all)
	if err != nil {
		return nil, c.failed(ctx, s, err)
	}
	return v, nil
}

// failed is the error of a Run of s that failed with err: an enqueue
// sent and not answered may have run (issue 39).
func (c *Core) failed(ctx context.Context, s *Script, err error) error {
	werr := c.runError(ctx, s, err)
	if (s == Enqueue || s == EnqueueOne) && !c.unapplied(err) {
		werr = store.OutcomeUnknown(werr)
	}
	return werr
}

// runError is the error of a Run of s that failed with err.
func (c *Core) runError(ctx context.Context, s *Script, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", c.name, s.Name, ctx.Err())
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		// The client's network deadline (its ctx's) fired a moment
		// before the ctx did.
		return fmt.Errorf("%s: %s: %w (%v)", c.name, s.Name, context.DeadlineExceeded, err)
	}
	if strings.Contains(err.Error(), "OOM command not allowed") {
		return fmt.Errorf("%w: %s: %s: Redis is at its maxmemory and refuses writes (nothing was changed); free memory (retention, a larger maxmemory) or use an eviction policy that keeps jobkit's keys: %v", store.ErrFull, c.name, s.Name, err)
	}
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w: %s: %s: a key of namespace %q holds a value of another type (written by something else? give jobkit its own namespace): %v", store.ErrCorrupt, c.name, s.Name, c.keys.Prefix, err)
	}
	return fmt.Errorf("%s: %s: %w", c.name, s.Name, err)
}

// Unapplied is implemented by a Runner whose client can tell, from an
// error of Run, that the command certainly changed nothing: the server
// answered with an error reply (the script did not run, or ran to its
// error), or the client failed before writing the command (it is closed,
// it waited too long for a pooled connection, it could not connect).
type Unapplied interface {
	Unapplied(err error) bool
}

// unapplied reports whether err, an error of Run, certainly left the
// store unchanged. Anything else (the ctx ended, or the connection broke,
// after the command may have been written) leaves the outcome unknown:
// the client does not say whether a command cut short by its ctx had
// gone out, so a ctx that ends while the client waits for a connection
// counts as unknown too.
func (c *Core) unapplied(err error) bool {
	if strings.Contains(err.Error(), "OOM command not allowed") || strings.Contains(err.Error(), "WRONGTYPE") {
		return true // the server's refusal
	}
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		return true // never connected
	}
	u, ok := c.r.(Unapplied)
	return ok && u.Unapplied(err)
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

// EnqueueArgs returns the arguments of the enqueue script for p after
// the namespace prefix (lua/enqueue.lua's ARGV from [2]) and the encoded
// IDs of p's instances, or the validation error of the first invalid
// instance. Core.Enqueue sends them; benchmarks that call the script
// directly build them here too.
//
// What many instances share is sent once: their class (kind, queue,
// priority, labels, the second of CreatedAt, whether due, which optional
// values they carry), made here with the history entry's part for all
// of them and each kind bucket's part. Redis, whose one thread every
// enqueue shares, is left per instance with its record, its ready-list
// or scheduled entry and its share of a few variadic calls.
//
// An instance is due, and goes to its lane's ready list rather than the
// scheduled set, when its RunAt is at or before the latest of now and
// the instances' CreatedAt: the caller made every record before the
// call, so that moment has passed. A call that group commit shares has
// for now the earliest CreatedAt of its instances (see the core's
// enqueueTime), and each instance due at its own CreatedAt is due by
// then.
func EnqueueArgs(p *store.EnqueueParams) (args, ids []string, err error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	ids, dueBy := enqueueIDs(p)
	n := len(p.Instances)
	now := Micros(p.Now)
	var (
		// The history entry's value: the header the script's
		// cmsgpack.pack('e', now, node) would write, then the IDs.
		hist       = appendMsgpackStr(appendMsgpackInt(append(make([]byte, 0, 12+len(p.Node)+18*n), 0xa1, 'e'), now), p.Node)
		cls        enqueueClasses
		classes    []enqueueClass
		buckets    []*enqueueBucket
		runs       = make([]string, 0, 3*n+2)
		run        = enqueueRun{at: -1}
		lastLabels []string
		lastLane   string
		// Each instance's spec and place (its ready-list or scheduled
		// entry's start) are packed one after the other into blob, and
		// cut from one string once all are: their places in runs are
		// at[k], and where each ends in blob is end[2k] and end[2k+1].
		blob = make([]byte, 0, blobSize(p.Instances))
		at   = make([]int, 0, n)
		end  = make([]int, 0, 2*n)
	)
	for i, in := range p.Instances {
		runat := Micros(in.RunAt)
		lane := lastLane
		if i == 0 || !slices.Equal(in.Labels, lastLabels) {
			lane, lastLabels = laneLabels(in.Labels), in.Labels
			lastLane = lane
		}
		tail := specTail(lane, encodeMetadata(in.Metadata), encodeShard(in), encodeTask(in))
		cl := enqueueClass{kind: in.Kind, queue: in.Queue, prio: in.Priority, labels: lane,
			sec: floorDiv(Micros(in.CreatedAt), 1_000_000), due: runat <= dueBy, x: tail != "", u: in.UniqueKey != ""}
		num := cls.number(classes, i, cl)
		if num == "" {
			classes = append(classes, cl)
			num = cls.added(classes)
		}
		runs = run.add(runs, num)
		id := ids[i]
		hist = appendMsgpackStr(hist, id)
		b := cls.bucket(buckets, enqueueBucketKey{in.Kind, cl.sec})
		if b == nil {
			b = &enqueueBucket{enqueueBucketKey: enqueueBucketKey{in.Kind, cl.sec}}
			buckets = append(buckets, b)
			cls.addedBucket(buckets)
		}
		b.add(id)
		blob = appendSpec(blob, in)
		end = append(end, len(blob))
		blob = appendPlace(blob, cl.due, runat)
		end = append(end, len(blob))
		at = append(at, len(runs))
		runs = appendRunTail(runs, cl, tail, in)
	}
	run.close(runs)
	all, start := string(blob), 0
	for k, r := range at {
		mid, stop := end[2*k], end[2*k+1]
		runs[r], runs[r+1] = all[start:mid], all[mid:stop]
		start = stop
	}
	args = make([]string, 0, 7+n+6*len(classes)+4*len(buckets)+len(runs))
	args = append(args, strconv.FormatInt(now, 10), p.Node, itoa(n), repeatFlags(p.Instances, ids), itoa(len(classes)), itoa(len(buckets)), string(hist))
	args = append(args, ids...)
	args = appendClassArgs(args, classes, buckets)
	args = append(args, runs...)
	return args, ids, nil
}

// enqueueIDs returns the encodings of the IDs of p's instances and the
// latest of p.Now and their CreatedAt (see EnqueueArgs). The encodings
// are packed into one buffer and cut from one string: one allocation for
// all of them.
func enqueueIDs(p *store.EnqueueParams) (ids []string, dueBy int64) {
	n := len(p.Instances)
	dueBy = Micros(p.Now)
	idb := make([]byte, 0, 17*n)
	for _, in := range p.Instances {
		idb = appendID(idb, in.ID)
		dueBy = max(dueBy, Micros(in.CreatedAt))
	}
	ids = make([]string, n)
	if n > 0 {
		idAll := string(idb)
		for i, in := range p.Instances {
			l := 1 + len(in.ID) // idText and the ID
			if idAll[0] == idUUID {
				l = 17
			}
			ids[i], idAll = idAll[:l], idAll[l:]
		}
	}
	return ids, dueBy
}

// repeatFlags returns the script's flags: "r" when an ID repeats in the
// call, "k" when a unique key does.
func repeatFlags(instances []*store.Instance, ids []string) string {
	n := len(instances)
	var idSeen, keySeen map[string]struct{}
	flags := ""
	for i, in := range instances {
		if n > 1 && n <= smallBatch && !strings.Contains(flags, "r") {
			// A few IDs (group commit's calls) are compared without a map.
			if slices.Contains(ids[:i], ids[i]) {
				flags += "r"
			}
		} else if n > 1 && !strings.Contains(flags, "r") {
			if idSeen == nil {
				idSeen = make(map[string]struct{}, n)
			}
			if _, ok := idSeen[ids[i]]; ok {
				flags += "r"
			}
			idSeen[ids[i]] = struct{}{}
		}
		if in.UniqueKey != "" && !strings.Contains(flags, "k") {
			if keySeen == nil {
				keySeen = map[string]struct{}{}
			}
			if _, ok := keySeen[in.UniqueKey]; ok {
				flags += "k"
			}
			keySeen[in.UniqueKey] = struct{}{}
		}
	}
	return flags
}

// appendPlace appends an instance's place: the 7-byte start of its
// ready-list entry when due, else its RunAt for the scheduled set.
func appendPlace(blob []byte, due bool, runat int64) []byte {
	if due {
		return appendBE7(blob, runat)
	}
	return strconv.AppendInt(blob, runat, 10)
}

// appendRunTail appends an instance's run entries after its spec and
// place (left empty, filled once all are packed): the spec's tail when
// its class carries one, the unique key and its expiry when it has one.
func appendRunTail(runs []string, cl enqueueClass, tail string, in *store.Instance) []string {
	runs = append(runs, "", "") // the spec and the place
	if cl.x {
		runs = append(runs, tail)
	}
	if cl.u {
		runs = append(runs, in.UniqueKey, us(in.UniqueUntil))
	}
	return runs
}

// enqueueRun is the run of instances of one class EnqueueArgs is adding:
// a run is its class number and its count, then its instances' entries.
type enqueueRun struct {
	class string
	count int
	at    int // where the run's count goes in runs; -1 before the first run
}

// add counts one more instance of class num, starting a run when num is
// not the current run's class.
func (r *enqueueRun) add(runs []string, num string) []string {
	if num != r.class || r.at < 0 {
		r.close(runs)
		runs = append(runs, num, "")
		r.class, r.count, r.at = num, 0, len(runs)-1
	}
	r.count++
	return runs
}

// close writes the current run's count.
func (r *enqueueRun) close(runs []string) {
	if r.at >= 0 {
		runs[r.at] = itoa(r.count)
	}
}

// enqueueBucketKey names one kind bucket: a kind and a second of
// CreatedAt.
type enqueueBucketKey struct {
	kind string
	sec  int64
}

// enqueueBucket is a kind bucket's part of the enqueue script's
// arguments: how many IDs, and their encodings.
type enqueueBucket struct {
	enqueueBucketKey
	count int
	part  []byte
}

func (b *enqueueBucket) add(id string) {
	b.count++
	b.part = append(b.part, byte(len(id)>>8), byte(len(id)))
	b.part = append(b.part, id...)
}

// enqueueClasses finds the classes and kind buckets of one EnqueueArgs
// in their lists (kept by the caller, numbered in the order first seen):
// by a look through the list, or once a list is longer than
// smallClasses, in a map.
type enqueueClasses struct {
	num       map[enqueueClass]string // made once there are more than smallClasses
	last      enqueueClass
	lastNum   string
	bucketOf  map[enqueueBucketKey]*enqueueBucket // made once there are more than smallClasses
	lastBuckt *enqueueBucket
}

// number returns the number of class cl of instance i in list, or ""
// when it is new: then the caller appends it to list and calls added.
func (c *enqueueClasses) number(list []enqueueClass, i int, cl enqueueClass) string {
	if i > 0 && cl == c.last {
		return c.lastNum
	}
	num := ""
	if c.num == nil {
		if k := slices.Index(list, cl); k >= 0 {
			num = itoa(k + 1)
		}
	} else {
		num = c.num[cl]
	}
	if num != "" {
		c.last, c.lastNum = cl, num
	}
	return num
}

// added notes the class the caller appended to list and returns its
// number.
func (c *enqueueClasses) added(list []enqueueClass) string {
	cl := list[len(list)-1]
	num := itoa(len(list))
	if c.num != nil {
		c.num[cl] = num
	} else if len(list) > smallClasses {
		c.num = make(map[enqueueClass]string, 2*len(list))
		for k, x := range list {
			c.num[x] = itoa(k + 1)
		}
	}
	c.last, c.lastNum = cl, num
	return num
}

// bucket returns the bucket bk in buckets, or nil when it is new: then
// the caller appends it to buckets and calls addedBucket.
func (c *enqueueClasses) bucket(buckets []*enqueueBucket, bk enqueueBucketKey) *enqueueBucket {
	if b := c.lastBuckt; b != nil && b.enqueueBucketKey == bk {
		return b
	}
	var b *enqueueBucket
	if c.bucketOf == nil {
		for _, x := range buckets {
			if x.enqueueBucketKey == bk {
				b = x
				break
			}
		}
	} else {
		b = c.bucketOf[bk]
	}
	if b != nil {
		c.lastBuckt = b
	}
	return b
}

// addedBucket notes the bucket the caller appended to buckets.
func (c *enqueueClasses) addedBucket(buckets []*enqueueBucket) {
	b := buckets[len(buckets)-1]
	if c.bucketOf != nil {
		c.bucketOf[b.enqueueBucketKey] = b
	} else if len(buckets) > smallClasses {
		c.bucketOf = make(map[enqueueBucketKey]*enqueueBucket, 2*len(buckets))
		for _, x := range buckets {
			c.bucketOf[x.enqueueBucketKey] = x
		}
	}
	c.lastBuckt = b
}

// appendClassArgs appends the classes' and the buckets' arguments.
func appendClassArgs(args []string, classes []enqueueClass, buckets []*enqueueBucket) []string {
	for _, cl := range classes {
		f := 0
		if cl.due {
			f |= 1
		}
		if cl.x {
			f |= 2
		}
		if cl.u {
			f |= 4
		}
		args = append(args, cl.kind, cl.queue, itoa(cl.prio), cl.labels, strconv.FormatInt(cl.sec, 10), string(rune('0'+f)))
	}
	for _, b := range buckets {
		args = append(args, b.kind, strconv.FormatInt(b.sec, 10), itoa(b.count), string(b.part))
	}
	return args
}

// Up to smallBatch instances (group commit's calls carry a few), repeated
// IDs are found by comparing each with those before it, and up to
// smallClasses classes or buckets are looked up in their lists: maps only
// for more.
const (
	smallBatch   = 16
	smallClasses = 8
)

// blobSize is about the bytes EnqueueArgs packs for instances' specs
// and places: a spec is ~50 bytes and its strings, a place 7 bytes or a
// number.
func blobSize(instances []*store.Instance) int {
	n := 0
	for _, in := range instances {
		n += 80 + len(in.Kind) + len(in.Queue) + len(in.Args) + len(in.UniqueKey)
	}
	return n
}

// enqueueClass is what the instances of one class of lua/enqueue.lua's
// arguments share.
type enqueueClass struct {
	kind, queue, labels string
	prio                int
	sec                 int64 // the second of CreatedAt
	due, x, u           bool
}

// appendMsgpackStr appends s as cmsgpack.pack(s) does in Redis's Lua: a
// MessagePack str of the smallest width.
func appendMsgpackStr[S ~string | ~[]byte](b []byte, s S) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= 0xff:
		b = append(b, 0xd9, byte(n))
	case n <= 0xffff:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

// Enqueue implements store.Queue.
func (c *Core) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	if all, ok, err := enqueueOneArgs(c.keys, p); err != nil {
		return nil, err
	} else if ok {
		// A lone due instance (most ScheduleJob calls): the lean script,
		// which answers a stored instance with its Seq alone.
		v, err := c.runAll(ctx, EnqueueOne, all)
		if err != nil {
			return nil, err
		}
		if seq, ok := v.(int64); ok {
			return []store.EnqueueResult{{ID: p.Instances[0].ID, Seq: uint64(seq)}}, nil
		}
		return c.enqueueResults(p, asArray(v))
	}
	args, _, err := EnqueueArgs(p) // validates p
	if err != nil {
		return nil, err
	}
	if len(p.Instances) == 0 {
		return []store.EnqueueResult{}, nil
	}
	v, err := c.run(ctx, Enqueue, args...)
	if err != nil {
		return nil, err
	}
	return c.enqueueResults(p, asArray(v))
}

// enqueueResults decodes lua/enqueue.lua's reply a: the stored count, the
// first Seq, then code, place, ID and Seq of each instance not stored.
func (c *Core) enqueueResults(p *store.EnqueueParams, a []any) ([]store.EnqueueResult, error) {
	n := len(p.Instances)
	if len(a) < 2 || (len(a)-2)%4 != 0 || int(asInt(a[0]))+(len(a)-2)/4 != n {
		return nil, fmt.Errorf("%s: enqueue: malformed reply for %d instances: %v", c.name, n, a)
	}
	out := make([]store.EnqueueResult, n)
	done := make([]bool, n)
	for k := 2; k < len(a); k += 4 {
		j := int(asInt(a[k+1])) - 1
		if j < 0 || j >= n || done[j] {
			return nil, fmt.Errorf("%s: enqueue: malformed reply for %d instances: %v", c.name, n, a)
		}
		done[j] = true
		in := p.Instances[j]
		id, err := DecodeID(asString(a[k+2]))
		if err != nil {
			return nil, fmt.Errorf("%s: enqueue: %w", c.name, err)
		}
		switch asInt(a[k]) {
		case 2:
			out[j] = store.EnqueueResult{ID: id, Seq: uint64(asInt(a[k+3])), Existed: true}
		case 1:
			out[j] = store.EnqueueResult{ID: id, Err: fmt.Errorf("%w: instance %s: unique key %q is held by instance %s", store.ErrDuplicate, in.ID, in.UniqueKey, id)}
		default:
			out[j] = store.EnqueueResult{ID: id, Err: fmt.Errorf("%w: instance %s: the record stored under this ID cannot be decoded", store.ErrCorrupt, id)}
		}
	}
	// The stored instances, in order: their IDs are theirs (DecodeID of
	// EncodeID(id) is id, so the reply need not carry them).
	seq := uint64(asInt(a[1]))
	for j := range out {
		if done[j] {
			continue
		}
		out[j] = store.EnqueueResult{ID: p.Instances[j].ID, Seq: seq}
		seq++
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
	args := make([]string, 0, 8+len(p.Kinds)+3*len(p.Limits)+len(p.Labels))
	args = append(args, us(p.Now), p.Owner, us(p.LeaseUntil), itoa(p.Limit), p.Queue, fmt.Sprintf("%020d", p.ClaimSeq), itoa(len(p.Kinds)))
	args = append(args, p.Kinds...)
	args = appendLimits(args, p.Limits)
	args = appendRateLimits(args, p.RateLimits)
	args = append(args, p.Labels...)
	v, err := c.run(ctx, Claim, args...)
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) < 3 || len(a) > 5 {
		return nil, fmt.Errorf("%s: claim: malformed reply", c.name)
	}
	rows := asArray(a[0])
	res := &store.ClaimResult{Instances: make([]*store.Instance, 0, len(rows)/3), NextRunAt: FromMicros(asInt(a[1]))}
	res.Limited = len(a) >= 4 && asInt(a[3]) == 1
	if len(a) == 5 {
		res.RetryAfter = time.Duration(asInt(a[4])) * time.Microsecond
	}
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
		if a, ok := stateAttempt(state); ok {
			attempt = a
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
	if err := p.Validate(); err != nil {
		return nil, err
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
func (c *Core) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out := make([]store.FinishResult, len(p.Outcomes))
	args := []string{us(p.Now), p.Owner}
	var sent []int
	for i := range p.Outcomes {
		o := &p.Outcomes[i]
		if err := o.Validate(); err != nil {
			out[i].Err = err
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
		case 0:
			out[i].State = o.State
		case 1:
			out[i].Err = fmt.Errorf("%w: instance %s attempt %d is no longer held by %s (rescued, finished or canceled)", store.ErrLeaseLost, o.ID, o.Attempt, p.Owner)
		case 2:
			out[i].Err = fmt.Errorf("%w: instance %s: the stored record cannot be decoded", store.ErrCorrupt, o.ID)
		case 3:
			out[i].State = store.Canceled // a retry or release met a cancel request
		default:
			return nil, fmt.Errorf("%s: finish: unknown reply %d for instance %s", c.name, asInt(code), o.ID)
		}
	}
	return out, nil
}

// Rescue implements store.Queue.
func (c *Core) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	v, err := c.run(ctx, Rescue, us(p.Now), p.Node, itoa(p.Limit))
	if err != nil {
		return nil, err
	}
	return c.decodeTriples(v)
}

// Cancel implements store.Queue.
func (c *Core) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	if err := p.Validate(); err != nil {
		return nil, err
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
		if err := l.Validate(); err != nil {
			return err
		}
		args = append(args, EncodeID(l.InstanceID), l.Kind, itoa(l.Attempt), itoa(int(l.Level)), us(l.Time), l.Node, l.Message)
	}
	_, err := c.run(ctx, AppendLogs, args...)
	return err
}

// Prune implements store.Pruner.
func (c *Core) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
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

// listenAlways listens on channel until ctx ends, subscribing again after
// a broken connection with backoff (10 ms doubling to 2 s, back to 10 ms
// after a subscription that lasted 5 s); subscribed runs at each
// (re)subscription, message for each message.
func (c *Core) listenAlways(ctx context.Context, channel string, subscribed func(), message func(string)) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		_ = c.r.Listen(ctx, channel, subscribed, message)
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
		c.listenAlways(ctx, c.keys.Wake(queue), subscribed, func(string) { signal() })
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

// Wake implements store.Shards with one run of lua/wake.lua.
func (c *Core) Wake(ctx context.Context, p *store.WakeParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if len(p.IDs) == 0 {
		return ctx.Err()
	}
	args := make([]string, 0, 2+len(p.IDs))
	args = append(args, us(p.Now), "")
	for _, id := range p.IDs {
		args = append(args, EncodeID(id))
	}
	_, err := c.run(ctx, Wake, args...)
	return err
}
