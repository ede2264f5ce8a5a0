package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// enqueuePart is a variant of the enqueue function with one part of its
// work taken out: each edit replaces a piece of redisscript.Library's
// source (old must occur exactly n times).
type enqueuePart struct {
	name  string
	edits []partEdit
	ukey  bool // call it with a unique key
	// alone: the library holds lib.lua and the enqueue function only,
	// not the other scripts' functions.
	alone bool
	// one: call the enqueue_one function (EnqueueOneArgs) instead.
	one bool
}

type partEdit struct {
	old, new string
	n        int
}

// enqueueParts are the variants BenchmarkEnqueueParts times. Each takes
// out one part of the enqueue function's work, so the difference from
// "full" is that part's cost; "bare" is a function that returns at once
// with the same keys and arguments (the call's own cost).
var enqueueParts = []enqueuePart{
	{name: "full"},
	{name: "one", one: true},
	{name: "full_unique_key", ukey: true},
	{name: "full_library_of_enqueue_alone", alone: true},
	{name: "no_publish", edits: []partEdit{{"redis.call('PUBLISH', PREFIX .. 'w:' .. queue, '1')", "", 1}}},
	{name: "no_history_xadd", edits: []partEdit{{
		"local eid = xadd_at(K_HIST, 'hskew', now, entry, now_ms)",
		"local eid = now_ms .. '-0'", 1}}},
	{name: "no_kind_buckets", edits: []partEdit{
		{"if redis.call('APPEND', PREFIX .. 'kb:' .. kind .. ':' .. sec, list) == #list then", "if false then", 1},
		{"redis.call('HINCRBY', PREFIX .. 'kn:' .. kind, sec, count)", "", 1}}},
	{name: "no_state_counts", edits: []partEdit{{"if redis.call('HINCRBY', K_CNT, count_field(S_SCHEDULED, cl.queue, cl.kind), num(c)) == c then", "if true then", 1}}},
	{name: "no_queues_sadd", edits: []partEdit{{"redis.call('SADD', K_QUEUES, cl.queue)", "", 1}}},
	{name: "no_lane_index", edits: []partEdit{
		{"redis.call('ZADD', levels_key(p.queue), -p.prio, p.member)", "", 1},
		{"redis.call('HSET', heads_key(p.queue), p.member, string.sub(back[1], 1, 13))", "", 1}}},
	{name: "no_ready_push", edits: []partEdit{{"local len = chunked('RPUSH', key, back)", "local len = #back", 1}}},
	{name: "no_tail_lindex", edits: []partEdit{{"local tail = redis.call('LINDEX', key, -1)\n\t\tif tail and entry_before", "local tail = nil\n\t\tif tail and entry_before", 1}}},
	{name: "no_lookup_hmget", edits: []partEdit{{"local v = redis.call('HMGET', K_INST, unpack(ARGV, I0 + a, I0 + b))", "local v = {}", 1}}},
	{name: "no_seq_hincrby", edits: []partEdit{{"local last = redis.call('HINCRBY', K_CTR, 'seq', num(stored))", "local last = stored", 1}}},
	{name: "no_inst_hset", edits: []partEdit{{"chunked('HSET', K_INST, specs)", "", 1}}},
	{name: "no_redis_calls", edits: noRedisCalls()},
	{name: "bare", edits: []partEdit{{"local now, node = tonumber(ARGV[2]), ARGV[3]\n", "do return {} end\n", 1}}},
	// one_bare: the enqueue_one function returning at once, same keys and
	// arguments (the lone call's own cost).
	{name: "one_bare", one: true, edits: []partEdit{{"KEYS, ARGV = keys, args\n-- enqueue_one:", "KEYS, ARGV = keys, args\ndo return {} end\n-- enqueue_one:", 1}}},
}

