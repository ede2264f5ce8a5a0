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

// Triggers were kept in a layout of their own (the keys of triggerKeys)
// before they became documents of store.TriggerCollection; what is left
// here moves them (UpgradeTriggers). TriggerDelete removes a moved one; it
// is not prefixed by lib.lua and names in KEYS the only keys it touches.
var TriggerDelete = loadBare("trigger_delete", "")

func init() {
	// Appended here rather than in All's literal, so the plugins prepare
	// the script with the others.
	All = append(All, TriggerDelete)
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

// triggerKeys are the keys of the earlier trigger layout: trig (HASH name
// -> "<version> <created ns> <json>"), trign (ZSET of names) and trigv
// (the version counter), all under the namespace's hash tag.
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

// UpgradeTriggers implements store.TriggerUpgrader: it moves the
// triggers of the layout before they were documents (the trig HASH, see
// triggerKeys) into store.TriggerCollection and removes each from the
// HASH once moved, at the version it was read (a trigger an older node
// changed meanwhile is moved at the next call). With none left it costs
// one HLEN.
func (c *Core) UpgradeTriggers(ctx context.Context) (int, error) {
	k := c.keys.triggerKeys()
	n, err := c.r.Do(ctx, "HLEN", k[0])
	if err != nil || asInt(n) == 0 {
		if err != nil {
			return 0, fmt.Errorf("%s: upgrade triggers: %w", c.name, err)
		}
		return 0, nil
	}
	// HKEYS and HMGET rather than HGETALL, whose reply is a map in RESP3.
	v, err := c.r.Do(ctx, "HKEYS", k[0])
	if err != nil {
		return 0, fmt.Errorf("%s: upgrade triggers: %w", c.name, err)
	}
	names := asArray(v)
	if len(names) == 0 {
		// Moved meanwhile by another node (or this one's scheduler),
		// between HLEN and HKEYS: an HMGET of no field is an error.
		return 0, nil
	}
	args := []string{"HMGET", k[0]}
	for _, n := range names {
		args = append(args, asString(n))
	}
	v, err = c.r.Do(ctx, args...)
	if err != nil {
		return 0, fmt.Errorf("%s: upgrade triggers: %w", c.name, err)
	}
	vals := asArray(v)
	moved := 0
	for i := 0; i < len(names) && i < len(vals); i++ {
		name := asString(names[i])
		if vals[i] == nil {
			continue // deleted since HKEYS
		}
		t, err := c.decodeTrigger(name, asString(vals[i]))
		if err != nil {
			return moved, fmt.Errorf("%s: upgrade triggers: %w", c.name, err)
		}
		ok, err := store.MoveTrigger(ctx, c, t)
		if err != nil {
			return moved, fmt.Errorf("%s: upgrade triggers: %w", c.name, err)
		}
		if ok {
			moved++
		}
		if _, err := c.runTrigger(ctx, TriggerDelete, fmt.Sprintf("upgrade trigger %q", name), name, strconv.FormatInt(t.Version, 10)); err != nil {
			return moved, err
		}
	}
	return moved, nil
}
