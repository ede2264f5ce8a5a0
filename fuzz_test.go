package job

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// cronSeeds are specs that once crashed the process or were accepted when
// they should not have been, plus ordinary ones.
var cronSeeds = []string{
	"TZ=", "TZ=UTC", "CRON_TZ=Europe/Paris", "CRON_TZ=", "TZ= ", "TZ=UTC @every 1m",
	"@every 1ns", "@every 999ms", "@every 1s", "@every 1h30m", "@every -5s",
	"* * * * * *", "*/5 * * * *", "0 9 * * 1-5", "CRON_TZ=Europe/Paris 0 9 * * 1-5",
	"TZ=America/New_York 30 2 * * *", "0 0 29 2 *", "0 0 30 2 *", "@hourly", "@yearly",
	"", "@", "61 * * * *", "*/0 * * * *", "1-0 * * * *", "0 0 * * 8", "? ? ? ? ?",
}

// FuzzCronSpec checks that no spec crashes WithCronSpec, that every error
// wraps ErrInvalidJob, and that an accepted schedule ticks no more often
// than MinInterval and the same on every manager: the next tick is after
// the time asked and does not depend on that time's location.
func FuzzCronSpec(f *testing.F) {
	for _, s := range cronSeeds {
		f.Add(s, int64(1_700_000_000_123_456_789))
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, spec string, nanos int64) {
		j := &Job{kind: "k"}
		err := WithCronSpec(spec).applyJob(j)
		if err != nil {
			if !errors.Is(err, ErrInvalidJob) {
				t.Fatalf("WithCronSpec(%q): %v, want ErrInvalidJob", spec, err)
			}
			return
		}
		r := j.recurring
		if r == nil || r.next == nil {
			t.Fatalf("WithCronSpec(%q) accepted without a schedule", spec)
		}
		if r.period < MinInterval {
			t.Fatalf("WithCronSpec(%q): period %v < MinInterval", spec, r.period)
		}
		if r.tickHold() < time.Minute {
			t.Fatalf("WithCronSpec(%q): tick hold %v", spec, r.tickHold())
		}
		// Times from 1970 to 2200, where ticks fit in UnixNano.
		after := time.Unix(0, 0).Add(time.Duration(uint64(nanos) % uint64(230*365*24*time.Hour))).UTC()
		n1 := r.next(after)
		if n1.IsZero() {
			return // robfig/cron looks five years ahead at most
		}
		if !n1.After(after) {
			t.Fatalf("WithCronSpec(%q): next(%v) = %v, not after", spec, after, n1)
		}
		if n2 := r.next(after.In(paris)); !n2.Equal(n1) {
			t.Fatalf("WithCronSpec(%q): next(%v) = %v in UTC but %v in Paris", spec, after, n1, n2)
		}
		if n2 := r.next(n1); !n2.IsZero() && n2.Sub(n1) < MinInterval {
			t.Fatalf("WithCronSpec(%q): ticks %v and %v closer than MinInterval", spec, n1, n2)
		}
	})
}

