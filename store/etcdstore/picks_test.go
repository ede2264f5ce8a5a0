package etcdstore

import (
	"slices"
	"testing"
)

// TestHeadBiasedPicks: contended claims draw distinct, ordered indexes
// inside the window, favouring its head: over many draws from a window of
// 130, the first 8 are drawn far more often than a uniform draw would
// (6 %), so rescued attempts at the head of a busy queue are taken soon.
func TestHeadBiasedPicks(t *testing.T) {
	const n, need, rounds = 130, 2, 5000
	head := 0
	for range rounds {
		got := headBiasedPicks(n, need)
		if len(got) != need || !slices.IsSorted(got) || got[0] < 0 || got[need-1] >= n || got[0] == got[1] {
			t.Fatalf("headBiasedPicks(%d, %d) = %v: want %d distinct sorted indexes below %d", n, need, got, need, n)
		}
		for _, ix := range got {
			if ix < 8 {
				head++
			}
		}
	}
	if share := float64(head) / (rounds * need); share < 0.15 {
		t.Fatalf("the first 8 of %d were drawn %.1f%% of the time, want at least 15%% (uniform is 6%%)", n, 100*share)
	}
	for _, c := range [][2]int{{4, 3}, {3, 1}, {10, 5}} {
		got := headBiasedPicks(c[0], c[1])
		if len(got) != c[1] || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != c[1] || got[len(got)-1] >= c[0] {
			t.Fatalf("headBiasedPicks(%d, %d) = %v", c[0], c[1], got)
		}
	}
}
