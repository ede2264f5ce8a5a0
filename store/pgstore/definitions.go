package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// versioned is a row of the definitions or triggers table: a JSON body
// with the store's version and times beside it.
type versioned struct {
	body             []byte
	version          int64
	created, updated int64
}

// putVersioned stores body under key in table (keyCol names the key) if
// ifVersion holds, in one statement, and returns the stored row. version
// is the SQL expression of the new version (for an update; old is the
// table's alias). have reports the stored version when the condition did
// not hold (0: none).
func (s *Store) putVersioned(ctx context.Context, table, keyCol, key string, body []byte, ifVersion, now int64, newVersion, updVersion string) (v versioned, applied bool, have int64, err error) {
	t := s.t(table)
	var q string
	switch ifVersion {
	case 0:
		q = `INSERT INTO ` + t + ` AS old (ns, ` + keyCol + `, body, version, created_at, updated_at) VALUES ($1, $2, $3, ` + newVersion + `, $4, $4)
			ON CONFLICT DO NOTHING RETURNING version, created_at, updated_at`
	case store.AnyVersion:
		q = `INSERT INTO ` + t + ` AS old (ns, ` + keyCol + `, body, version, created_at, updated_at) VALUES ($1, $2, $3, ` + newVersion + `, $4, $4)
			ON CONFLICT (ns, ` + keyCol + `) DO UPDATE SET body = excluded.body, version = ` + updVersion + `, updated_at = excluded.updated_at
			RETURNING version, created_at, updated_at`
	default:
		q = `UPDATE ` + t + ` AS old SET body = $3, version = ` + updVersion + `, updated_at = $4
			WHERE ns = $1 AND ` + keyCol + ` = $2 AND version = $5 RETURNING version, created_at, updated_at`
	}
	args := []any{s.cfg.ns, key, body, now}
	if ifVersion > 0 {
		args = append(args, ifVersion)
	}
	err = s.q(ctx).QueryRow(ctx, q, args...).Scan(&v.version, &v.created, &v.updated)
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.q(ctx).QueryRow(ctx, `SELECT version FROM `+t+` WHERE ns = $1 AND `+keyCol+` = $2`, s.cfg.ns, key).Scan(&have)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return v, false, have, err
	}
	v.body = body
	return v, err == nil, 0, err
}

// getVersioned reads the row of key; ok is false when there is none.
func (s *Store) getVersioned(ctx context.Context, table, keyCol, key string) (v versioned, ok bool, err error) {
	err = s.q(ctx).QueryRow(ctx, `SELECT body, version, created_at, updated_at FROM `+s.t(table)+` WHERE ns = $1 AND `+keyCol+` = $2`,
		s.cfg.ns, key).Scan(&v.body, &v.version, &v.created, &v.updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return v, false, nil
	}
	return v, err == nil, err
}

// deleteVersioned deletes the row of key (at ifVersion when not 0); have
// is the stored version when it was not deleted (0: none).
func (s *Store) deleteVersioned(ctx context.Context, table, keyCol, key string, ifVersion int64) (deleted bool, have int64, err error) {
	t := s.t(table)
	var n int64
	err = s.q(ctx).QueryRow(ctx, `WITH d AS (DELETE FROM `+t+` WHERE ns = $1 AND `+keyCol+` = $2 AND ($3 = 0 OR version = $3) RETURNING 1)
		SELECT count(*) FROM d`, s.cfg.ns, key, ifVersion).Scan(&n)
	if err != nil || n > 0 {
		return n > 0, 0, err
	}
	err = s.q(ctx).QueryRow(ctx, `SELECT version FROM `+t+` WHERE ns = $1 AND `+keyCol+` = $2`, s.cfg.ns, key).Scan(&have)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return false, have, err
}

func (v *versioned) definition(kind string) (*store.Definition, error) {
	d := &store.Definition{}
	if err := json.Unmarshal(v.body, d); err != nil {
		return nil, fmt.Errorf("pgstore: definition %q: %v: %w", kind, err, store.ErrCorrupt)
	}
	d.Kind, d.Version, d.CreatedAt, d.UpdatedAt = kind, v.version, fromNanos(v.created), fromNanos(v.updated)
	if d.Executor != nil && len(d.Executor.Config) > 0 {
		// jsonb keeps its own key order and spacing: back to the
		// canonical form the definition was validated in.
		c, err := store.CanonicalJSON(d.Executor.Config)
		if err != nil {
			return nil, fmt.Errorf("pgstore: definition %q: executor config: %v: %w", kind, err, store.ErrCorrupt)
		}
		d.Executor.Config = c
	}
	return d, nil
}