// FuzzScheduleJob schedules instances with arbitrary arguments (a JSON
// array) and option values, on executors of several signatures, and checks
// that ScheduleJob never panics, that a refusal is an invalid-arguments or
// invalid-option error (or a held unique key), and that what it accepted
// is stored as given and decodes into the executor's parameters, so an
// accepted instance never fails at run time for its arguments.
func FuzzScheduleJob(f *testing.F) {
	type point struct {
		X, Y int
		Tags []string `json:",omitempty"`
	}
	execs := []any{
		func() {},
		func(n int, s string) {},
		func(ctx context.Context, p point) error { return nil },
		func(m map[string]float64, b []byte) {},
		func(ji Instance, xs ...uint8) {},
		func(p *point, a any, u uint32) {},
	}
	s, err := memdbstore.New()
	if err != nil {
		f.Fatal(err)
	}
	m, err := NewManager(WithStore(s))
	if err != nil {
		f.Fatal(err)
	}
	for i, e := range execs {
		if err := m.RegisterJob(mustNewJob(f, WithKind(kindName(i)), WithExecutor(e))); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(uint8(1), []byte(`[1,"a"]`), int64(0), int64(0), int64(0), 0, 0, "")
	f.Add(uint8(2), []byte(`[{"X":1,"Y":-2,"Tags":["t"]}]`), int64(time.Hour), int64(time.Second), int64(time.Minute), 5, -1, "k1")
	f.Add(uint8(3), []byte(`[{"a":1.5},"aGk="]`), int64(-1), int64(-1), int64(-1), -2, -2, "k1")
	f.Add(uint8(4), []byte(`[1,2,255,256]`), int64(1<<62), int64(1<<62), int64(1<<62), 1<<40, 1<<40, "")
	f.Add(uint8(5), []byte(`[null,{"z":[]},4294967295]`), int64(0), int64(0), int64(0), 0, 0, "")
	f.Add(uint8(1), []byte(`[1.5,"a"]`), int64(0), int64(0), int64(0), 0, 0, "")
	f.Add(uint8(0), []byte(`not json`), int64(0), int64(0), int64(0), 0, 0, "")
	f.Fuzz(func(t *testing.T, which uint8, argJSON []byte, after, jitter, timeout int64, prio, retries int, key string) {
		kind := kindName(int(which) % len(execs))
		var args []any
		if json.Unmarshal(argJSON, &args) != nil {
			args = []any{string(argJSON)}
		}
		opts := []ScheduleOption{
			WithArguments(args...),
			WithScheduleAfter(time.Duration(after)),
			WithJitter(time.Duration(jitter)),
			WithTimeout(time.Duration(timeout)),
			WithPriority(Priority(prio)),
			WithMaxRetries(retries),
		}
		if key != "" {
			opts = append(opts, WithUniqueKey(key, time.Minute))
		}
		before := time.Now()
		ji, err := m.ScheduleJob(context.Background(), kind, opts...)
		if err != nil {
			if !errors.Is(err, ErrInvalidArguments) && !errors.Is(err, ErrInvalidOption) && !errors.Is(err, ErrDuplicate) {
				t.Fatalf("ScheduleJob(%s, %s): %v, want an invalid-arguments or invalid-option error", kind, argJSON, err)
			}
			return
		}
		recs, err := s.LookupInstances(context.Background(), &store.Query{InstanceID: ji.ID})
		if err != nil || len(recs) != 1 {
			t.Fatalf("lookup of scheduled %s: %v, %d records", ji.ID, err, len(recs))
		}
		rec := recs[0]
		if rec.RunAt.Before(before) {
			t.Fatalf("scheduled after %v, jitter %v: RunAt %v is before the call (%v)", time.Duration(after), time.Duration(jitter), rec.RunAt, before)
		}
		if !rec.RunAt.Equal(ji.RunAt) {
			t.Fatalf("stored RunAt %v, ScheduleJob returned %v", rec.RunAt, ji.RunAt)
		}
		j, _ := m.reg.get(kind)
		if _, err := j.exec.decodeArgs(rec.Args); err != nil {
			t.Fatalf("ScheduleJob accepted %s for %s but the stored arguments %s do not decode: %v", argJSON, kind, rec.Args, err)
		}
		if rec.Priority != prio || rec.MaxRetries != retries || rec.Timeout != time.Duration(timeout) {
			t.Fatalf("stored priority %d, retries %d, timeout %v; scheduled %d, %d, %v", rec.Priority, rec.MaxRetries, rec.Timeout, prio, retries, time.Duration(timeout))
		}
	})
}

func kindName(i int) string { return "k" + strings.Repeat("x", i) }

func mustNewJob(tb testing.TB, opts ...JobOption) *Job {
	tb.Helper()
	j, err := NewJob(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return j
}
