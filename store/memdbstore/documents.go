package memdbstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/btree"

	"github.com/jobkit/job/store"
)

// documentTable holds the named documents (store.Documents): one B-tree
// per collection, ordered by name, so a page and a prune cost O(log n)
// plus what they return, under a lock of their own (documents never take
// part in a queue operation).
type documentTable struct {
	mu     sync.RWMutex
	byColl map[string]*btree.BTreeG[*store.Document]
	// gone is, per collection, the greatest Version of a document
	// deleted or pruned: a new document starts above it (see
	// store.Documents).
	gone map[string]int64
}

// forget records that a document of collection c at version v is gone.
func (t *documentTable) forget(c string, v int64) {
	if t.gone == nil {
		t.gone = map[string]int64{}
	}
	t.gone[c] = max(t.gone[c], v)
}

func docLess(a, b *store.Document) bool { return a.Name < b.Name }

// coll returns the tree of collection c, made when create is set (nil
// otherwise when there is none).
func (t *documentTable) coll(c string, create bool) *btree.BTreeG[*store.Document] {
	tr := t.byColl[c]
	if tr == nil && create {
		if t.byColl == nil {
			t.byColl = map[string]*btree.BTreeG[*store.Document]{}
		}
		tr = btree.NewG(16, docLess)
		t.byColl[c] = tr
	}
	return tr
}

// PutDocument implements store.Documents.
func (s *Store) PutDocument(ctx context.Context, p *store.PutDocumentParams) (*store.Document, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("memdbstore: put document: %w", err)
	}
	if err := ctxErr(ctx, "put document"); err != nil {
		return nil, err
	}
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	tr := s.docs.coll(p.Collection, true)
	old, ok := tr.Get(&store.Document{Name: p.Name})
	var have int64
	if ok {
		have = old.Version
	}
	if p.IfVersion != store.AnyVersion && p.IfVersion != have {
		return nil, fmt.Errorf("memdbstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, have))
	}
	version := s.docs.gone[p.Collection] + 1
	if ok {
		version = old.Version + 1
	}
	d := &store.Document{
		Collection: p.Collection, Name: p.Name, Body: append([]byte(nil), p.Body...),
		Version: version, CreatedAt: p.Now, UpdatedAt: p.Now,
	}
	if ok {
		d.CreatedAt = old.CreatedAt
	}
	tr.ReplaceOrInsert(d)
	return d.Clone(), nil
}

// GetDocument implements store.Documents.
func (s *Store) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	if err := ctxErr(ctx, "get document"); err != nil {
		return nil, err
	}
	s.docs.mu.RLock()
	defer s.docs.mu.RUnlock()
	if tr := s.docs.coll(collection, false); tr != nil {
		if d, ok := tr.Get(&store.Document{Name: name}); ok {
			return d.Clone(), nil
		}
	}
	return nil, fmt.Errorf("memdbstore: %w", store.DocumentNotFound(collection, name))
}

// ListDocuments implements store.Documents.
func (s *Store) ListDocuments(ctx context.Context, p *store.ListDocumentsParams) (*store.DocumentPage, error) {
	limit, err := p.Validate()
	if err != nil {
		return nil, fmt.Errorf("memdbstore: list documents: %w", err)
	}
	if err := ctxErr(ctx, "list documents"); err != nil {
		return nil, err
	}
	s.docs.mu.RLock()
	defer s.docs.mu.RUnlock()
	page := &store.DocumentPage{Documents: []*store.Document{}}
	tr := s.docs.coll(p.Collection, false)
	if tr == nil {
		return page, nil
	}
	from, _ := p.Start()
	more := false
	tr.AscendGreaterOrEqual(&store.Document{Name: from}, func(d *store.Document) bool {
		if d.Name <= p.After {
			return true
		}
		if !p.Match(d.Name) {
			return false // past the names with the prefix
		}
		if len(page.Documents) == limit {
			more = true
			return false
		}
		page.Documents = append(page.Documents, d.Clone())
		return true
	})
	if more {
		page.Next = page.Documents[len(page.Documents)-1].Name
	}
	return page, nil
}

// DeleteDocument implements store.Documents.
func (s *Store) DeleteDocument(ctx context.Context, p *store.DeleteDocumentParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("memdbstore: delete document: %w", err)
	}
	if err := ctxErr(ctx, "delete document"); err != nil {
		return err
	}
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	tr := s.docs.coll(p.Collection, false)
	if tr == nil {
		return fmt.Errorf("memdbstore: %w", store.DocumentNotFound(p.Collection, p.Name))
	}
	old, ok := tr.Get(&store.Document{Name: p.Name})
	switch {
	case !ok:
		return fmt.Errorf("memdbstore: %w", store.DocumentNotFound(p.Collection, p.Name))
	case p.IfVersion != 0 && p.IfVersion != old.Version:
		return fmt.Errorf("memdbstore: %w", store.DocumentConflict(p.Collection, p.Name, p.IfVersion, old.Version))
	}
	tr.Delete(old)
	s.docs.forget(p.Collection, old.Version)
	return nil
}

// PruneDocuments implements store.Documents.
func (s *Store) PruneDocuments(ctx context.Context, p *store.PruneDocumentsParams) (int, error) {
	limit, err := p.Validate()
	if err != nil {
		return 0, fmt.Errorf("memdbstore: prune documents: %w", err)
	}
	if err := ctxErr(ctx, "prune documents"); err != nil {
		return 0, err
	}
	s.docs.mu.Lock()
	defer s.docs.mu.Unlock()
	tr := s.docs.coll(p.Collection, false)
	if tr == nil {
		return 0, nil
	}
	before := 0
	if p.Before != "" {
		tr.AscendLessThan(&store.Document{Name: p.Before}, func(*store.Document) bool { before++; return before < limit })
	}
	n := p.PruneCount(tr.Len(), before, limit)
	for range n {
		if d, ok := tr.DeleteMin(); ok {
			s.docs.forget(p.Collection, d.Version)
		}
	}
	return n, nil
}
