package schedule_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobkit/job/schedule"
)

func TestSpecNextInterval(t *testing.T) {
	tr := schedule.Spec{Interval: 90 * time.Second}
	from := time.Date(2026, 5, 6, 7, 8, 9, 0, time.FixedZone("X", 3600))
	got, err := tr.NextTimes(from, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g.UnixNano()%int64(90*time.Second) != 0 || !g.After(from) || g.Location() != time.UTC {
			t.Errorf("tick %d %v: want a multiple of 90s since the epoch, after %v, in UTC", i, g, from)
		}
		if i > 0 && g.Sub(got[i-1]) != 90*time.Second {
			t.Errorf("ticks %v and %v are not 90s apart", got[i-1], g)
		}
	}
	// Before the epoch too, ticks are multiples and strictly after.
	pre := time.Unix(-100, 0)
	n, err := tr.Next(pre, nil)
	if err != nil || n != time.Unix(-90, 0).UTC() {
		t.Errorf("Next(%v) = %v, %v; want %v", pre, n, err, time.Unix(-90, 0).UTC())
	}
	if n, _ := tr.Next(time.Unix(0, 0), nil); !n.Equal(time.Unix(90, 0)) {
		t.Errorf("Next on a tick: %v, want the following tick", n)
	}
}

func TestSpecNextCronZone(t *testing.T) {
	tr := schedule.Spec{Cron: "30 9 * * *", TimeZone: "America/New_York"}
	ny, _ := time.LoadLocation("America/New_York")
	from := time.Date(2026, 3, 7, 15, 0, 0, 0, time.UTC) // 10:00 in New York, the day before DST
	got, err := tr.NextTimes(from, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{time.Date(2026, 3, 8, 9, 30, 0, 0, ny), time.Date(2026, 3, 9, 9, 30, 0, 0, ny)}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("tick %d: %v, want %v", i, got[i], want[i])
		}
	}
	// No zone: UTC, whatever the location of the time given.
	utc := schedule.Spec{Cron: "0 12 * * *"}
	n, _ := utc.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, ny), nil)
	if !n.Equal(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("zone-less cron: %v, want noon UTC", n)
	}
	if _, err := (schedule.Spec{}).Next(from, nil); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("Next without a schedule: %v, want ErrInvalid", err)
	}
}
