package redisscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jobkit/job/store"
)

// A stored progress is text the scripts never read: the attempt, the
// report's time (us) and the fraction, separated by spaces, then a newline
// and the message.

func encodeProgress(p *store.ProgressParams) string {
	return strconv.Itoa(p.Attempt) + " " + strconv.FormatInt(Micros(p.Now), 10) + " " +
		strconv.FormatFloat(p.Fraction, 'g', -1, 64) + "\n" + p.Message
}

func decodeProgress(id, raw string) (*store.ProgressRecord, error) {
	head, msg, ok := strings.Cut(raw, "\n")
	f := strings.Fields(head)
	if !ok || len(f) != 3 {
		return nil, corrupt("a progress", raw)
	}
	att, err1 := strconv.Atoi(f[0])
	at, err2 := strconv.ParseInt(f[1], 10, 64)
	frac, err3 := strconv.ParseFloat(f[2], 64)
	if err1 != nil || err2 != nil || err3 != nil || frac < 0 || frac > 1 {
		return nil, corrupt("a progress", raw)
	}
	return &store.ProgressRecord{InstanceID: id, Attempt: att, Fraction: frac, Message: msg, Time: FromMicros(at)}, nil
}

// SetProgress implements store.Progress.
func (c *Core) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	v, err := c.run(ctx, ProgressSet, EncodeID(p.ID), p.Owner, itoa(p.Attempt), encodeProgress(p))
	if err != nil {
		return err
	}
	switch asInt(v) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s: set progress: %w: instance %s", c.name, store.ErrNotFound, p.ID)
	case 2:
		return fmt.Errorf("%s: set progress of %s attempt %d by %s: %w (it is not that attempt running under that owner's lease)", c.name, p.ID, p.Attempt, p.Owner, store.ErrLeaseLost)
	}
	return fmt.Errorf("%w: %s: instance %s: the stored state cannot be decoded", store.ErrCorrupt, c.name, p.ID)
}

// LookupProgress implements store.Progress. Progress that cannot be
// decoded is left out and named in an error wrapping store.ErrCorrupt.
func (c *Core) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	var out []*store.ProgressRecord
	var bad []string
	for len(ids) > 0 {
		n := min(len(ids), 1000)
		args := make([]string, n)
		for i, id := range ids[:n] {
			args[i] = EncodeID(id)
		}
		v, err := c.run(ctx, ProgressLookup, args...)
		if err != nil {
			return out, err
		}
		a := asArray(v)
		if len(a) != n {
			return out, fmt.Errorf("%s: progress lookup: malformed reply", c.name)
		}
		for i, raw := range a {
			s := asString(raw)
			if s == "" {
				continue
			}
			pr, err := decodeProgress(ids[i], s)
			if err != nil {
				bad = append(bad, ids[i])
				continue
			}
			out = append(out, pr)
		}
		ids = ids[n:]
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%w: %s: the progress of instances %v cannot be decoded", store.ErrCorrupt, c.name, bad)
	}
	return out, nil
}
