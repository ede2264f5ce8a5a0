package redisscript

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jobkit/job/store"
)

// Paused is the set of the paused queues (lua/queue_admin.lua).
func (k Keys) Paused() string { return k.Prefix + "paused" }

// PauseQueue implements store.QueueAdmin. A queue never used is created
// paused.
func (c *Core) PauseQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: pause queue: %w", c.name, err)
	}
	_, err := c.run(ctx, QueueAdmin, p.Queue, "1")
	return err
}

// ResumeQueue implements store.QueueAdmin; it publishes on the queue's
// wake-up channel when the queue was paused.
func (c *Core) ResumeQueue(ctx context.Context, p *store.QueueParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: resume queue: %w", c.name, err)
	}
	_, err := c.run(ctx, QueueAdmin, p.Queue, "0")
	return err
}

// ListQueues implements store.QueueAdmin, in name order.
func (c *Core) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	qs, err := c.r.Do(ctx, "SMEMBERS", c.keys.Queues())
	if err != nil {
		return nil, c.wrap(ctx, "list queues", err)
	}
	ps, err := c.r.Do(ctx, "SMEMBERS", c.keys.Paused())
	if err != nil {
		return nil, c.wrap(ctx, "list queues", err)
	}
	paused := map[string]bool{}
	for _, q := range asArray(ps) {
		paused[asString(q)] = true
	}
	var out []store.QueueInfo
	for _, q := range asArray(qs) {
		n := asString(q)
		out = append(out, store.QueueInfo{Name: n, Paused: paused[n]})
	}
	slices.SortFunc(out, func(a, b store.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
