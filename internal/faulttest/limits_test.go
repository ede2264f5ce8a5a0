package faulttest_test

import (
	"testing"
	"time"

	"github.com/jobkit/job/internal/faulttest"
)

// TestLimitAccuracy: a cluster-wide concurrency limit of 10 holds across
// three worker processes of 8 workers each (issue 36, Measure): the
// store never counts more than 10 Processing and never more than 10
// executors run at once, and the limit is reached.
func TestLimitAccuracy(t *testing.T) {
	for _, name := range []string{"redis", "pg"} {
		t.Run(name, func(t *testing.T) {
			storePeak, runPeak := faulttest.LimitAccuracy(t, specs[name](t), 3000, 10, 5*time.Millisecond)
			if runPeak < 10 {
				t.Errorf("at most %d executors ran at once (store %d): the limit of 10 was never reached with 24 workers", runPeak, storePeak)
			}
		})
	}
}
