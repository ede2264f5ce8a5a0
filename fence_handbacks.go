package job

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultFencedHandBacks is how many times in a row an attempt stopped by
// a fence is handed back without being counted (WithFencedHandBacks).
const DefaultFencedHandBacks = 3

// WithFencedHandBacks sets how many times in a row an instance's attempt
// stopped by a fence is handed back without being counted. A fence cancels
// an attempt whose lease could not be renewed in time, or every attempt of
// a node whose heartbeats failed; an executor that returns on that cancel
// is handed back (Scheduled at once, the attempt not counted), since the
// fault was the store's or the network's, not the job's. When the fault
// keeps hitting one instance (its renewals always fail or always take too
// long, while its claims and outcomes go through) and it runs longer than
// its lease, that would hand it back for ever; so the fence after n
// hand-backs in a row counts the attempt as failed (retried after its
// backoff, or Terminated when out of retries, with an error wrapping
// ErrLeaseLost). Any other outcome, a rescue or a Stop's hand-back ends
// the row. Defaults to DefaultFencedHandBacks; 0 counts every attempt a
// fence stops. An attempt fenced before its executor started is handed
// back whatever the count: it did not run.
//
// The count is read from the instance's last error, which the store keeps
// with the record ("handed back (fence 2 in a row): ..."), so it holds
// across managers and restarts.
func WithFencedHandBacks(n int) ManagerOption {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: %d fenced hand-backs, want 0 (every fenced attempt counts) or more", ErrInvalidOption, n)
		}
		c.fencedHandBacks, c.fencedHandBacksSet = n, true
		return nil
	}
}

// fencedHandBackPrefix starts the error of an attempt handed back by a
// fence that stopped it; the number of such hand-backs in a row follows.
const fencedHandBackPrefix = "handed back (fence "

// fenceWhy says which fence stopped a.
func (a *attempt) fenceWhy() string {
	if a.settled.Load() == settledLeaseFenced {
		return "its lease could not be renewed in time"
	}
	return "the node fenced itself: its heartbeats failed"
}

// fencedHandBackError is the error of a fenced attempt handed back, the
// n-th fenced hand-back in a row; n is 0 for one that did not run and
// follows none.
func (a *attempt) fencedHandBackError(n int) string {
	if n <= 0 {
		return "handed back: " + ErrLeaseLost.Error() + " (" + a.fenceWhy() + ")"
	}
	return fencedHandBackPrefix + strconv.Itoa(n) + " in a row): " + ErrLeaseLost.Error() + " (" + a.fenceWhy() + ")"
}

// fencedHandBacksBefore reads how many fenced hand-backs in a row came
// just before an attempt from the error its instance was claimed with
// (the previous outcome's); 0 when that was anything else.
func fencedHandBacksBefore(lastErr string) int {
	rest, ok := strings.CutPrefix(lastErr, fencedHandBackPrefix)
	if !ok {
		return 0
	}
	num, _, ok := strings.Cut(rest, " in a row): "+ErrLeaseLost.Error()+" (")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// fencedRun is what becomes of an attempt a fence stopped: handed back
// with the error handBack, or, past the cap on fenced hand-backs in a
// row, counted, failed with the error counted.
func (m *Manager) fencedRun(a *attempt) (handBack string, counted error) {
	n := fencedHandBacksBefore(a.rec.Error) + 1
	if n <= m.cfg.fencedHandBacks {
		return a.fencedHandBackError(n), nil
	}
	return "", fmt.Errorf("%w (%s): stopped by a fence %d times in a row, so this attempt counts (WithFencedHandBacks)", ErrLeaseLost, a.fenceWhy(), n)
}

// fenceReason is the reason observers are given for a fenced attempt
// whose outcome the store did not take. A fenced attempt is reported once,
// with its outcome: finished when the store took it (it still held the
// lease), its lease lost for the fence otherwise.
func (a *attempt) fenceReason() LeaseLostReason {
	if a.settled.Load() == settledLeaseFenced {
		return LeaseLostFence
	}
	return LeaseLostNode
}
