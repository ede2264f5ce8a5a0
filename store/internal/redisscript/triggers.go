package redisscript

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Trigger scripts. Unlike the queue scripts they are not prefixed by
// lib.lua: each names in KEYS the only keys it touches (see their headers).
var (
	TriggerPut    = loadBare("trigger_put", "")
	TriggerDelete = loadBare("trigger_delete", "")
	TriggerList   = loadBare("trigger_list", "no-writes")
)

func init() {
	// Appended here rather than in All's literal, so the plugins prepare
	// the trigger scripts with the others.
	All = append(All, TriggerPut, TriggerDelete, TriggerList)
}

// loadBare builds the script of lua/<name>.lua without lib.lua.
func loadBare(name, flags string) *Script {
	src, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	head := "#!lua"
	if flags != "" {
		head += " flags=" + flags
	}
	return &Script{Name: name, Source: head + "\n-- ---- " + name + ".lua ----\n" + string(src), ReadOnly: flags == "no-writes", flags: flags, src: string(src), bare: true}
}

// triggerKeys are the KEYS of the trigger scripts: trig (HASH name ->
// "<version> <created ns> <json>"), trign (ZSET of names) and trigv (the
// version counter), all under the namespace's hash tag.
func (k Keys) triggerKeys() []string {
	return []string{k.Prefix + "trig", k.Prefix + "trign", k.Prefix + "trigv"}
}

// runTrigger runs a trigger script with its own KEYS.
func (c *Core) runTrigger(ctx context.Context, s *Script, what string, args ...string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.name, what, err)
	}
	v, err := c.r.Run(ctx, s, c.keys.triggerKeys(), args)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %s: %w", c.name, what, ctx.Err())
		}
		if strings.Contains(err.Error(), "OOM command not allowed") {
			return nil, fmt.Errorf("%w: %s: %s: Redis is at its maxmemory and refuses writes (nothing was changed): %v", store.ErrFull, c.name, what, err)
		}
		return nil, fmt.Errorf("%s: %s: %w", c.name, what, err)
	}
	return v, nil
}

// encodeTrigger is the JSON of t without what the store keeps apart.
func encodeTrigger(t *store.Trigger) (string, error) {
	c := t.Clone()
	c.Version, c.CreatedAt = 0, time.Time{}
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("%w: trigger %q: %v", store.ErrInvalid, t.Name, err)
	}
	return string(b), nil
}

// decodeTrigger decodes a stored value "<version> <created ns> <json>".
func (c *Core) decodeTrigger(name, raw string) (*store.Trigger, error) {
	vs, rest, ok1 := strings.Cut(raw, " ")
	cs, body, ok2 := strings.Cut(rest, " ")
	ver, err1 := strconv.ParseInt(vs, 10, 64)
	created, err2 := strconv.ParseInt(cs, 10, 64)
	var t store.Trigger
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: %s: trigger %q: malformed stored value", store.ErrCorrupt, c.name, name)
	}
	if err := json.Unmarshal([]byte(body), &t); err != nil {
		return nil, fmt.Errorf("%w: %s: trigger %q: %v", store.ErrCorrupt, c.name, name, err)
	}
	t.Version, t.CreatedAt = ver, time.Unix(0, created).UTC()
	return &t, nil
}

// PutTrigger implements store.Triggers.
func (c *Core) PutTrigger(ctx context.Context, p *store.PutTriggerParams) (*store.Trigger, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: put trigger: %w", c.name, err)
	}
	t := p.Trigger.Clone()
	t.UpdatedAt = p.Now.UTC()
	body, err := encodeTrigger(t)
	if err != nil {
		return nil, fmt.Errorf("%s: put trigger: %w", c.name, err)
	}
	what := fmt.Sprintf("put trigger %q", t.Name)
	v, err := c.runTrigger(ctx, TriggerPut, what, t.Name, strconv.FormatInt(p.IfVersion, 10), strconv.FormatInt(p.Now.UnixNano(), 10), body)
	if err != nil {
		return nil, err
	}
	f := asArray(v)
	if len(f) != 3 {
		return nil, fmt.Errorf("%s: %s: malformed reply %v", c.name, what, v)
	}
	switch asInt(f[0]) {
	case 0:
	case 1:
		return nil, fmt.Errorf("%s: %s: it exists already (version %s); read it and pass its Version to replace it: %w", c.name, what, asString(f[1]), store.ErrConflict)
	case 2:
		return nil, fmt.Errorf("%s: %s: %w", c.name, what, store.ErrNotFound)
	default:
		return nil, fmt.Errorf("%s: %s: stored version %s, not %d; read it again and retry: %w", c.name, what, asString(f[1]), p.IfVersion, store.ErrConflict)
	}
	t.Version = asInt(f[1])
	t.CreatedAt = time.Unix(0, asInt(f[2])).UTC()
	return t, nil
}

// GetTrigger implements store.Triggers.
func (c *Core) GetTrigger(ctx context.Context, name string) (*store.Trigger, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: get trigger %q: %w", c.name, name, err)
	}
	v, err := c.r.Do(ctx, "HGET", c.keys.triggerKeys()[0], name)
	if err != nil {
		return nil, fmt.Errorf("%s: get trigger %q: %w", c.name, name, err)
	}
	if v == nil {
		return nil, fmt.Errorf("%s: trigger %q: %w", c.name, name, store.ErrNotFound)
	}
	return c.decodeTrigger(name, asString(v))
}

// ListTriggers implements store.Triggers.
func (c *Core) ListTriggers(ctx context.Context, p *store.ListTriggersParams) (*store.TriggerPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("%s: list triggers: %w", c.name, err)
	}
	after := ""
	if p != nil {
		after = p.After
	}
	v, err := c.runTrigger(ctx, TriggerList, "list triggers", after, strconv.Itoa(limit))
	if err != nil {
		return nil, err
	}
	rows := asArray(v)
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: list triggers: malformed reply %v", c.name, v)
	}
	page := &store.TriggerPage{Next: asString(rows[len(rows)-1])}
	for _, row := range rows[:len(rows)-1] {
		t, err := c.decodeTrigger("", asString(row))
		if err != nil {
			return page, err
		}
		page.Triggers = append(page.Triggers, t)
	}
	return page, nil
}

// DeleteTrigger implements store.Triggers.
func (c *Core) DeleteTrigger(ctx context.Context, p *store.DeleteTriggerParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: delete trigger: %w", c.name, err)
	}
	what := fmt.Sprintf("delete trigger %q", p.Name)
	v, err := c.runTrigger(ctx, TriggerDelete, what, p.Name, strconv.FormatInt(p.IfVersion, 10))
	if err != nil {
		return err
	}
	f := asArray(v)
	if len(f) != 2 {
		return fmt.Errorf("%s: %s: malformed reply %v", c.name, what, v)
	}
	switch asInt(f[0]) {
	case 0:
		return nil
	case 2:
		return fmt.Errorf("%s: %s: %w", c.name, what, store.ErrNotFound)
	default:
		return fmt.Errorf("%s: %s: stored version %s, not %d: %w", c.name, what, asString(f[1]), p.IfVersion, store.ErrConflict)
	}
}
