package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// batchShape is how the instances of one batched call differ.
type batchShape struct {
	name string
	// make returns instance i of a batch made at now.
	make func(i, seq int, now time.Time) *store.Instance
}

func batchInst(i int, now time.Time) *store.Instance {
	return &store.Instance{ID: uuid.Must(uuid.NewV7()).String(), Kind: "email.send", Queue: "default",
		Args: []byte(`["user@example.com",` + strconv.Itoa(i) + `]`), RunAt: now, CreatedAt: now, MaxRetries: 3, Timeout: 30 * time.Second}
}

var batchShapes = []batchShape{
	// due: one kind, one queue, all due now (the bench program's batch).
	{name: "due", make: func(i, _ int, now time.Time) *store.Instance { return batchInst(i, now) }},
	// delayed: all due in an hour (the scheduled set, not a ready list).
	{name: "delayed", make: func(i, _ int, now time.Time) *store.Instance {
		in := batchInst(i, now)
		in.RunAt = now.Add(time.Hour)
		return in
	}},
	// unique: each with a unique key of its own.
	{name: "unique", make: func(i, seq int, now time.Time) *store.Instance {
		in := batchInst(i, now)
		in.UniqueKey = "u" + strconv.Itoa(seq)
		in.UniqueUntil = now.Add(time.Hour)
		return in
	}},
	// mixed: three kinds, two queues, two priorities, one kind with labels
	// and metadata, taking turns instance by instance.
	{name: "mixed", make: func(i, _ int, now time.Time) *store.Instance {
		in := batchInst(i, now)
		switch i % 3 {
		case 1:
			in.Kind, in.Queue, in.Priority = "report.build", "slow", 5
		case 2:
			in.Kind, in.Labels, in.Metadata = "gpu.render", []string{"gpu"}, map[string]string{"tenant": "t" + strconv.Itoa(i%7)}
		}
		return in
	}},
}

// enqueueBatchParts are the variants BenchmarkEnqueueBatchParts times: as
// enqueueParts, for a call of many instances.
var enqueueBatchParts = []enqueuePart{
	{name: "full"},
	{name: "no_reply", edits: []partEdit{{"flush_ready()\n\nlocal out = {stored, first}", "flush_ready()\ndo return {} end\nlocal out = {stored, first}", 1}}},
	{name: "no_inst_hset", edits: []partEdit{{"chunked('HSET', K_INST, specs)", "", 1}}},
	{name: "no_ready_push", edits: []partEdit{{"local len = chunked('RPUSH', key, p.back)", "local len = #p.back", 1}}},
	{name: "no_lookup_hmget", edits: []partEdit{{"local v = redis.call('HMGET', K_INST, unpack(ARGV, I0 + a, I0 + b))", "local v = {}", 1}}},
	{name: "no_history_xadd", edits: []partEdit{{
		"local eid = xadd_at(K_HIST, 'hskew', now, cmsgpack.pack('e', now, node) .. entry, now_ms)",
		"local eid = now_ms .. '-0'", 1}}},
	{name: "no_kind_buckets", edits: []partEdit{
		{"if redis.call('APPEND', PREFIX .. 'kb:' .. kind .. ':' .. sec, list) == #list then", "if false then", 1},
		{"redis.call('HINCRBY', PREFIX .. 'kn:' .. kind, sec, count)", "", 1}}},
	{name: "no_redis_calls", edits: noRedisCalls()},
	// The Lua work alone, less one more part each.
	{name: "lua_no_spec_concat", edits: append(noRedisCalls(), partEdit{"specs[nspec] = phi .. low .. ARGV[i] .. tail_\n", "specs[nspec] = id\n", 1})},
	{name: "lua_no_entry_concat", edits: append(noRedisCalls(), partEdit{"back[nb] = ARGV[i + 1] .. bhi .. low .. id", "back[nb] = id", 1})},
	{name: "lua_no_instance_loop", edits: append(noRedisCalls(), partEdit{"			i = i + stride\n		end\n		cl.stored", "			i = i + stride\n			break\n		end\n		cl.stored", 1})},
	// Returning early: the work before a point of the function.
	{name: "upto_classes", edits: []partEdit{{"\n-- The classes, by their number", "\ndo return {} end\n--", 1}}},
	{name: "upto_unique_keys", edits: []partEdit{{"\n-- Unique keys (only", "\ndo return {} end\n--", 1}}},
	{name: "upto_seq", edits: []partEdit{{"\n-- Seq: one counter step", "\ndo return {} end\n--", 1}}},
	{name: "upto_instances", edits: []partEdit{{"\nlocal specs, nspec = {}, 0\n", "\ndo return {} end\nlocal specs, nspec = {}, 0\n", 1}}},
	{name: "bare", edits: []partEdit{{"local now, node = tonumber(ARGV[2]), ARGV[3]\n", "do return {} end\n", 1}}},
}

