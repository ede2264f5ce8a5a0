package redisstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store"
)

// TestPartitionedRescueFollowsPartitionZero: each partition keeps a node
// registry of its own, fed by the heartbeats every partition receives,
// and partition 0's alone judges liveness. A node whose heartbeats reach
// another partition late (its registry there looks stale) is alive while
// partition 0 says so: its attempts there were rescued, while it ran
// them, by a RescueNodes call that declared nobody dead. And a node
// partition 0 declared dead in a call that ran out of Limit before it
// reached the other partitions has its attempts there rescued by the
// next calls.
func TestPartitionedRescueFollowsPartitionZero(t *testing.T) {
	c := client(t)
	ctx := t.Context()
	ns := fmt.Sprintf("follow-%d", time.Now().UnixNano())
	s := newPartitioned(t, c, ns, 2)
	now := time.Now()
	hb := func(node string) {
		t.Helper()
		if _, err := s.Heartbeat(ctx, &store.HeartbeatParams{Node: store.NodeInfo{ID: node}, Now: now, DeadAfter: time.Second, Retain: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	hb("x")
	hb("r")
	// Two Enqueue calls, placed by their first IDs: fz-0-0 and fz-1-0 hash
	// to different partitions of 2 (checked below).
	var all []string
	for call := range 2 {
		var ins []*store.Instance
		for i := range 3 {
			id := fmt.Sprintf("fz-%d-%d", call, i)
			all = append(all, id)
			ins = append(ins, &store.Instance{ID: id, Kind: "k", Queue: "q", RunAt: now, CreatedAt: now, MaxRetries: 3})
		}
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins, Node: "n", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	claimed := 0
	for range 10 {
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: "x", Limit: 6, Now: now, LeaseUntil: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if claimed += len(res.Instances); claimed == len(all) {
			break
		}
	}
	if claimed != len(all) {
		t.Fatalf("claimed %d of %d", claimed, len(all))
	}
	parts := map[int]int{}
	for _, id := range all {
		p, ok, err := s.PartitionOf(ctx, id)
		if err != nil || !ok {
			t.Fatalf("partition of %s: %v %v", id, ok, err)
		}
		parts[p]++
	}
	if parts[0] == 0 || parts[1] == 0 {
		t.Fatalf("instances by partition %v; want some in each", parts)
	}
	// Age x's last heartbeat in one partition's registry.
	age := func(tag string) {
		t.Helper()
		key := "jobkit:{" + tag + "}:nlive"
		if _, err := c.ZScore(ctx, key, "x").Result(); err != nil {
			t.Fatalf("node x in %s: %v (has the registry's layout changed?)", key, err)
		}
		if err := c.ZAddXX(ctx, key, redis.Z{Score: float64(time.Now().Add(-time.Minute).UnixMicro()), Member: "x"}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rescue := func(limit int) *store.RescueNodesResult {
		t.Helper()
		res, err := s.RescueNodes(ctx, &store.RescueNodesParams{Node: "r", Now: now, DeadAfter: time.Second, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	age(ns + "#p1")
	if res := rescue(100); len(res.Dead) != 0 || len(res.Rescued) != 0 {
		var got []string
		for _, in := range res.Rescued {
			got = append(got, in.ID)
		}
		t.Fatalf("partition 1 alone saw x stale: declared %v and rescued %v; want nothing (partition 0 holds x alive)", res.Dead, got)
	}

	age(ns)
	first := rescue(1)
	if !slices.Equal(first.Dead, []string{"x"}) || len(first.Rescued) != 1 {
		t.Fatalf("first rescue declared %v and rescued %d; want [x] and 1 (its limit)", first.Dead, len(first.Rescued))
	}
	got := []string{first.Rescued[0].ID}
	for range 5 {
		res := rescue(100)
		if len(res.Dead) != 0 {
			t.Fatalf("x declared dead again: %v", res.Dead)
		}
		for _, in := range res.Rescued {
			got = append(got, in.ID)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, all) {
		t.Fatalf("rescued %v; want each of %v once", got, all)
	}
}
