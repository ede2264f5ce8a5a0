package redisscript

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestEnqueueArgsAsBefore: EnqueueArgs, which packs the instances' IDs,
// specs and places into shared buffers, returns byte for byte the
// arguments and IDs of its former code (enqueueArgsBefore, kept below as
// it was, with EncodeSpec, EncodeID and be7 per instance), for batches
// of every shape the enqueue script takes (sizes either side of the
// small-batch paths: smallBatch, smallClasses): kinds, queues, priorities,
// labels, metadata and shard fields that change from instance to
// instance or stay, due and delayed instances (a RunAt before 1970
// included), unique keys (some repeated), repeated IDs, IDs that are not
// UUIDs, and arguments whose lengths cross each MessagePack string width.
func TestEnqueueArgsAsBefore(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 1000))
	now := time.Date(2026, 11, 24, 7, 0, 0, 123456789, time.UTC)
	argLens := []int{0, 1, 31, 32, 255, 256, 65535, 65536}
	ints := []int64{0, 1, -1, 127, 128, -32, -33, 255, 256, -128, -129, 65535, 65536, -32768, -32769,
		math.MaxUint32, math.MaxUint32 + 1, math.MinInt32, math.MinInt32 - 1, math.MaxInt64, math.MinInt64 + 1}
	pick := func(s ...string) string { return s[r.IntN(len(s))] }
	for _, n := range []int{0, 1, 2, 3, 5, 8, 16, 17, 40, 256, 1000, 1300} {
		for round := range 4 {
			ins := make([]*store.Instance, n)
			for i := range ins {
				in := &store.Instance{
					ID:         randomUUID(r),
					Kind:       "k",
					Queue:      "default",
					Args:       []byte(`["user@example.com",42]`),
					CreatedAt:  now,
					RunAt:      now,
					MaxRetries: 3,
				}
				if round > 0 { // round 0: the bench program's batch, all alike
					in.Kind = pick("k", "k", "email.send", strings.Repeat("x", 40))
					in.Queue = pick("default", "default", "q2")
					in.Priority = int(ints[r.IntN(len(ints))] % 1000)
					in.MaxRetries = int(ints[r.IntN(len(ints))] % store.MaxRetriesLimit)
					in.Timeout = time.Duration(ints[r.IntN(len(ints))])
					in.CreatedAt = now.Add(time.Duration(r.IntN(6)) * 700 * time.Millisecond) // up to 12 buckets
					switch r.IntN(4) {
					case 0:
						in.RunAt = now.Add(time.Hour)
					case 1:
						in.RunAt = time.Unix(-5, 0)
					case 2:
						in.RunAt = now.Add(-time.Duration(r.IntN(1e9)))
					}
					if r.IntN(3) == 0 {
						in.Args = []byte(strings.Repeat("a", argLens[r.IntN(len(argLens))]))
					}
					if r.IntN(4) == 0 {
						in.Labels = []string{pick("gpu", "b", "a"), pick("x", "gpu")}
					}
					if r.IntN(5) == 0 {
						in.Metadata = map[string]string{"tenant": pick("a", "b"), "z": "1"}
					}
					if r.IntN(6) == 0 {
						in.Parent, in.ShardIndex, in.ShardCount = "parent-1", r.IntN(4), 4
						in.ID = store.ShardID(in.Parent, in.ShardIndex) // repeated at times
					}
					if r.IntN(3) == 0 {
						in.UniqueKey = "u:" + strconv.Itoa(r.IntN(n+1))
						in.UniqueUntil = now.Add(time.Duration(ints[r.IntN(len(ints))] % int64(time.Hour)))
						if in.UniqueUntil.IsZero() {
							in.UniqueUntil = now
						}
					}
					switch r.IntN(8) {
					case 0 + 8*min(in.ShardCount, 1): // not for a shard, whose ID is set
						in.ID = pick("id-1", "", "x", strings.Repeat("i", 300))
						if in.ID == "" {
							in.ID = "text"
						}
					case 1 + 8*min(in.ShardCount, 1):
						in.ID = strings.ToUpper(in.ID) // a UUID not in canonical form: text
					case 2 + 8*min(in.ShardCount, 1):
						if i > 0 {
							in.ID = ins[r.IntN(i)].ID // repeated
						}
					}
				}
				ins[i] = in
			}
			p := &store.EnqueueParams{Instances: ins, Node: "node-1", Now: now}
			name := fmt.Sprintf("n=%d/round=%d", n, round)
			wantArgs, wantIDs, wantErr := enqueueArgsBefore(p)
			gotArgs, gotIDs, gotErr := EnqueueArgs(p)
			if wantErr != nil || gotErr != nil {
				t.Fatalf("%s: error %v (before: %v); the batch is valid", name, gotErr, wantErr)
			}
			if !slices.Equal(gotIDs, wantIDs) {
				t.Fatalf("%s: IDs differ", name)
			}
			if !slices.Equal(gotArgs, wantArgs) {
				for k := range min(len(gotArgs), len(wantArgs)) {
					if gotArgs[k] != wantArgs[k] {
						t.Fatalf("%s: argument %d of %d/%d is %q, want %q", name, k, len(gotArgs), len(wantArgs), gotArgs[k], wantArgs[k])
					}
				}
				t.Fatalf("%s: %d arguments, want %d", name, len(gotArgs), len(wantArgs))
			}
		}
	}
	// An invalid instance: the same error, nothing else.
	bad := &store.EnqueueParams{Instances: []*store.Instance{{ID: "a", Kind: "k", Queue: "q", CreatedAt: now}, {ID: "b", Kind: "k", CreatedAt: now}}, Now: now}
	_, _, wantErr := enqueueArgsBefore(bad)
	if _, _, err := EnqueueArgs(bad); !errors.Is(err, store.ErrInvalid) || err.Error() != wantErr.Error() {
		t.Fatalf("invalid instance: %v, want %v", err, wantErr)
	}
}

