package redisscript

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jobkit/job/store"
)

// counts reads the cnt hash (see lua/lib.lua) in one script run, so the
// counts are those of one moment: O(groups × states), however many
// instances are stored.
func (c *Core) counts(ctx context.Context) (map[[2]string]*store.GroupCount, error) {
	v, err := c.run(ctx, InspectCounts)
	if err != nil {
		return nil, err
	}
	flat := asArray(v)
	out := map[[2]string]*store.GroupCount{}
	for i := 0; i+1 < len(flat); i += 2 {
		f := asString(flat[i])
		if len(f) < 3 || f[0] < '1' || f[0] > '7' {
			return nil, fmt.Errorf("%w: %s: counts: malformed counter field %q", store.ErrCorrupt, c.name, f)
		}
		n := int(binary.BigEndian.Uint16([]byte(f[1:3])))
		if len(f) < 3+n {
			return nil, fmt.Errorf("%w: %s: counts: malformed counter field %q", store.ErrCorrupt, c.name, f)
		}
		queue, kind := f[3:3+n], f[3+n:]
		val := asInt(flat[i+1])
		k := [2]string{queue, kind}
		g := out[k]
		if g == nil {
			g = &store.GroupCount{Queue: queue, Kind: kind}
			out[k] = g
		}
		g.States[f[0]-'0'] += val
	}
	return out, nil
}

// Counts implements store.Inspector from the cnt hash, which every script
// that changes a state updates in the same run (count_move in lib.lua).
func (c *Core) Counts(ctx context.Context, p *store.CountsParams) ([]store.GroupCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	all, err := c.counts(ctx)
	if err != nil {
		return nil, err
	}
	var out []store.GroupCount
	for _, g := range all {
		if (p.Queue == "" || g.Queue == p.Queue) && (p.Kind == "" || g.Kind == p.Kind) {
			out = append(out, *g)
		}
	}
	slices.SortFunc(out, func(a, b store.GroupCount) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Kind, b.Kind))
	})
	return out, nil
}

// Lag implements store.Inspector with the inspect_lag script, one call
// for the queues asked about. A queue's lag is exact: the script reads the
// head of each of its ready lists and the due part of its scheduled set.
// A kind's is found among the first 1000 entries of each list (and 1000
// due ones); a kind whose oldest ready instance waits deeper than that in
// every list of its queue reports nothing ready there. A queue of one kind
// costs one read of each list's head.
func (c *Core) Lag(ctx context.Context, p *store.LagParams) (*store.LagResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	groups, oldest, err := c.lagOldest(ctx, p)
	if err != nil {
		return nil, err
	}
	var b store.LagBuilder
	for _, g := range groups {
		if p.Kind != "" && g.Kind != p.Kind {
			continue
		}
		b.Add(g.Queue, g.Kind, oldest[[2]string{g.Queue, g.Kind}])
	}
	return b.Result(p.Now), nil
}

// lagOldest returns the groups of p.Queue (every queue when empty) and
// the oldest ready time of each (queue, kind) that has a ready instance.
func (c *Core) lagOldest(ctx context.Context, p *store.LagParams) ([]store.GroupCount, map[[2]string]time.Time, error) {
	groups, err := c.Counts(ctx, &store.CountsParams{Queue: p.Queue}) // every kind: a queue's walk needs them all
	if err != nil {
		return nil, nil, err
	}
	// The queues, each followed by how many kinds it has (groups are
	// ordered by queue).
	var queues []string
	for _, g := range groups {
		if len(queues) == 0 || queues[len(queues)-2] != g.Queue {
			queues = append(queues, g.Queue, "0")
		}
		n, _ := strconv.Atoi(queues[len(queues)-1])
		queues[len(queues)-1] = strconv.Itoa(n + 1)
	}
	oldest := map[[2]string]time.Time{}
	if len(queues) > 0 {
		v, err := c.run(ctx, InspectLag, append([]string{strconv.FormatInt(Micros(p.Now), 10)}, queues...)...)
		if err != nil {
			return nil, nil, err
		}
		a := asArray(v)
		for i := 0; i+1 < len(a); i += 2 {
			q := asString(a[i])
			kv := asArray(a[i+1])
			for j := 0; j+1 < len(kv); j += 2 {
				us, err := strconv.ParseInt(asString(kv[j+1]), 10, 64)
				if err != nil {
					return nil, nil, fmt.Errorf("%w: %s: lag: malformed reply: %v", store.ErrCorrupt, c.name, err)
				}
				oldest[[2]string{q, asString(kv[j])}] = FromMicros(us)
			}
		}
	}
	return groups, oldest, nil
}

// PageInstances implements store.Inspector.
func (c *Core) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	return store.PageInstances(ctx, c.keys.Prefix, c.LookupInstances, q)
}

// PageHistory implements store.Inspector.
func (c *Core) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	return store.PageHistory(ctx, c.keys.Prefix, c.LookupHistory, q)
}

// PageLogs implements store.Inspector.
func (c *Core) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	return store.PageLogs(ctx, c.keys.Prefix, c.LookupLogs, q)
}
