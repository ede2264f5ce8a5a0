package storetest

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testProgress pins store.Progress: the lease owner's running attempt
// sets its progress, which every handle reads back; anyone else, another
// attempt, an instance not Processing is refused with ErrLeaseLost and
// changes nothing; a fraction outside [0, 1] or a message too long is
// ErrInvalid; the last progress outlives the attempt and goes with the
// instance.
func testProgress(t *testing.T, h Harness) {
	e := setup(t, h)
	a, b, c := inst("pg-a", "q-pg"), inst("pg-b", "q-pg"), inst("pg-c", "q-pg-wait")
	e.enqueue(e.s, base, a, b, c)
	e.claimOne(e.s, "q-pg", "w1", at(time.Second), a.ID)
	e.claimOne(e.s, "q-pg", "w1", at(time.Second), b.ID)
	other := e.open()

	set := func(id, owner string, attempt int, f float64, msg string, d time.Duration) error {
		return other.SetProgress(e.ctx, &store.ProgressParams{ID: id, Owner: owner, Attempt: attempt, Fraction: f, Message: msg, Now: at(d)})
	}
	lookup := func(ids ...string) []*store.ProgressRecord {
		t.Helper()
		recs, err := e.s.LookupProgress(e.ctx, ids)
		if err != nil {
			t.Fatalf("LookupProgress(%v): %v", ids, err)
		}
		return recs
	}
	want := func(step string, got []*store.ProgressRecord, w ...store.ProgressRecord) {
		t.Helper()
		if len(got) != len(w) {
			t.Fatalf("%s: LookupProgress returned %d records, want %d: %+v", step, len(got), len(w), got)
		}
		for i := range w {
			g := got[i]
			if g == nil || g.InstanceID != w[i].InstanceID || g.Attempt != w[i].Attempt || g.Fraction != w[i].Fraction ||
				g.Message != w[i].Message || !g.Time.Equal(w[i].Time) {
				t.Fatalf("%s: record %d is %+v, want %+v", step, i, g, w[i])
			}
		}
	}

	want("before any report", lookup(a.ID, b.ID, c.ID))
	if err := set(a.ID, "w1", 1, 0.25, "1 of 4 files ✓", 2*time.Second); err != nil {
		t.Fatalf("SetProgress by the lease owner: %v", err)
	}
	want("after one report", lookup(a.ID, b.ID, "pg-missing"),
		store.ProgressRecord{InstanceID: a.ID, Attempt: 1, Fraction: 0.25, Message: "1 of 4 files ✓", Time: at(2 * time.Second)})
	// The next report replaces it; the bounds themselves are accepted.
	long := strings.Repeat("x", store.MaxProgressMessage)
	if err := set(a.ID, "w1", 1, 1.0/3, long, 3*time.Second); err != nil {
		t.Fatalf("SetProgress with a message of MaxProgressMessage bytes: %v", err)
	}
	if err := set(b.ID, "w1", 1, 0, "", 3*time.Second); err != nil {
		t.Fatalf("SetProgress with fraction 0 and no message: %v", err)
	}
	pa := store.ProgressRecord{InstanceID: a.ID, Attempt: 1, Fraction: 1.0 / 3, Message: long, Time: at(3 * time.Second)}
	pb := store.ProgressRecord{InstanceID: b.ID, Attempt: 1, Time: at(3 * time.Second)}
	want("in the order asked", lookup(b.ID, c.ID, a.ID), pb, pa)

	// Refused: not the owner, not the attempt, not Processing, not stored.
	for _, tc := range []struct {
		name, id, owner string
		attempt         int
		want            error
	}{
		{"another owner", a.ID, "w2", 1, store.ErrLeaseLost},
		{"another attempt", a.ID, "w1", 2, store.ErrLeaseLost},
		{"a Scheduled instance", c.ID, "w1", 1, store.ErrLeaseLost},
		{"no such instance", "pg-missing", "w1", 1, store.ErrNotFound},
	} {
		if err := set(tc.id, tc.owner, tc.attempt, 0.9, "no", 4*time.Second); !errors.Is(err, tc.want) {
			t.Fatalf("SetProgress of %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Invalid: bounds.
	for name, p := range map[string]store.ProgressParams{
		"fraction below 0":  {ID: a.ID, Owner: "w1", Attempt: 1, Fraction: -0.01},
		"fraction above 1":  {ID: a.ID, Owner: "w1", Attempt: 1, Fraction: 1.01},
		"fraction NaN":      {ID: a.ID, Owner: "w1", Attempt: 1, Fraction: math.NaN()},
		"message too long":  {ID: a.ID, Owner: "w1", Attempt: 1, Message: long + "y"},
		"message not UTF-8": {ID: a.ID, Owner: "w1", Attempt: 1, Message: "\xff"},
		"no ID":             {Owner: "w1", Attempt: 1},
		"no owner":          {ID: a.ID, Attempt: 1},
		"no attempt":        {ID: a.ID, Owner: "w1"},
	} {
		p.Now = at(4 * time.Second)
		if err := other.SetProgress(e.ctx, &p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("SetProgress with %s: %v, want ErrInvalid", name, err)
		}
	}
	if err := other.SetProgress(e.ctx, nil); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("SetProgress(nil): %v, want ErrInvalid", err)
	}
	want("after refused reports", lookup(a.ID, b.ID), pa, pb)

	// The last report outlives the attempt; a finished one takes no more.
	e.finishOK(e.s, "w1", at(5*time.Second), store.Outcome{ID: a.ID, Attempt: 1, State: store.Completed})
	if err := set(a.ID, "w1", 1, 1, "late", 6*time.Second); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("SetProgress after Finish: %v, want ErrLeaseLost", err)
	}
	want("after Finish", lookup(a.ID), pa)

	// Deleting the instance drops its progress.
	e.del(e.s, a.ID)
	want("after Delete", lookup(a.ID, b.ID), pb)
}