// TestAppendMsgpackIntIsEncoder: appendMsgpackInt writes what msgpack's
// Encoder (the packer) writes, at every width's edges.
func TestAppendMsgpackIntIsEncoder(t *testing.T) {
	var vals []int64
	for _, e := range []int64{0, 31, 32, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64} {
		vals = append(vals, e-1, e, e+1, -e-1, -e, -e+1)
	}
	vals = append(vals, math.MinInt64, math.MinInt64+1, math.MinInt32, math.MinInt32-1, math.MinInt16, math.MinInt16-1, math.MinInt8, math.MinInt8-1, -33)
	for _, v := range vals {
		pk := getPacker()
		pk.int(v)
		want := pk.record()
		if got := string(appendMsgpackInt([]byte("x"), v)); got != "x"+want {
			t.Errorf("appendMsgpackInt(%d) = %x, want %x", v, got[1:], want)
		}
	}
}

// enqueueArgsBefore is EnqueueArgs as it was before its per-instance
// values went into shared buffers (issue 19, the Go side of a batch).
func enqueueArgsBefore(p *store.EnqueueParams) (args, ids []string, err error) {
	n := len(p.Instances)
	now := Micros(p.Now)
	// Due by the latest of now and the CreatedAts (since the former code,
	// which took now alone: issue 19, TestSharedCallInstancesGoReady).
	dueBy := now
	for _, in := range p.Instances {
		dueBy = max(dueBy, Micros(in.CreatedAt))
	}
	ids = make([]string, n)
	var idSeen, keySeen map[string]struct{}
	flags := ""
	for i, in := range p.Instances {
		if err := in.Validate(); err != nil {
			return nil, nil, err
		}
		ids[i] = EncodeID(in.ID)
		if n > 1 && !strings.Contains(flags, "r") {
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
	type bucket struct {
		kind, sec string
		count     int
		part      []byte
	}
	var (
		// The header since the script stopped packing it (issue 19, r8b).
		hist       = appendMsgpackStr(appendMsgpackInt([]byte{0xa1, 'e'}, now), p.Node)
		classes    []enqueueClass
		classNum   = map[enqueueClass]string{}
		buckets    []*bucket
		bucketOf   = map[[2]string]*bucket{}
		runs       = make([]string, 0, 3*n+2)
		runClass   = ""
		runCount   = 0
		runAt      = -1 // where the current run's count goes in runs
		lastLabels []string
		lastLane   string
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
		num, ok := classNum[cl]
		if !ok {
			classes = append(classes, cl)
			num = itoa(len(classes))
			classNum[cl] = num
		}
		if num != runClass || runAt < 0 {
			if runAt >= 0 {
				runs[runAt] = itoa(runCount)
			}
			runs = append(runs, num, "")
			runClass, runCount, runAt = num, 0, len(runs)-1
		}
		runCount++
		id := ids[i]
		hist = appendMsgpackStr(hist, id)
		bk := [2]string{in.Kind, strconv.FormatInt(cl.sec, 10)}
		b := bucketOf[bk]
		if b == nil {
			b = &bucket{kind: bk[0], sec: bk[1]}
			bucketOf[bk] = b
			buckets = append(buckets, b)
		}
		b.count++
		b.part = append(b.part, byte(len(id)>>8), byte(len(id)))
		b.part = append(b.part, id...)
		place := strconv.FormatInt(runat, 10)
		if cl.due {
			place = be7(runat)
		}
		runs = append(runs, EncodeSpec(in), place)
		if cl.x {
			runs = append(runs, tail)
		}
		if cl.u {
			runs = append(runs, in.UniqueKey, us(in.UniqueUntil))
		}
	}
	if runAt >= 0 {
		runs[runAt] = itoa(runCount)
	}
	args = make([]string, 0, 7+n+6*len(classes)+4*len(buckets)+len(runs))
	args = append(args, strconv.FormatInt(now, 10), p.Node, itoa(n), flags, itoa(len(classes)), itoa(len(buckets)), string(hist))
	args = append(args, ids...)
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
		args = append(args, b.kind, b.sec, itoa(b.count), string(b.part))
	}
	args = append(args, runs...)
	return args, ids, nil
}

// be7 is lib.lua's be(us, 7): us (0 when negative) in 7 big-endian bytes,
// as ready-list entries begin.
func be7(us int64) string {
	if us < 0 {
		us = 0
	}
	var b [7]byte
	for i := 6; i >= 0; i-- {
		b[i] = byte(us)
		us >>= 8
	}
	return string(b[:])
}

// randomUUID is a random ID in UUID form (canonical, lowercase).
func randomUUID(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return formatUUID(string(b[:]))
}
