package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/store"
)

// Named documents (store.Documents) are rows of the documents table
// (migrations/0004_documents.sql), keyed by namespace, collection and
// name. A document counts its own versions (version + 1 at each change);
// a new one starts above the greatest version a document of its
// collection had when deleted or pruned, kept in a row of collection
// "#<collection>" and name "" (no collection a user names starts with
// "#"). The document_version sequence of schema 4 is no longer used.

// goneRow is the SQL of the row that keeps the greatest version of the
// gone documents of collection $2.
const goneRow = `ns = $1 AND collection = '#' || $2::text AND name = ''`

// firstDocVersion is the SQL expression of a new document's version.
func (s *Store) firstDocVersion() string {
	return `coalesce((SELECT version FROM ` + s.t("documents") + ` WHERE ` + goneRow + `), 0) + 1`
}

// forgetDocs is the SQL that records the versions of the documents a
// CTE d deleted (RETURNING version) in the collection's gone row.
func (s *Store) forgetDocs() string {
	return `f AS (INSERT INTO ` + s.t("documents") + ` AS g (ns, collection, name, body, version, created_at, updated_at)
		SELECT $1, '#' || $2::text, '', ''::bytea, max(version), 0, 0 FROM d HAVING count(*) > 0
		ON CONFLICT (ns, collection, name) DO UPDATE SET version = greatest(g.version, excluded.version))`
}

// PutDocument implements store.Documents in one statement (two when the
// condition fails, to say why).
func (s *Store) PutDocument(ctx context.Context, p *store.PutDocumentParams) (*store.Document, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pgstore: put document: %w", err)
	}
	t, first := s.t("documents"), s.firstDocVersion()
	var q string
	switch p.IfVersion {
	case 0:
		q = `INSERT INTO ` + t + ` (ns, collection, name, body, version, created_at, updated_at) VALUES ($1, $2, $3, $4, ` + first + `, $5, $5)
			ON CONFLICT DO NOTHING RETURNING version, created_at`
	case store.AnyVersion:
		q = `INSERT INTO ` + t + ` AS d (ns, collection, name, body, version, created_at, updated_at) VALUES ($1, $2, $3, $4, ` + first + `, $5, $5)
			ON CONFLICT (ns, collection, name) DO UPDATE SET body = excluded.body, version = d.version + 1, updated_at = excluded.updated_at
			RETURNING version, created_at`
	default:
		q = `UPDATE ` + t + ` SET body = $4, version = version + 1, updated_at = $5
			WHERE ns = $1 AND collection = $2 AND name = $3 AND version = $6 RETURNING version, created_at`
	}
	now := nanos(p.Now)
	args := []any{s.cfg.ns, p.Collection, p.Name, []byte(p.Body), now}
	if p.IfVersion > 0 {
		args = append(args, p.IfVersion)
	}
	d := &store.Document{Collection: p.Collection, Name: p.Name, Body: bytes.Clone(p.Body), UpdatedAt: fromNanos(now)}
	var created int64
	err := s.q(ctx).QueryRow(ctx, q, args...).Scan(&d.Version, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		have, err := s.docVersion(ctx, p.Collection, p.Name)
		if err != nil {
			return nil, s.wrap(ctx, "put document", err)
		}
		return nil, fmt.Errorf("pgstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
	}
	if err != nil {
		return nil, s.wrap(ctx, "put document", err)
	}
	d.CreatedAt = fromNanos(created)
	return d, nil
}

// docVersion returns the version of a stored document, 0 when there is
// none.
func (s *Store) docVersion(ctx context.Context, coll, name string) (int64, error) {
	var have int64
	err := s.q(ctx).QueryRow(ctx, `SELECT version FROM `+s.t("documents")+` WHERE ns = $1 AND collection = $2 AND name = $3`,
		s.cfg.ns, coll, name).Scan(&have)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return have, err
}

// GetDocument implements store.Documents.
func (s *Store) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	if err := store.CheckCollection(collection); err != nil {
		return nil, fmt.Errorf("pgstore: get document: %w", err)
	}
	d := &store.Document{Collection: collection, Name: name}
	var created, updated int64
	err := s.q(ctx).QueryRow(ctx, `SELECT body, version, created_at, updated_at FROM `+s.t("documents")+`
		WHERE ns = $1 AND collection = $2 AND name = $3`, s.cfg.ns, collection, name).Scan(&d.Body, &d.Version, &created, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: %w", store.DocumentNotFound(collection, name))
	}
	if err != nil {
		return nil, s.wrap(ctx, "get document", err)
	}
	d.CreatedAt, d.UpdatedAt = fromNanos(created), fromNanos(updated)
	return d, nil
}

