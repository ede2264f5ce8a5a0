package alert

import (
	"context"
	"encoding/json"
	"time"
)

// Document is one named JSON document of a collection, as the store keeps
// it: rules, silences, incidents, channels, notifications and the
// evaluator's state are each a collection of them.
type Document struct {
	Collection string
	Name       string
	// Body is the document's JSON.
	Body json.RawMessage
	// Version is assigned by the store at each write; a write that names
	// a Version other than the stored one is store.ErrConflict.
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// PutDocumentParams is the argument of Documents.PutDocument.
type PutDocumentParams struct {
	Collection string
	Name       string
	Body       json.RawMessage
	// IfVersion is 0 to create (store.ErrConflict when the name is taken),
	// the stored Version to replace it, or store.AnyVersion for either.
	IfVersion int64
	Now       time.Time
}

// ListDocumentsParams is the argument of Documents.ListDocuments.
type ListDocumentsParams struct {
	Collection string
	// After is the name to start after (the previous page's Next).
	After string
	// Limit bounds the page; 0 is the store's default page.
	Limit int
}

// DocumentPage is one page of a collection, in name order.
type DocumentPage struct {
	Documents []*Document
	// Next is the After of the next page; empty on the last page.
	Next string
}

// DeleteDocumentParams is the argument of Documents.DeleteDocument.
type DeleteDocumentParams struct {
	Collection string
	Name       string
	// IfVersion, when not 0, deletes only that Version (else
	// store.ErrConflict).
	IfVersion int64
}

// Documents is what alerting keeps its data in: named JSON documents in
// collections, each write a compare-and-set on the document's Version.
// Several jobd share one, and the compare-and-set is what makes each
// incident transition and each delivery happen once in the cluster.
// Missing documents are store.ErrNotFound.
type Documents interface {
	PutDocument(ctx context.Context, p *PutDocumentParams) (*Document, error)
	GetDocument(ctx context.Context, collection, name string) (*Document, error)
	ListDocuments(ctx context.Context, p *ListDocumentsParams) (*DocumentPage, error)
	DeleteDocument(ctx context.Context, p *DeleteDocumentParams) error
}

func decodeInto(d *Document, v any) error { return json.Unmarshal(d.Body, v) }
