package wire

import (
	"fmt"
	"strconv"

	"github.com/jobkit/job/store"
)

// flatLimits lays ls out for the keyed encoding: kind, queue and max of
// each, in turn.
func flatLimits(ls []store.ConcurrencyLimit) []string {
	out := make([]string, 0, 3*len(ls))
	for _, l := range ls {
		out = append(out, l.Kind, l.Queue, strconv.Itoa(l.Max))
	}
	return out
}

// unflatLimits reads what flatLimits laid out.
func unflatLimits(flat []string) ([]store.ConcurrencyLimit, error) {
	if len(flat)%3 != 0 {
		return nil, fmt.Errorf("%w: concurrency limits: %d strings, want kind, queue and max of each", store.ErrInvalid, len(flat))
	}
	out := make([]store.ConcurrencyLimit, 0, len(flat)/3)
	for i := 0; i < len(flat); i += 3 {
		m, err := strconv.Atoi(flat[i+2])
		if err != nil {
			return nil, fmt.Errorf("%w: concurrency limit of kind %q in queue %q: max %q", store.ErrInvalid, flat[i], flat[i+1], flat[i+2])
		}
		out = append(out, store.ConcurrencyLimit{Kind: flat[i], Queue: flat[i+1], Max: m})
	}
	return out, nil
}

// perKeyIndexes returns the indexes in ls of the per-key limits, as
// decimal strings.
func perKeyIndexes(ls []store.ConcurrencyLimit) []string {
	var out []string
	for i, l := range ls {
		if l.PerKey {
			out = append(out, strconv.Itoa(i))
		}
	}
	return out
}

// setPerKey marks the limits of ls that perKeyIndexes named.
func setPerKey(ls []store.ConcurrencyLimit, ix []string) error {
	for _, s := range ix {
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(ls) {
			return fmt.Errorf("%w: per-key limit index %q; want one of the %d concurrency limits", store.ErrInvalid, s, len(ls))
		}
		ls[i].PerKey = true
	}
	return nil
}
