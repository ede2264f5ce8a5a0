package redisscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jobkit/job/store"
)

var (
	_ store.Events            = (*Partitioned)(nil)
	_ store.TriggerUpgrader   = (*Partitioned)(nil)
	_ store.RateLimitEnforcer = (*Partitioned)(nil)
	_ store.RateLimitDelayer  = (*Partitioned)(nil)
)

// A partitioned namespace's event cursor holds one cursor per partition:
// "rp<n>:<cursor of partition 0>,<cursor of partition 1>,...". A
// partition's own cursors ("r:<stream id>[:<skip>]") hold no comma.

func (p *Partitioned) encodeCursor(subs []string) string {
	return "rp" + strconv.Itoa(len(subs)) + ":" + strings.Join(subs, ",")
}

func (p *Partitioned) parseCursor(s string) ([]string, error) {
	bad := fmt.Errorf("%w: %s: event cursor %q is not a cursor of this partitioned namespace (%d partitions); pass one from an Event or from EventCursor, or none to follow from now", store.ErrInvalid, p.name, s, len(p.parts))
	rest, ok := strings.CutPrefix(s, "rp"+strconv.Itoa(len(p.parts))+":")
	if !ok {
		return nil, bad
	}
	subs := strings.Split(rest, ",")
	if len(subs) != len(p.parts) {
		return nil, bad
	}
	return subs, nil
}

// EventCursor implements store.Events: every partition's newest event.
func (p *Partitioned) EventCursor(ctx context.Context) (string, error) {
	if len(p.parts) == 1 {
		return p.parts[0].EventCursor(ctx)
	}
	subs := make([]string, len(p.parts))
	err := p.each(func(i int, c *Core) error {
		var err error
		subs[i], err = c.EventCursor(ctx)
		return err
	})
	if err != nil {
		return "", err
	}
	return p.encodeCursor(subs), nil
}

// Follow implements store.Events: one feed per partition, merged. The
// events of one partition (so of one instance) come in the order they
// were written; events of different partitions interleave in the order
// they were read. Each event's Cursor holds, for every partition, the
// position of the last event delivered from it, so following from it
// misses nothing and repeats nothing.
func (p *Partitioned) Follow(ctx context.Context, fp *store.FollowParams) (<-chan store.Event, error) {
	if len(p.parts) == 1 {
		return p.parts[0].Follow(ctx, fp)
	}
	if err := fp.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.name, err)
	}
	var subs []string
	if fp.Cursor != "" {
		var err error
		if subs, err = p.parseCursor(fp.Cursor); err != nil {
			return nil, err
		}
	} else {
		// From now: every partition's cursor of now, so the merged
		// cursors are complete from the first event on.
		cur, err := p.EventCursor(ctx)
		if err != nil {
			return nil, err
		}
		subs, _ = p.parseCursor(cur)
	}
	fctx, cancel := context.WithCancel(ctx)
	ins := make([]<-chan store.Event, len(p.parts))
	for i, c := range p.parts {
		sub := *fp
		sub.Cursor = subs[i]
		ch, err := c.Follow(fctx, &sub)
		if err != nil {
			cancel()
			for _, in := range ins[:i] {
				for range in {
				}
			}
			return nil, err
		}
		ins[i] = ch
	}
	out := make(chan store.Event, fp.BufferOrDefault())
	var mu sync.Mutex // orders the cursor updates with the deliveries
	failed := false
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			for ev := range in {
				mu.Lock()
				if failed {
					mu.Unlock()
					continue
				}
				if ev.Err == nil {
					subs[i] = ev.Cursor
					ev.Cursor = p.encodeCursor(subs)
					select {
					case out <- ev:
					case <-fctx.Done():
					}
				} else {
					// The feed ends with this error, its last value.
					failed = true
					cancel()
					select {
					case out <- ev:
					case <-ctx.Done():
					}
				}
				mu.Unlock()
			}
		})
	}
	go func() {
		wg.Wait()
		cancel()
		close(out)
	}()
	return out, nil
}
