package redisscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Document scripts (store.Documents). Like the trigger scripts they are
// not prefixed by lib.lua: each names in KEYS the only keys it touches.
var (
	DocumentPut    = loadBare("document_put", "")
	DocumentDelete = loadBare("document_delete", "")
	DocumentList   = loadBare("document_list", "no-writes")
	DocumentPrune  = loadBare("document_prune", "")
)

func init() {
	All = append(All, DocumentPut, DocumentDelete, DocumentList, DocumentPrune)
}

// documentKeys are the KEYS of the document scripts for collection c:
// doc:<c> (HASH name -> "<version> <created ns> <updated ns> <body>"),
// docn:<c> (ZSET of names) and docg:<c> (the greatest version of a
// document of the collection deleted or pruned), all under the
// namespace's hash tag. (docv, the namespace's version counter of earlier
// versions, is no longer used.) A collection name holds only
// [a-z0-9._-] (store.CheckCollection), so it never ends a key part early
// or changes the hash tag.
func (k Keys) documentKeys(c string) []string {
	return []string{k.Prefix + "doc:" + c, k.Prefix + "docn:" + c, k.Prefix + "docg:" + c}
}

// runDocument runs a document script with the keys of collection c.
func (c *Core) runDocument(ctx context.Context, s *Script, coll, what string, args ...string) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.name, what, err)
	}
	v, err := c.r.Run(ctx, s, c.keys.documentKeys(coll), args)
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

// decodeDocument decodes a stored value "<version> <created ns> <updated
// ns> <body>".
func (c *Core) decodeDocument(coll, name, raw string) (*store.Document, error) {
	vs, rest, ok1 := strings.Cut(raw, " ")
	cs, rest, ok2 := strings.Cut(rest, " ")
	us, body, ok3 := strings.Cut(rest, " ")
	ver, err1 := strconv.ParseInt(vs, 10, 64)
	created, err2 := strconv.ParseInt(cs, 10, 64)
	updated, err3 := strconv.ParseInt(us, 10, 64)
	if !ok1 || !ok2 || !ok3 || err1 != nil || err2 != nil || err3 != nil || ver <= 0 {
		return nil, fmt.Errorf("%w: %s: document %q of collection %s: malformed stored value; delete it (without IfVersion) or overwrite it with AnyVersion", store.ErrCorrupt, c.name, name, coll)
	}
	return &store.Document{
		Collection: coll, Name: name, Body: []byte(body), Version: ver,
		CreatedAt: time.Unix(0, created).UTC(), UpdatedAt: time.Unix(0, updated).UTC(),
	}, nil
}

// PutDocument implements store.Documents.
func (c *Core) PutDocument(ctx context.Context, p *store.PutDocumentParams) (*store.Document, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: put document: %w", c.name, err)
	}
	what := fmt.Sprintf("put document %s/%q", p.Collection, p.Name)
	now := p.Now.UnixNano()
	v, err := c.runDocument(ctx, DocumentPut, p.Collection, what, p.Name, strconv.FormatInt(p.IfVersion, 10), strconv.FormatInt(now, 10), string(p.Body))
	if err != nil {
		return nil, err
	}
	f := asArray(v)
	if len(f) != 3 {
		return nil, fmt.Errorf("%s: %s: malformed reply %v", c.name, what, v)
	}
	if asInt(f[0]) != 0 {
		have, err := strconv.ParseInt(asString(f[1]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %s: the stored value is malformed; overwrite it with AnyVersion or delete it", store.ErrCorrupt, c.name, what)
		}
		return nil, fmt.Errorf("%s: %w", c.name, store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
	}
	return &store.Document{
		Collection: p.Collection, Name: p.Name, Body: append([]byte(nil), p.Body...), Version: asInt(f[1]),
		CreatedAt: time.Unix(0, asInt(f[2])).UTC(), UpdatedAt: time.Unix(0, now).UTC(),
	}, nil
}

// GetDocument implements store.Documents.
func (c *Core) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: get document %s/%q: %w", c.name, collection, name, err)
	}
	if err := store.CheckCollection(collection); err != nil {
		return nil, fmt.Errorf("%s: get document: %w", c.name, err)
	}
	v, err := c.r.Do(ctx, "HGET", c.keys.documentKeys(collection)[0], name)
	if err != nil {
		return nil, fmt.Errorf("%s: get document %s/%q: %w", c.name, collection, name, err)
	}
	if v == nil {
		return nil, fmt.Errorf("%s: %w", c.name, store.DocumentNotFound(collection, name))
	}
	return c.decodeDocument(collection, name, asString(v))
}