// partLibrary returns Library's source as library name with p's edits,
// and the name of its enqueue function.
func partLibrary(b *testing.B, p enqueuePart, name string) (string, string) {
	b.Helper()
	lib := redisscript.Library()
	src := strings.ReplaceAll(lib.Source, lib.Name, name)
	for _, e := range p.edits {
		if got := strings.Count(src, e.old); got != e.n {
			b.Fatalf("%s: %q occurs %d times in the library, want %d", p.name, e.old, got, e.n)
		}
		src = strings.ReplaceAll(src, e.old, e.new)
	}
	if p.alone {
		parts := strings.Split(src, "\n-- ---- ")
		kept := parts[:1]
		for _, part := range parts[1:] {
			if !strings.Contains(part, "register_function") || strings.HasPrefix(part, "enqueue.lua ----") {
				kept = append(kept, part)
			}
		}
		src = strings.Join(kept, "\n-- ---- ")
	}
	return src, name + "_enqueue"
}

// BenchmarkEnqueueParts breaks the enqueue function's time inside Redis
// down by part (issue 19): each variant of enqueueParts is loaded as a
// library of its own (the only one loaded while it is timed) and called with one instance at a time, the
// variants taking turns in rounds so that a change in the machine's load
// falls on all of them. server-µs/call is commandstats' usec of FCALL
// (the function's run: wall time inside Redis, which a busy machine
// inflates little at this scale); server-cpu-µs/call the redis-server
// process's CPU time (INFO cpu), which includes reading the request and
// writing the reply. Each figure is the median of the rounds.
//
//	go test -run '^$' -bench EnqueueParts ./store/redisstore/
//
// (5 rounds of 2,000 calls per variant; JOBKIT_PARTS_ROUNDS and
// JOBKIT_PARTS_CALLS set them, JOBKIT_PARTS_ONLY=full,bare picks
// variants.)
//
// Instructions, which no load on the machine changes: run redis-server
// under valgrind's callgrind and give its PID and output file; each
// variant then also reports server-instr/call, the instructions Redis
// executed per call (callgrind_control dumps before and after the calls,
// no INFO between them):
//
//	valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/out redis-server --port 27420 ... &
//	JOBKIT_BENCH_REDIS_ADDR=127.0.0.1:27420 JOBKIT_PARTS_CALLGRIND=$PID:/tmp/cg/out \
//	  JOBKIT_PARTS_ROUNDS=1 JOBKIT_PARTS_CALLS=300 go test -run '^$' -bench EnqueueParts ./store/redisstore/
func BenchmarkEnqueueParts(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	type variant struct {
		p         enqueuePart
		src, fn   string
		keys      []string
		prefix    string
		nsKeys    redisscript.Keys
		usec, cpu []float64
		instr     []float64
	}
	var vs []*variant
	stamp := time.Now().UnixNano()
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("JOBKIT_PARTS_ONLY"), ",") {
		if n != "" {
			only[n] = true
		}
	}
	for i, p := range enqueueParts {
		if len(only) > 0 && !only[p.name] {
			continue
		}
		name := fmt.Sprintf("jkparts_%d", i)
		src, fn := partLibrary(b, p, name)
		keys, err := redisscript.NewKeys(fmt.Sprintf("bench_parts_%d_%d", stamp, i))
		if err != nil {
			b.Fatal(err)
		}
		v := &variant{p: p, src: src, fn: fn, keys: keys.Enqueue, prefix: keys.Prefix, nsKeys: keys}
		if p.one {
			v.fn, v.keys = fn+"_one", keys.EnqueueOne
		}
		vs = append(vs, v)
	}
	perRound := 2000
	if n, err := strconv.Atoi(os.Getenv("JOBKIT_PARTS_CALLS")); err == nil && n > 0 {
		perRound = n
	}
	cg := os.Getenv("JOBKIT_PARTS_CALLGRIND")
	seq := 0
	// JOBKIT_PARTS_PER_CALL instances per call (default 1; 8 is what
	// group commit gives 8 goroutines).
	per := 1
	if n, err := strconv.Atoi(os.Getenv("JOBKIT_PARTS_PER_CALL")); err == nil && n > 0 {
		per = n
	}
	call := func(v *variant) {
		now := time.Now()
		ins := make([]*store.Instance, per)
		for k := range ins {
			seq++
			in := &store.Instance{ID: uuid.Must(uuid.NewV7()).String(), Kind: "email.send", Queue: "default",
				Args: []byte(`["user@example.com",42]`), RunAt: now, CreatedAt: now, MaxRetries: 3}
			if v.p.ukey {
				in.UniqueKey = "u" + strconv.Itoa(seq)
				in.UniqueUntil = now.Add(time.Hour)
			}
			ins[k] = in
		}
		ep := &store.EnqueueParams{Instances: ins, Node: "bench-node", Now: now}
		var a []string
		var err error
		if v.p.one {
			var ok bool
			if a, ok, err = redisscript.EnqueueOneArgs(v.nsKeys, ep); err == nil && !ok {
				b.Fatalf("%s: EnqueueOneArgs refused the call", v.p.name)
			}
		} else {
			a, _, err = redisscript.EnqueueArgs(ep)
		}
		if err != nil {
			b.Fatal(err)
		}
		args := make([]any, 0, len(a)+1)
		if !v.p.one { // the lean function's ARGV carries everything
			args = append(args, v.prefix)
		}
		for _, x := range a {
			args = append(args, x)
		}
		if err := c.FCall(ctx, v.fn, v.keys, args...).Err(); err != nil {
			b.Fatalf("%s: %v", v.p.name, err)
		}
	}
	// Only the variant being timed is loaded: Redis keeps every library
	// in one Lua state, whose garbage collector walks all of them.
	load := func(v *variant) {
		if err := c.FunctionFlush(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		if err := c.FunctionLoad(ctx, v.src).Err(); err != nil {
			b.Fatalf("%s: %v", v.p.name, err)
		}
		for range 100 { // warm up: every key exists before the timing
			call(v)
		}
	}
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("JOBKIT_PARTS_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	for range rounds {
		for _, v := range vs {
			load(v)
			if cg != "" {
				callgrindDump(b, cg)
				for range perRound {
					call(v)
				}
				v.instr = append(v.instr, callgrindDump(b, cg)/float64(perRound))
				continue
			}
			u0, n0 := serverMicros(b, c)
			cpu0 := serverCPU(b, c)
			for range perRound {
				call(v)
			}
			cpu1 := serverCPU(b, c)
			u1, n1 := serverMicros(b, c)
			v.usec = append(v.usec, float64(u1-u0)/float64(n1-n0))
			v.cpu = append(v.cpu, (cpu1-cpu0)/float64(perRound))
		}
	}
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	for _, v := range vs {
		b.Run(v.p.name, func(b *testing.B) {
			if cg != "" {
				b.ReportMetric(median(v.instr), "server-instr/call")
				return
			}
			b.ReportMetric(median(v.usec), "server-µs/call")
			b.ReportMetric(median(v.cpu), "server-cpu-µs/call")
		})
	}
}