// PutDefinition implements store.Definitions in one statement.
func (s *Store) PutDefinition(ctx context.Context, p *store.PutDefinitionParams) (*store.Definition, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: put definition: %w", err)
	}
	d := p.Definition.Clone()
	d.Version, d.CreatedAt, d.UpdatedAt = 0, time0, time0
	body, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("pgstore: put definition %q: %w", d.Kind, err)
	}
	v, ok, have, err := s.putVersioned(ctx, "definitions", "kind", d.Kind, body, p.IfVersion, nanos(p.Now), "1", "old.version + 1")
	if err != nil {
		return nil, s.wrap(ctx, "put definition", err)
	}
	if !ok {
		return nil, fmt.Errorf("pgstore: %w", store.VersionConflict(d.Kind, max(p.IfVersion, 0), have))
	}
	return v.definition(d.Kind)
}

// GetDefinition implements store.Definitions.
func (s *Store) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	v, ok, err := s.getVersioned(ctx, "definitions", "kind", kind)
	if err != nil {
		return nil, s.wrap(ctx, "get definition", err)
	}
	if !ok {
		return nil, fmt.Errorf("pgstore: %w", store.DefinitionNotFound(kind))
	}
	return v.definition(kind)
}

// ListDefinitions implements store.Definitions, in byte order of kinds.
func (s *Store) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("pgstore: list definitions: %w", err)
	}
	after := ""
	if p != nil {
		after = p.After
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT kind, body, version, created_at, updated_at FROM `+s.t("definitions")+`
		WHERE ns = $1 AND kind COLLATE "C" > $2 ORDER BY kind COLLATE "C" LIMIT $3`, s.cfg.ns, after, limit)
	if err != nil {
		return nil, s.wrap(ctx, "list definitions", err)
	}
	defer rows.Close()
	out := []*store.Definition{}
	var bad error
	for rows.Next() {
		var kind string
		var v versioned
		if err := rows.Scan(&kind, &v.body, &v.version, &v.created, &v.updated); err != nil {
			return nil, s.wrap(ctx, "list definitions", err)
		}
		d, err := v.definition(kind)
		if err != nil {
			bad = err
			continue
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "list definitions", err)
	}
	return out, bad
}

// DeleteDefinition implements store.Definitions.
func (s *Store) DeleteDefinition(ctx context.Context, p *store.DeleteDefinitionParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("pgstore: delete definition: %w", err)
	}
	ok, have, err := s.deleteVersioned(ctx, "definitions", "kind", p.Kind, p.IfVersion)
	switch {
	case err != nil:
		return s.wrap(ctx, "delete definition", err)
	case ok:
		return nil
	case have == 0:
		return fmt.Errorf("pgstore: %w", store.DefinitionNotFound(p.Kind))
	}
	return fmt.Errorf("pgstore: %w", store.VersionConflict(p.Kind, p.IfVersion, have))
}

func (v *versioned) trigger(name string) (*store.Trigger, error) {
	t := &store.Trigger{}
	if err := json.Unmarshal(v.body, t); err != nil {
		return nil, fmt.Errorf("pgstore: trigger %q: %v: %w", name, err, store.ErrCorrupt)
	}
	t.Name, t.Version, t.CreatedAt, t.UpdatedAt = name, v.version, fromNanos(v.created), fromNanos(v.updated)
	return t, nil
}

// UpgradeTriggers implements store.TriggerUpgrader: it moves the rows of
// the triggers table (where releases before kept the triggers) into
// store.TriggerCollection and deletes each row once moved, at the version
// it was read (a trigger an older node changed meanwhile is moved at the
// next call). With none left it costs one read. The table stays, empty,
// for the older nodes of a rolling upgrade.
func (s *Store) UpgradeTriggers(ctx context.Context) (int, error) {
	rows, err := s.q(ctx).Query(ctx, `SELECT name, body, version, created_at, updated_at FROM `+s.t("triggers")+` WHERE ns = $1`, s.cfg.ns)
	if err != nil {
		return 0, s.wrap(ctx, "upgrade triggers", err)
	}
	var old []*store.Trigger
	for rows.Next() {
		var name string
		var v versioned
		if err := rows.Scan(&name, &v.body, &v.version, &v.created, &v.updated); err != nil {
			rows.Close()
			return 0, s.wrap(ctx, "upgrade triggers", err)
		}
		t, err := v.trigger(name)
		if err != nil {
			rows.Close()
			return 0, err
		}
		old = append(old, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, s.wrap(ctx, "upgrade triggers", err)
	}
	moved := 0
	for _, t := range old {
		ok, err := store.MoveTrigger(ctx, s, t)
		if err != nil {
			return moved, fmt.Errorf("pgstore: upgrade triggers: %w", err)
		}
		if ok {
			moved++
		}
		if _, _, err := s.deleteVersioned(ctx, "triggers", "name", t.Name, t.Version); err != nil {
			return moved, s.wrap(ctx, "upgrade triggers", err)
		}
	}
	return moved, nil
}

// time0 is the zero time.
var time0 time.Time
