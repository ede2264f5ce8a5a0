package redisscript

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

var _ store.Admin = (*Core)(nil)

// adminBatch bounds the IDs one admin script run takes, so a run stays
// short however many a call names.
const adminBatch = 500

// Retry implements store.Admin with the admin_retry script, adminBatch IDs
// per run.
func (c *Core) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	reset := "0"
	if p.ResetAttempts {
		reset = "1"
	}
	head := []string{us(p.Now), p.Node, us(p.ReadyAt()), reset, store.RetryMessage(p.Node)}
	return c.admin(ctx, AdminRetry, head, p.IDs, func(id string, code int64, was store.State) store.AdminResult {
		switch code {
		case 0:
			return store.AdminResult{ID: id, State: store.Scheduled}
		case 1:
			return store.AdminResult{ID: id, Err: fmt.Errorf("%s: retry %s: %w", c.name, id, store.ErrNotFound)}
		case 2:
			return store.AdminResult{ID: id, Err: fmt.Errorf("%s: retry %s: it is %v; cancel it first or wait for it to finish: %w", c.name, id, was, store.ErrNotFinished)}
		}
		return store.AdminResult{ID: id, Err: fmt.Errorf("%w: %s: retry %s: the stored record cannot be decoded", store.ErrCorrupt, c.name, id)}
	})
}

// Delete implements store.Admin with the admin_delete script, adminBatch
// IDs per run.
func (c *Core) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return c.admin(ctx, AdminDelete, []string{us(p.Now)}, p.IDs, func(id string, code int64, was store.State) store.AdminResult {
		if code == 0 {
			if !was.Valid() {
				was = store.Scheduled // a damaged state: reported as waiting
			}
			return store.AdminResult{ID: id, State: was}
		}
		return store.AdminResult{ID: id, Err: fmt.Errorf("%s: delete %s: %w", c.name, id, store.ErrNotFound)}
	})
}

// admin runs script s over ids, adminBatch at a time, with head as the
// arguments before the IDs; the script answers a code and a state number
// per ID, which result turns into the ID's result.
func (c *Core) admin(ctx context.Context, s *Script, head, ids []string, result func(id string, code int64, was store.State) store.AdminResult) ([]store.AdminResult, error) {
	out := make([]store.AdminResult, 0, len(ids))
	if len(ids) == 0 {
		return out, ctx.Err()
	}
	for len(ids) > 0 {
		n := min(len(ids), adminBatch)
		args := append(append(make([]string, 0, len(head)+n), head...), make([]string, n)...)
		for i, id := range ids[:n] {
			args[len(head)+i] = EncodeID(id)
		}
		v, err := c.run(ctx, s, args...)
		if err != nil {
			return out, err
		}
		a := asArray(v)
		if len(a) != 2*n {
			return out, fmt.Errorf("%s: %s: %d replies for %d IDs", c.name, s.Name, len(a)/2, n)
		}
		for i, id := range ids[:n] {
			out = append(out, result(id, asInt(a[2*i]), store.State(asInt(a[2*i+1]))))
		}
		ids = ids[n:]
	}
	return out, nil
}
