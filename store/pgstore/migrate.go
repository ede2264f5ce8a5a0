package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// ErrSchema: the database schema is missing, older than this package, or
// newer than it. The error says which version was found and what to do
// (run Migrate, or upgrade the program).
var ErrSchema = errors.New("pgstore: schema version mismatch")

// migration is one embedded migration file: NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() []migration {
	ents, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	var out []migration
	for _, e := range ents {
		n, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(n)
		if !ok || err != nil {
			panic("pgstore: migration file without a version: " + e.Name())
		}
		b, _ := migrationFiles.ReadFile("migrations/" + e.Name())
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out
}

// SchemaVersion is the schema version this package's code works with: the
// version of its newest embedded migration.
func SchemaVersion() int {
	ms := migrations()
	return ms[len(ms)-1].version
}

// Migrate creates or upgrades the store's tables in the schema chosen by
// the options (WithSchema; "jobkit" by default) to SchemaVersion. It is
// idempotent (a schema at SchemaVersion is left alone) and safe to run
// from several processes at once: each runs in one transaction under an
// advisory lock of the schema, so one applies the migrations and the
// others then find them applied. A schema migrated by a newer release is
// refused with ErrSchema and left untouched. Migrate never closes pool.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	if pool == nil {
		return fmt.Errorf("pgstore: migrate: nil pool; pass the *pgxpool.Pool of your database")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "jobkit-migrate:"+cfg.schema); err != nil {
			return err
		}
		q := cfg.quoted
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+q+".jobkit_version (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+q+".jobkit_version").Scan(&have); err != nil {
			return err
		}
		want := SchemaVersion()
		if have > want {
			return newerErr(cfg.schema, have, want)
		}
		for _, m := range migrations() {
			if m.version <= have {
				continue
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.sql, "SCHEMA.", q+".")); err != nil {
				return fmt.Errorf("migration %s: %w", m.name, err)
			}
		}
		if have < want {
			if _, err := tx.Exec(ctx, "DELETE FROM "+q+".jobkit_version"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+q+".jobkit_version (version) VALUES ($1)", want); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrSchema) {
			return err
		}
		return fmt.Errorf("pgstore: migrate schema %q: %w", cfg.schema, err)
	}
	return nil
}

func newerErr(schema string, have, want int) error {
	return fmt.Errorf("%w: schema %q is at version %d, migrated by a newer release; this code knows versions up to %d: upgrade the program (a schema is never migrated down)", ErrSchema, schema, have, want)
}

// checkSchema returns nil when the schema is at SchemaVersion, and
// ErrSchema naming both versions and the fix otherwise.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, cfg *config) error {
	var have int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+cfg.quoted+".jobkit_version").Scan(&have)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"): // undefined table or schema
		return fmt.Errorf("%w: schema %q has no jobkit tables (version 0, this code needs %d); run pgstore.Migrate (or `jobd migrate`) first", ErrSchema, cfg.schema, SchemaVersion())
	case err != nil:
		return fmt.Errorf("pgstore: read the schema version of %q: %w; is the database reachable?", cfg.schema, err)
	}
	want := SchemaVersion()
	switch {
	case have < want:
		return fmt.Errorf("%w: schema %q is at version %d, this code needs %d; run pgstore.Migrate (or `jobd migrate`)", ErrSchema, cfg.schema, have, want)
	case have > want:
		return newerErr(cfg.schema, have, want)
	}
	return nil
}
