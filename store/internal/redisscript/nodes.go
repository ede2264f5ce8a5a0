package redisscript

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/jobkit/job/store"
)

// Heartbeat implements store.Nodes: the server's TIME, read inside the
// script, is both the clock the node's skew is measured against and the one
// its liveness is judged on.
func (c *Core) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: heartbeat: %w", c.name, err)
	}
	info := p.Node.Clone()
	info.LastSeen = p.Now
	info.StoreSeen, info.Status, info.GoneAt = time.Time{}, 0, time.Time{}
	rec, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("%s: heartbeat: %w", c.name, err)
	}
	leaving := "0"
	if p.Leaving {
		leaving = "1"
	}
	v, err := c.run(ctx, NodesHeartbeat, p.Node.ID, string(rec), leaving, strconv.FormatInt(p.RetainOrDefault().Microseconds(), 10))
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return nil, fmt.Errorf("%s: heartbeat: unexpected reply %v", c.name, v)
	}
	return &store.HeartbeatResult{StoreNow: time.Unix(asInt(a[0]), asInt(a[1])*1000).UTC(), WasDead: asInt(a[2]) == 1}, nil
}

// ListNodes implements store.Nodes.
func (c *Core) ListNodes(ctx context.Context, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: list nodes: %w", c.name, err)
	}
	v, err := c.run(ctx, NodesList)
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return nil, fmt.Errorf("%s: list nodes: unexpected reply %v", c.name, v)
	}
	now := time.Unix(asInt(a[0]), asInt(a[1])*1000).UTC()
	flat := asArray(a[2])
	out := make([]*store.NodeInfo, 0, len(flat)/5)
	var bad []string
	for i := 0; i+4 < len(flat); i += 5 {
		id := asString(flat[i])
		var n store.NodeInfo
		if err := json.Unmarshal([]byte(asString(flat[i+1])), &n); err != nil {
			bad = append(bad, id)
			continue
		}
		n.ID = id
		n.StoreSeen = fromMicros(asFloat(flat[i+2]))
		switch asString(flat[i+3]) {
		case "d":
			n.Status = store.NodeDead
		case "l":
			n.Status = store.NodeLeft
		default:
			n.Status = store.NodeLive
			if now.Sub(n.StoreSeen) > p.DeadAfter {
				n.Status = store.NodeStale
			}
		}
		if n.Status == store.NodeDead || n.Status == store.NodeLeft {
			n.GoneAt = fromMicros(asFloat(flat[i+4]))
		}
		out = append(out, &n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	if len(bad) > 0 {
		return out, fmt.Errorf("%w: %s: list nodes: undecodable node records %v", store.ErrCorrupt, c.name, bad)
	}
	return out, nil
}

// RescueNodes implements store.Nodes.
func (c *Core) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	res, _, err := c.rescueNodes(ctx, p, false, nil)
	return res, err
}

// rescueNodes runs nodes_rescue. Following, the registry here does not
// judge liveness: the nodes in dead (another registry's verdict) are
// declared dead, and the nodes stale here but not in dead are returned as
// candidates.
func (c *Core) rescueNodes(ctx context.Context, p *store.RescueNodesParams, follow bool, dead []string) (*store.RescueNodesResult, []string, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s: rescue nodes: %w", c.name, err)
	}
	args := []string{us(p.Now), p.Node, strconv.FormatInt(p.DeadAfter.Microseconds(), 10), itoa(p.Limit)}
	if follow {
		args = append(append(args, "1"), dead...)
	}
	v, err := c.run(ctx, NodesRescue, args...)
	if err != nil {
		return nil, nil, err
	}
	a := asArray(v)
	if len(a) != 3 {
		return nil, nil, fmt.Errorf("%s: rescue nodes: unexpected reply %v", c.name, v)
	}
	res := &store.RescueNodesResult{}
	for _, d := range asArray(a[0]) {
		res.Dead = append(res.Dead, asString(d))
	}
	sort.Strings(res.Dead)
	var candidates []string
	for _, d := range asArray(a[2]) {
		candidates = append(candidates, asString(d))
	}
	res.Rescued, err = c.decodeTriples(a[1])
	return res, candidates, err
}

// asFloat reads a number reply that may come as a string (a sorted-set
// score).
func asFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	case string:
		f, _ := strconv.ParseFloat(x, 64)
		return f
	}
	return 0
}

// fromMicros converts microseconds since the epoch; 0 is the zero time.
func fromMicros(us float64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(us)).UTC()
}
