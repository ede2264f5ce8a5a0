package scripttest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/internal/redisscript"
)

// TestEnqueueHistoryHeaderIsCmsgpacks: the history entry of an enqueue
// starts with the bytes Redis's own cmsgpack.pack('e', now, node)
// writes, for every width MessagePack gives now and node, both when the
// Go side sends the header (every instance stored) and when the script
// builds the entry itself (an instance that existed already).
func TestEnqueueHistoryHeaderIsCmsgpacks(t *testing.T) {
	core, r := hookCore(t)
	ctx := context.Background()
	hist := core.Keys().Script[3]
	nows := []int64{1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, time.Date(2026, 11, 24, 10, 0, 0, 123456000, time.UTC).UnixMicro()}
	nodes := []string{"", "n", strings.Repeat("a", 31), strings.Repeat("b", 32), strings.Repeat("c", 255), strings.Repeat("d", 256)}
	for k, us := range nows {
		node := nodes[k%len(nodes)]
		now := time.UnixMicro(us)
		want, err := r.c.Eval(ctx, "return cmsgpack.pack('e', tonumber(ARGV[1]), ARGV[2])", nil, us, node).Text()
		if err != nil {
			t.Fatal(err)
		}
		in := func(i int) *store.Instance {
			return &store.Instance{ID: fmt.Sprintf("header-%d-%d", k, i), Kind: "k", Queue: "q", Args: []byte(`[1]`), RunAt: now, CreatedAt: now, MaxRetries: 1}
		}
		a, b := in(1), in(2)
		for _, call := range [][]*store.Instance{{a}, {a, b}} { // the second: a exists, the script builds the entry
			if _, err := core.Enqueue(ctx, &store.EnqueueParams{Instances: call, Node: node, Now: now}); err != nil {
				t.Fatal(err)
			}
			last, err := r.c.XRevRangeN(ctx, hist, "+", "-", 1).Result()
			if err != nil || len(last) != 1 {
				t.Fatalf("history: %v, %v", last, err)
			}
			got, _ := last[0].Values["r"].(string)
			if !strings.HasPrefix(got, want) {
				t.Fatalf("now %d µs, node of %d bytes, %d instances: entry starts %x, want cmsgpack's %x", us, len(node), len(call), got[:min(len(got), len(want))], want)
			}
			if ids := got[len(want):]; len(call) == 2 && ids != msgpackStr(redisscript.EncodeID(b.ID)) {
				t.Fatalf("now %d µs, 2 instances, one existing: entry's IDs %x, want b's alone", us, ids)
			}
		}
	}
}

// msgpackStr is s as a MessagePack str of up to 31 bytes (an encoded ID).
func msgpackStr(s string) string { return string([]byte{byte(0xa0 | len(s))}) + s }
