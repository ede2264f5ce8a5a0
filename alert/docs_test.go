package alert_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
)

// memDocs keeps documents in a map, with the compare-and-set the store's
// Documents gives, for the tests of this package.
type memDocs struct {
	mu   sync.Mutex
	ver  int64
	docs map[string]map[string]*alert.Document
}

func newMemDocs() *memDocs { return &memDocs{docs: map[string]map[string]*alert.Document{}} }

func (m *memDocs) PutDocument(_ context.Context, p *alert.PutDocumentParams) (*alert.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &alert.Document{Collection: p.Collection, Name: p.Name}
	col := m.docs[d.Collection]
	if col == nil {
		col = map[string]*alert.Document{}
		m.docs[d.Collection] = col
	}
	have := col[d.Name]
	switch {
	case p.IfVersion == store.AnyVersion:
	case p.IfVersion == 0 && have != nil:
		return nil, fmt.Errorf("%w: %s/%s exists", store.ErrConflict, d.Collection, d.Name)
	case p.IfVersion > 0 && have == nil:
		return nil, fmt.Errorf("%w: %s/%s", store.ErrNotFound, d.Collection, d.Name)
	case p.IfVersion > 0 && have.Version != p.IfVersion:
		return nil, fmt.Errorf("%w: %s/%s at %d, not %d", store.ErrConflict, d.Collection, d.Name, have.Version, p.IfVersion)
	}
	m.ver++
	out := &alert.Document{Collection: d.Collection, Name: d.Name, Body: slices.Clone(p.Body), Version: m.ver, CreatedAt: p.Now, UpdatedAt: p.Now}
	if have != nil {
		out.CreatedAt = have.CreatedAt
	}
	col[d.Name] = out
	c := *out
	return &c, nil
}

func (m *memDocs) GetDocument(_ context.Context, col, name string) (*alert.Document, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.docs[col][name]
	if d == nil {
		return nil, fmt.Errorf("%w: %s/%s", store.ErrNotFound, col, name)
	}
	c := *d
	return &c, nil
}

func (m *memDocs) ListDocuments(_ context.Context, p *alert.ListDocumentsParams) (*alert.DocumentPage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.docs[p.Collection] {
		if n > p.After {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	limit := p.Limit
	if limit == 0 {
		limit = 100
	}
	out := &alert.DocumentPage{}
	for i, n := range names {
		if i == limit {
			out.Next = names[i-1]
			break
		}
		c := *m.docs[p.Collection][n]
		out.Documents = append(out.Documents, &c)
	}
	return out, nil
}

func (m *memDocs) DeleteDocument(_ context.Context, p *alert.DeleteDocumentParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.docs[p.Collection][p.Name]
	if d == nil {
		return fmt.Errorf("%w: %s/%s", store.ErrNotFound, p.Collection, p.Name)
	}
	if p.IfVersion != 0 && d.Version != p.IfVersion {
		return fmt.Errorf("%w: %s/%s", store.ErrConflict, p.Collection, p.Name)
	}
	delete(m.docs[p.Collection], p.Name)
	return nil
}

// count returns how many documents col holds.
func (m *memDocs) count(col string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.docs[col])
}
