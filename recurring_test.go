package job_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobkit/job"
)

// TestBadScheduleSpecsRejected checks that a schedule spec robfig/cron
// cannot parse, or one that would tick more often than once a second,
// is an ErrInvalidJob from NewJob, never a panic.
func TestBadScheduleSpecsRejected(t *testing.T) {
	t.Parallel()
	newJob := func(o job.JobOption) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panicked: %v", p)
			}
		}()
		_, err = job.NewJob(job.WithKind("k"), job.WithExecutor(func() {}), o)
		return err
	}
	for _, spec := range []string{
		"TZ=", "TZ=UTC", "CRON_TZ=Europe/Paris", "CRON_TZ=", "TZ= ", "TZ=Nowhere/City 0 9 * * *",
		"@every 1ns", "@every 999ms", "@every 0s", "@every -1s", "TZ=UTC @every 1ns", "TZ=UTC @every 1m",
		"0 0 30 2 *", // February 30th: never fires
		"", " ", "@", "@never",
	} {
		if err := newJob(job.WithCronSpec(spec)); !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("WithCronSpec(%q): %v, want ErrInvalidJob", spec, err)
		}
	}
	for _, d := range []time.Duration{time.Nanosecond, time.Millisecond, 999 * time.Millisecond, -time.Second} {
		if err := newJob(job.WithInterval(d)); !errors.Is(err, job.ErrInvalidJob) {
			t.Errorf("WithInterval(%v): %v, want ErrInvalidJob", d, err)
		}
	}
	for _, spec := range []string{"@every 1s", "@every 1m30s", "* * * * * *", "TZ=UTC 0 9 * * *", "CRON_TZ=Europe/Paris 0 9 * * 1-5", "@daily"} {
		if err := newJob(job.WithCronSpec(spec)); err != nil {
			t.Errorf("WithCronSpec(%q): %v, want accepted", spec, err)
		}
	}
	if err := newJob(job.WithInterval(time.Second)); err != nil {
		t.Errorf("WithInterval(MinInterval): %v", err)
	}
}