// BenchmarkEnqueueBatchParts breaks down what Redis does per instance in
// a batched enqueue (issue 19): calls of JOBKIT_PARTS_BATCH instances
// (1,000 unless set), their arguments built by redisscript.EnqueueArgs as
// store.Enqueue builds them, sent straight to the enqueue function of a
// variant of the library (see enqueueBatchParts; JOBKIT_PARTS_ONLY picks
// variants), for each batch shape (JOBKIT_BATCH_SHAPES picks: due,
// delayed, unique, mixed). Every figure is per instance: server-µs/job is
// commandstats' usec of FCALL, server-cpu-µs/job the redis-server
// process's CPU time (INFO cpu); under callgrind (JOBKIT_PARTS_CALLGRIND,
// as for BenchmarkEnqueueParts) server-instr/job, the instructions Redis
// executed, which no load on the machine changes. Medians of
// JOBKIT_PARTS_ROUNDS rounds (5) of JOBKIT_PARTS_CALLS calls (20).
//
//	go test -run '^$' -bench EnqueueBatchParts ./store/redisstore/
func BenchmarkEnqueueBatchParts(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	batch := envInt("JOBKIT_PARTS_BATCH", 1000)
	calls := envInt("JOBKIT_PARTS_CALLS", 20)
	rounds := envInt("JOBKIT_PARTS_ROUNDS", 5)
	cg := os.Getenv("JOBKIT_PARTS_CALLGRIND")
	only := envSet("JOBKIT_PARTS_ONLY")
	shapes := envSet("JOBKIT_BATCH_SHAPES")
	type variant struct {
		p       enqueuePart
		s       batchShape
		src, fn string
		keys    []string
		prefix  string
		usec    []float64
		cpu     []float64
		instr   []float64
	}
	var vs []*variant
	stamp := time.Now().UnixNano()
	for _, s := range batchShapes {
		if len(shapes) > 0 && !shapes[s.name] {
			continue
		}
		for i, p := range enqueueBatchParts {
			if len(only) > 0 && !only[p.name] {
				continue
			}
			name := fmt.Sprintf("jkbatch_%s_%d", s.name, i)
			src, fn := partLibrary(b, p, name)
			keys, err := redisscript.NewKeys(fmt.Sprintf("bench_batch_parts_%d_%s_%d", stamp, s.name, i))
			if err != nil {
				b.Fatal(err)
			}
			vs = append(vs, &variant{p: p, s: s, src: src, fn: fn, keys: keys.Enqueue, prefix: keys.Prefix})
		}
	}
	seq := 0
	// args builds the arguments of each of n calls before any is timed.
	args := func(v *variant, n int) [][]any {
		out := make([][]any, n)
		for k := range out {
			now := time.Now()
			p := &store.EnqueueParams{Node: "bench-node", Now: now}
			for i := range batch {
				seq++
				p.Instances = append(p.Instances, v.s.make(i, seq, now))
			}
			a, _, err := redisscript.EnqueueArgs(p)
			if err != nil {
				b.Fatal(err)
			}
			out[k] = append(make([]any, 0, len(a)+1), v.prefix)
			for _, x := range a {
				out[k] = append(out[k], x)
			}
		}
		return out
	}
	call := func(v *variant, a []any) {
		if err := c.FCall(ctx, v.fn, v.keys, a...).Err(); err != nil {
			b.Fatalf("%s/%s: %v", v.s.name, v.p.name, err)
		}
	}
	load := func(v *variant) {
		if err := c.FunctionFlush(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := c.FunctionLoad(ctx, v.src).Err(); err != nil {
			b.Fatalf("%s: %v", v.p.name, err)
		}
		for _, a := range args(v, 2) { // warm up: every key exists before the timing
			call(v, a)
		}
	}
	for range rounds {
		for _, v := range vs {
			load(v)
			as := args(v, calls)
			jobs := float64(calls * batch)
			if cg != "" {
				callgrindDump(b, cg)
				for _, a := range as {
					call(v, a)
				}
				v.instr = append(v.instr, callgrindDump(b, cg)/jobs)
				continue
			}
			u0, _ := serverMicros(b, c)
			cpu0 := serverCPU(b, c)
			for _, a := range as {
				call(v, a)
			}
			cpu1 := serverCPU(b, c)
			u1, _ := serverMicros(b, c)
			v.usec = append(v.usec, float64(u1-u0)/jobs)
			v.cpu = append(v.cpu, (cpu1-cpu0)/jobs)
		}
	}
	for _, v := range vs {
		b.Run(v.s.name+"/"+v.p.name, func(b *testing.B) {
			if cg != "" {
				b.ReportMetric(medianOf(v.instr), "server-instr/job")
				return
			}
			b.ReportMetric(medianOf(v.usec), "server-µs/job")
			b.ReportMetric(medianOf(v.cpu), "server-cpu-µs/job")
		})
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envSet(name string) map[string]bool {
	set := map[string]bool{}
	for _, n := range strings.Split(os.Getenv(name), ",") {
		if n != "" {
			set[n] = true
		}
	}
	return set
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// noRedisCalls are the edits that take every Redis call out of the
// enqueue function but those that read or fill its gatherings.
func noRedisCalls() []partEdit {
	return []partEdit{
		{"redis.call('PUBLISH', PREFIX .. 'w:' .. queue, '1')", "", 1},
		{"local eid = xadd_at(K_HIST, 'hskew', now, entry, now_ms)", "local eid = now_ms .. '-0'", 1},
		{"if redis.call('APPEND', PREFIX .. 'kb:' .. kind .. ':' .. sec, list) == #list then", "if false then", 1},
		{"redis.call('HINCRBY', PREFIX .. 'kn:' .. kind, sec, count)", "", 1},
		{"if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, cl.queue, cl.kind), num(c)) == c then", "if false then", 1},
		{"if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, queue, kind), num(c)) == c then", "if false then", 1},
		{"redis.call('ZADD', levels_key(p.queue), -p.prio, p.member)", "", 1},
		{"redis.call('HSET', heads_key(p.queue), p.member, string.sub(back[1], 1, 13))", "", 1},
		{"local len = chunked('RPUSH', key, back)", "local len = #back", 1},
		{"local tail = redis.call('LINDEX', key, -1)\n\t\tif tail and entry_before", "local tail = nil\n\t\tif tail and entry_before", 1},
		{"local v = redis.call('HMGET', K_INST, unpack(ARGV, I0 + a, I0 + b))", "local v = {}", 1},
		{"local last = redis.call('HINCRBY', K_CTR, 'seq', num(stored))", "local last = stored", 1},
		{"chunked('HSET', K_INST, specs)", "", 1},
		{"chunked('ZADD', sk, sched[sk])", "", 1},
	}
}
