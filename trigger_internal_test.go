package job

import (
	"testing"
	"time"
)

// TestLatestTick checks the backward search for the last tick of a
// schedule before a time: dense, sparse and irregular schedules, a floor
// that cuts it off, and a floor in the far past.
func TestLatestTick(t *testing.T) {
	every := func(d time.Duration) func(time.Time) time.Time {
		return func(after time.Time) time.Time { return after.Truncate(d).Add(d) }
	}
	weekdays, err := parseCron("TZ=UTC 0 9 * * 1-5")
	if err != nil {
		t.Fatal(err)
	}
	mon := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC) // a Monday
	calls := 0
	counted := func(next func(time.Time) time.Time) func(time.Time) time.Time {
		return func(after time.Time) time.Time { calls++; return next(after) }
	}
	for _, tc := range []struct {
		name        string
		next        func(time.Time) time.Time
		x, floor    time.Time
		want        time.Time
		maxNextCall int
	}{
		{"dense", every(time.Second), mon, mon.Add(-24 * time.Hour), mon, 10},
		{"dense, on a tick boundary", every(time.Second), mon.Add(500 * time.Millisecond), mon.Add(-time.Hour), mon, 10},
		{"hourly, floor cuts it", every(time.Hour), mon.Add(30 * time.Minute), mon.Add(10 * time.Minute), time.Time{}, 10},
		{"hourly, floor before", every(time.Hour), mon.Add(30 * time.Minute), mon.Add(-time.Minute), mon, 10},
		{"weekdays over a weekend", weekdays, mon.Add(-4 * time.Hour), mon.Add(-30 * 24 * time.Hour), time.Date(2026, 2, 27, 9, 0, 0, 0, time.UTC), 40},
		{"floor in the far past, no tick", func(time.Time) time.Time { return time.Time{} }, mon, time.Time{}, time.Time{}, 200},
	} {
		calls = 0
		got := latestTick(counted(tc.next), tc.x, tc.floor)
		if !got.Equal(tc.want) {
			t.Errorf("%s: latest tick %v, want %v", tc.name, got, tc.want)
		}
		if calls > tc.maxNextCall {
			t.Errorf("%s: %d calls of next, want at most %d", tc.name, calls, tc.maxNextCall)
		}
	}
}
