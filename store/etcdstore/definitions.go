package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/store"
)

// Job definitions live under P d/<kind>, the kind as it is (it is the
// last part of the key, so a "/" in it is harmless), so a range read
// lists them in byte order of kind. The value is the definition as JSON;
// each change is a transaction that compares the key's ModRevision with
// the one read.

func (k keys) defPrefix() string             { return k.p + "d/" }
func (k keys) definition(kind string) string { return k.p + "d/" + kind }

// readDefinition returns the stored definition of kind (nil when there is
// none) and its key's ModRevision (0 when absent).
func (s *Store) readDefinition(ctx context.Context, kind string) (*store.Definition, int64, error) {
	resp, err := s.cli.Get(ctx, s.k.definition(kind))
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	kv := resp.Kvs[0]
	d, err := decodeDefinition(kind, kv.Value)
	return d, kv.ModRevision, err
}

// wrapDef is wrap, but a record that cannot be decoded is named as such,
// not as a failure of etcd.
func (s *Store) wrapDef(what string, ctx context.Context, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("etcdstore: %s: %w", what, err)
	}
	return s.wrap(what, ctx, err)
}

func decodeDefinition(kind string, raw []byte) (*store.Definition, error) {
	var d store.Definition
	if err := json.Unmarshal(raw, &d); err != nil || d.Kind != kind || d.Version <= 0 {
		return nil, fmt.Errorf("%w: the stored definition of kind %q cannot be decoded; delete it with DeleteDefinition (no IfVersion) and store it again", store.ErrCorrupt, kind)
	}
	return &d, nil
}

// PutDefinition implements store.Definitions.
func (s *Store) PutDefinition(ctx context.Context, p *store.PutDefinitionParams) (*store.Definition, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("put definition", ctx, err)
	}
	defer cancel()
	ctx = octx
	key := s.k.definition(p.Definition.Kind)
	for {
		old, rev, err := s.readDefinition(ctx, p.Definition.Kind)
		if err != nil {
			return nil, s.wrapDef("put definition", ctx, err)
		}
		d := p.Definition.Clone()
		d.Version, d.CreatedAt, d.UpdatedAt = 1, p.Now, p.Now
		if old != nil {
			d.Version, d.CreatedAt = old.Version+1, old.CreatedAt
		}
		if have := d.Version - 1; p.IfVersion != store.AnyVersion && p.IfVersion != have {
			return nil, store.VersionConflict(d.Kind, p.IfVersion, have)
		}
		val, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("%w: definition %q: %v", store.ErrInvalid, d.Kind, err)
		}
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(val))).Commit()
		if err != nil {
			return nil, s.wrap("put definition", ctx, err)
		}
		if resp.Succeeded {
			return d, nil
		}
		// Changed since the read: decide again on what is there now.
	}
}

// GetDefinition implements store.Definitions.
func (s *Store) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("get definition", ctx, err)
	}
	defer cancel()
	ctx = octx
	d, _, err := s.readDefinition(ctx, kind)
	switch {
	case err != nil:
		return nil, s.wrapDef("get definition", ctx, err)
	case d == nil:
		return nil, store.DefinitionNotFound(kind)
	}
	return d, nil
}

// ListDefinitions implements store.Definitions. Records that cannot be
// decoded are left out and named in an error wrapping store.ErrCorrupt,
// returned with the rest.
func (s *Store) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, err
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return nil, s.wrap("list definitions", ctx, err)
	}
	defer cancel()
	ctx = octx
	from := s.k.defPrefix()
	if p != nil && p.After != "" {
		from = s.k.definition(p.After) + "\x00"
	}
	resp, err := s.cli.Get(ctx, from, clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.k.defPrefix())), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, s.wrap("list definitions", ctx, err)
	}
	out := make([]*store.Definition, 0, len(resp.Kvs))
	var bad []string
	for _, kv := range resp.Kvs {
		kind := strings.TrimPrefix(string(kv.Key), s.k.defPrefix())
		d, err := decodeDefinition(kind, kv.Value)
		if err != nil {
			bad = append(bad, strconv.Quote(kind))
			continue
		}
		out = append(out, d)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%w: etcdstore: the stored definitions of kinds %s cannot be decoded; delete them with DeleteDefinition", store.ErrCorrupt, strings.Join(bad, ", "))
	}
	return out, nil
}

// DeleteDefinition implements store.Definitions.
func (s *Store) DeleteDefinition(ctx context.Context, p *store.DeleteDefinitionParams) error {
	if err := p.Validate(); err != nil {
		return err
	}
	octx, cancel, err := s.op(ctx)
	if err != nil {
		return s.wrap("delete definition", ctx, err)
	}
	defer cancel()
	ctx = octx
	key := s.k.definition(p.Kind)
	if p.IfVersion == 0 {
		resp, err := s.cli.Delete(ctx, key)
		switch {
		case err != nil:
			return s.wrapDef("delete definition", ctx, err)
		case resp.Deleted == 0:
			return store.DefinitionNotFound(p.Kind)
		}
		return nil
	}
	for {
		old, rev, err := s.readDefinition(ctx, p.Kind)
		switch {
		case err != nil:
			return s.wrapDef("delete definition", ctx, err)
		case rev == 0:
			return store.DefinitionNotFound(p.Kind)
		case old.Version != p.IfVersion:
			return store.VersionConflict(p.Kind, p.IfVersion, old.Version)
		}
		resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return s.wrap("delete definition", ctx, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
}