// callgrindDump has the callgrind of spec ("PID:output file") dump its
// counts and returns the instructions of that dump: those executed since
// the previous one.
func callgrindDump(b *testing.B, spec string) float64 {
	b.Helper()
	pid, out, ok := strings.Cut(spec, ":")
	if !ok {
		b.Fatalf("JOBKIT_PARTS_CALLGRIND=%q: want PID:output-file", spec)
	}
	before, _ := filepath.Glob(out + ".*")
	if msg, err := exec.Command("callgrind_control", "-d", pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control: %v: %s", err, msg)
	}
	// The dump file can appear after callgrind_control returns.
	var after []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		after, _ = filepath.Glob(out + ".*")
		if len(after) == len(before)+1 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("callgrind_control -d %s: %d dump files before, %d after 30s", pid, len(before), len(after))
		}
		time.Sleep(50 * time.Millisecond)
	}
	last, lastN := "", -1
	for _, f := range after {
		if n, err := strconv.Atoi(f[strings.LastIndex(f, ".")+1:]); err == nil && n > lastN {
			last, lastN = f, n
		}
	}
	data, err := os.ReadFile(last)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "totals: "); ok {
			n, err := strconv.ParseFloat(strings.Fields(v)[0], 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("%s: no totals line", last)
	return 0
}
