package memdbstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// TestKeyedLimitsLeaveNoIdleKeys: 10,000 distinct keys (12,000
// instances) with a limit of one each run through claims, retries, hand-backs, rescues and deletes;
// once none runs, the per-key counts hold nothing (no state per idle
// key).
func TestKeyedLimitsLeaveNoIdleKeys(t *testing.T) {
	t.Parallel()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const keys, total = 10_000, 12_000
	var ins []*store.Instance
	for i := range total { // a second instance for every fifth key
		ins = append(ins, &store.Instance{ID: fmt.Sprintf("i%05d", i), Kind: "k", Queue: "q", LimitKey: fmt.Sprintf("key-%05d", i%keys), RunAt: t0, CreatedAt: t0, MaxRetries: 3})
	}
	for i := 0; i < len(ins); i += 1000 {
		if _, err := s.Enqueue(ctx, &store.EnqueueParams{Instances: ins[i:min(i+1000, total)], Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	lim := []store.ConcurrencyLimit{{Kind: "k", Max: 1, PerKey: true}}
	now := t0.Add(time.Second)
	claim := func(owner string, at time.Time) []*store.Instance {
		t.Helper()
		res, err := s.Claim(ctx, &store.ClaimParams{Queue: "q", Owner: owner, Limit: 1000, Now: at, LeaseUntil: at.Add(time.Minute), Limits: lim})
		if err != nil {
			t.Fatal(err)
		}
		return res.Instances
	}
	done, round := 0, 0
	for done < total {
		round++
		if round > 200 {
			t.Fatalf("%d of %d done after %d rounds", done, total, round)
		}
		got := claim("w", now)
		if len(got) == 0 {
			t.Fatalf("round %d: nothing claimed with %d of %d done (%d keys counted running)", round, done, total, len(s.t.keyRun))
		}
		var outs []store.Outcome
		for j, in := range got {
			switch {
			case in.Attempt == 1 && j%4 == 1: // retried at once
				outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: now, Error: "again"})
			case in.Attempt == 1 && j%4 == 2: // handed back
				outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Scheduled, RunAt: now, Release: true})
			case in.Attempt == 1 && j%4 == 3: // left to lapse: rescued below
			case j%7 == 5:
				if _, err := s.Delete(ctx, &store.DeleteParams{IDs: []string{in.ID}, Now: now}); err != nil {
					t.Fatal(err)
				}
				done++
			default:
				outs = append(outs, store.Outcome{ID: in.ID, Attempt: in.Attempt, State: store.Completed})
				done++
			}
		}
		if _, err := s.Finish(ctx, &store.FinishParams{Owner: "w", Now: now, Outcomes: outs}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Rescue(ctx, &store.RescueParams{Now: now.Add(2 * time.Minute), Limit: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.t.keyRun); n != 0 {
		t.Fatalf("after every instance ended, %d keys still counted", n)
	}
}