// ListDocuments implements store.Documents, in byte order of names (the
// columns compare with COLLATE "C").
func (s *Store) ListDocuments(ctx context.Context, p *store.ListDocumentsParams) (*store.DocumentPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("pgstore: list documents: %w", err)
	}
	from, incl := p.Start()
	op := ">"
	if incl {
		op = ">="
	}
	rows, err := s.q(ctx).Query(ctx, `SELECT name, body, version, created_at, updated_at FROM `+s.t("documents")+`
		WHERE ns = $1 AND collection = $2 AND name `+op+` $3 AND starts_with(name, $4) ORDER BY name LIMIT $5`,
		s.cfg.ns, p.Collection, from, p.Prefix, limit+1)
	if err != nil {
		return nil, s.wrap(ctx, "list documents", err)
	}
	defer rows.Close()
	page := &store.DocumentPage{Documents: []*store.Document{}}
	for rows.Next() {
		d := &store.Document{Collection: p.Collection}
		var created, updated int64
		if err := rows.Scan(&d.Name, &d.Body, &d.Version, &created, &updated); err != nil {
			return nil, s.wrap(ctx, "list documents", err)
		}
		if len(page.Documents) == limit {
			page.Next = page.Documents[limit-1].Name
			break
		}
		d.CreatedAt, d.UpdatedAt = fromNanos(created), fromNanos(updated)
		page.Documents = append(page.Documents, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "list documents", err)
	}
	return page, nil
}

// DeleteDocument implements store.Documents.
func (s *Store) DeleteDocument(ctx context.Context, p *store.DeleteDocumentParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("pgstore: delete document: %w", err)
	}
	var n int
	err := s.q(ctx).QueryRow(ctx, `WITH d AS (DELETE FROM `+s.t("documents")+` WHERE ns = $1 AND collection = $2 AND name = $3 AND ($4 = 0 OR version = $4) RETURNING version),
		`+s.forgetDocs()+`
		SELECT count(*) FROM d`, s.cfg.ns, p.Collection, p.Name, p.IfVersion).Scan(&n)
	if err != nil {
		return s.wrap(ctx, "delete document", err)
	}
	if n > 0 {
		return nil
	}
	have, err := s.docVersion(ctx, p.Collection, p.Name)
	switch {
	case err != nil:
		return s.wrap(ctx, "delete document", err)
	case have == 0:
		return fmt.Errorf("pgstore: %w", store.DocumentNotFound(p.Collection, p.Name))
	}
	return fmt.Errorf("pgstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
}

// PruneDocuments implements store.Documents: one count, then one delete
// of the first names.
func (s *Store) PruneDocuments(ctx context.Context, p *store.PruneDocumentsParams) (int, error) {
	limit, err := p.Validate()
	if err != nil {
		return 0, fmt.Errorf("pgstore: prune documents: %w", err)
	}
	t := s.t("documents")
	var total, before int
	err = s.q(ctx).QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE name < $3) FROM `+t+` WHERE ns = $1 AND collection = $2`,
		s.cfg.ns, p.Collection, p.Before).Scan(&total, &before)
	if err != nil {
		return 0, s.wrap(ctx, "prune documents", err)
	}
	n := p.PruneCount(total, before, limit)
	if n == 0 {
		return 0, nil
	}
	var deleted int
	err = s.q(ctx).QueryRow(ctx, `WITH d AS (DELETE FROM `+t+` WHERE ns = $1 AND collection = $2 AND name IN (
		SELECT name FROM `+t+` WHERE ns = $1 AND collection = $2 ORDER BY name LIMIT $3) RETURNING version),
		`+s.forgetDocs()+`
		SELECT count(*) FROM d`, s.cfg.ns, p.Collection, n).Scan(&deleted)
	if err != nil {
		return 0, s.wrap(ctx, "prune documents", err)
	}
	return deleted, nil
}