// ListDocuments implements store.Documents. Values that cannot be decoded
// are left out and named in an error wrapping store.ErrCorrupt, returned
// with the rest of the page.
func (c *Core) ListDocuments(ctx context.Context, p *store.ListDocumentsParams) (*store.DocumentPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("%s: list documents: %w", c.name, err)
	}
	lo, hi := "-", "+"
	switch from, incl := p.Start(); {
	case incl:
		lo = "[" + from
	case from != "":
		lo = "(" + from
	}
	if p.Prefix != "" {
		// A name is UTF-8, so it never holds 0xff: every name with the
		// prefix sorts before prefix+"\xff", every other after it.
		hi = "(" + p.Prefix + "\xff"
	}
	what := "list documents of " + p.Collection
	v, err := c.runDocument(ctx, DocumentList, p.Collection, what, lo, hi, itoa(limit))
	if err != nil {
		return nil, err
	}
	a := asArray(v)
	if len(a)%2 != 1 {
		return nil, fmt.Errorf("%s: %s: malformed reply of %d values", c.name, what, len(a))
	}
	page := &store.DocumentPage{Documents: make([]*store.Document, 0, len(a)/2), Next: asString(a[len(a)-1])}
	var bad []string
	for i := 0; i+1 < len(a); i += 2 {
		name := asString(a[i])
		d, err := c.decodeDocument(p.Collection, name, asString(a[i+1]))
		if err != nil {
			bad = append(bad, strconv.Quote(name))
			continue
		}
		page.Documents = append(page.Documents, d)
	}
	if len(bad) > 0 {
		return page, fmt.Errorf("%w: %s: the stored documents %s of collection %s cannot be decoded; delete them", store.ErrCorrupt, c.name, strings.Join(bad, ", "), p.Collection)
	}
	return page, nil
}

// DeleteDocument implements store.Documents.
func (c *Core) DeleteDocument(ctx context.Context, p *store.DeleteDocumentParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s: delete document: %w", c.name, err)
	}
	what := fmt.Sprintf("delete document %s/%q", p.Collection, p.Name)
	v, err := c.runDocument(ctx, DocumentDelete, p.Collection, what, p.Name, strconv.FormatInt(p.IfVersion, 10))
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
		return fmt.Errorf("%s: %w", c.name, store.DocumentNotFound(p.Collection, p.Name))
	}
	have, err := strconv.ParseInt(asString(f[1]), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s: %s: the stored value is malformed; delete it without IfVersion", store.ErrCorrupt, c.name, what)
	}
	return fmt.Errorf("%s: %w", c.name, store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
}

// PruneDocuments implements store.Documents in one script run.
func (c *Core) PruneDocuments(ctx context.Context, p *store.PruneDocumentsParams) (int, error) {
	limit, err := p.Validate()
	if err != nil {
		return 0, fmt.Errorf("%s: prune documents: %w", c.name, err)
	}
	v, err := c.runDocument(ctx, DocumentPrune, p.Collection, "prune documents of "+p.Collection, p.Before, itoa(p.Keep), itoa(limit))
	if err != nil {
		return 0, err
	}
	return int(asInt(v)), nil
}
