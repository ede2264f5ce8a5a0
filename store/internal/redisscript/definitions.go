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

// The scripts of job definitions; their contracts are in lua/definition_*.lua.
var (
	DefinitionPut    = load("definition_put", "")
	DefinitionDelete = load("definition_delete", "")
	DefinitionList   = load("definition_list", "no-writes")
)

func init() { All = append(All, DefinitionPut, DefinitionDelete, DefinitionList) }

// Defs is the hash of the namespace's job definitions (see
// lua/definition_put.lua for its layout).
func (k Keys) Defs() string { return k.Prefix + "defs" }

// encodeDefinitionBody is d as JSON without the fields the stored record
// keeps in front of it (version, creation time).
func encodeDefinitionBody(d *store.Definition) (string, error) {
	c := d.Clone()
	c.Version, c.CreatedAt = 0, time.Time{}
	b, err := json.Marshal(c)
	return string(b), err
}

// decodeDefinition decodes a stored definition of kind: "<version>
// <created us> <body>".
func decodeDefinition(kind, raw string) (*store.Definition, error) {
	v, rest, ok1 := strings.Cut(raw, " ")
	c, body, ok2 := strings.Cut(rest, " ")
	ver, err1 := strconv.ParseInt(v, 10, 64)
	created, err2 := strconv.ParseInt(c, 10, 64)
	var d store.Definition
	if !ok1 || !ok2 || err1 != nil || err2 != nil || json.Unmarshal([]byte(body), &d) != nil || d.Kind != kind {
		return nil, fmt.Errorf("%w: the stored definition of kind %q cannot be decoded; delete it with DeleteDefinition and store it again", store.ErrCorrupt, kind)
	}
	d.Version, d.CreatedAt = ver, FromMicros(created)
	return &d, nil
}

// PutDefinition implements store.Definitions.
func (c *Core) PutDefinition(ctx context.Context, p *store.PutDefinitionParams) (*store.Definition, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	d := p.Definition.Clone()
	d.UpdatedAt = p.Now
	body, err := encodeDefinitionBody(d)
	if err != nil {
		return nil, fmt.Errorf("%w: definition %q: %v", store.ErrInvalid, d.Kind, err)
	}
	v, err := c.run(ctx, DefinitionPut, d.Kind, strconv.FormatInt(p.IfVersion, 10), us(p.Now), body)
	if err != nil {
		return nil, err
	}
	r := asArray(v)
	switch {
	case len(r) == 3 && asInt(r[0]) == 0:
		d.Version, d.CreatedAt = asInt(r[1]), FromMicros(asInt(r[2]))
		return d, nil
	case len(r) == 2 && asInt(r[0]) == 1:
		return nil, store.VersionConflict(d.Kind, p.IfVersion, asInt(r[1]))
	case len(r) == 1 && asInt(r[0]) == 2:
		return nil, fmt.Errorf("%w: the stored definition of kind %q cannot be decoded; delete it with DeleteDefinition and store it again", store.ErrCorrupt, d.Kind)
	}
	return nil, fmt.Errorf("%s: put definition: malformed reply %v", c.name, v)
}

// GetDefinition implements store.Definitions.
func (c *Core) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	v, err := c.r.Do(ctx, "HGET", c.keys.Defs(), kind)
	if err != nil {
		return nil, fmt.Errorf("%s: get definition %q: %w", c.name, kind, err)
	}
	if v == nil {
		return nil, store.DefinitionNotFound(kind)
	}
	return decodeDefinition(kind, asString(v))
}

// ListDefinitions implements store.Definitions. Records that cannot be
// decoded are left out and named in an error wrapping store.ErrCorrupt,
// returned with the rest.
func (c *Core) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, err
	}
	after := ""
	if p != nil {
		after = p.After
	}
	v, err := c.run(ctx, DefinitionList, after, itoa(limit))
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	out := make([]*store.Definition, 0, len(a)/2)
	var bad []string
	for i := 0; i+1 < len(a); i += 2 {
		kind := asString(a[i])
		d, err := decodeDefinition(kind, asString(a[i+1]))
		if err != nil {
			bad = append(bad, strconv.Quote(kind))
			continue
		}
		out = append(out, d)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%w: %s: the stored definitions of kinds %s cannot be decoded; delete them with DeleteDefinition", store.ErrCorrupt, c.name, strings.Join(bad, ", "))
	}
	return out, nil
}

// DeleteDefinition implements store.Definitions.
func (c *Core) DeleteDefinition(ctx context.Context, p *store.DeleteDefinitionParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	v, err := c.run(ctx, DefinitionDelete, p.Kind, strconv.FormatInt(p.IfVersion, 10))
	if err != nil {
		return err
	}
	r := asArray(v)
	switch {
	case len(r) == 1 && asInt(r[0]) == 0:
		return nil
	case len(r) == 2 && asInt(r[0]) == 1:
		return store.VersionConflict(p.Kind, p.IfVersion, asInt(r[1]))
	case len(r) == 1 && asInt(r[0]) == 2:
		return fmt.Errorf("%w: the stored definition of kind %q cannot be decoded; delete it without IfVersion", store.ErrCorrupt, p.Kind)
	case len(r) == 1 && asInt(r[0]) == 3:
		return store.DefinitionNotFound(p.Kind)
	}
	return fmt.Errorf("%s: delete definition: malformed reply %v", c.name, v)
}
