package redisscript

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/jobkit/job/store"
)

// keepCutoff turns KeepFinished over the whole partitioned namespace into
// a FinishedAt bound: the FinishedAt of the keep-th most recently
// finished instance of all partitions (zero when fewer are finished).
// Removing what finished before it in every partition keeps the keep
// most recently finished (and any that finished at the same
// microsecond). It reads, in each partition, the newest keep members of
// the done list of every final state and of the late set (see
// lua/prune.lua: a done-list member is the FinishedAt in 7 big-endian
// bytes of microseconds, then the ID; the late set scores members by
// FinishedAt).
func (p *Partitioned) keepCutoff(ctx context.Context, keep int) (time.Time, error) {
	finals := []store.State{store.Completed, store.Terminated, store.Canceled, store.TimedOut}
	times := make([][]int64, len(p.parts))
	from := strconv.Itoa(-keep)
	err := p.each(func(i int, c *Core) error {
		for _, st := range finals {
			v, err := c.r.Do(ctx, "LRANGE", c.keys.Done(st), from, "-1")
			if err != nil {
				return err
			}
			for _, m := range asArray(v) {
				s := asString(m)
				if len(s) < 7 {
					continue
				}
				var us int64
				for _, b := range []byte(s[:7]) {
					us = us<<8 | int64(b)
				}
				times[i] = append(times[i], us)
			}
		}
		v, err := c.r.Do(ctx, "ZRANGE", c.keys.Late(), from, "-1", "WITHSCORES")
		if err != nil {
			return err
		}
		flat := flatten(asArray(v))
		for j := 1; j < len(flat); j += 2 {
			if us, err := strconv.ParseFloat(asString(flat[j]), 64); err == nil {
				times[i] = append(times[i], int64(us))
			} else if n, ok := flat[j].(int64); ok {
				times[i] = append(times[i], n)
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	all := slices.Concat(times...)
	if len(all) <= keep {
		return time.Time{}, nil
	}
	slices.Sort(all)
	return FromMicros(all[len(all)-keep]), nil
}

// flatten makes a RESP3 reply of pairs ([[member, score], ...]) the flat
// RESP2 form ([member, score, ...]).
func flatten(a []any) []any {
	var out []any
	for _, v := range a {
		if pair, ok := v.([]any); ok {
			out = append(out, pair...)
			continue
		}
		out = append(out, v)
	}
	return out
}
