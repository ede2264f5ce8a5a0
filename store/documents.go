package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Documents keeps named JSON documents in collections: the small,
// rarely written records of features built on the engine (calendars,
// alert rules, silences, incidents, notification channels, notification
// history). A document is keyed by its collection and its name, in the
// store's namespace like every other record; the store keeps its body as
// given (byte for byte) and knows nothing of what it means.
//
// Every write is a compare-and-set on the document's Version, so two
// writers never lose each other's change: the loser gets ErrConflict,
// reads the document again and retries.
//
// Lists are in byte order of name, with a cursor. A collection that only
// grows (a history) gives its documents time-sortable names (a fixed-width
// UTC timestamp first, such as "20261124T001500.000000000Z-<id>") so name
// order is time order, and bounds itself with PruneDocuments.
type Documents interface {
	// PutDocument creates or replaces the document p.Name of
	// p.Collection if p.IfVersion holds: 0 creates only (ErrConflict when
	// the name is taken), N > 0 replaces only the document stored at
	// version N (ErrConflict when it is at another, ErrNotFound when there
	// is none), AnyVersion creates or replaces whatever is stored. The
	// store assigns the new Version: one more than the replaced one's, and
	// for a new document one more than the greatest Version of a document
	// of the collection ever deleted or pruned (1 in a collection that
	// never lost one), so a document counts its own changes, and one
	// deleted and created again never meets a stale IfVersion. It keeps
	// CreatedAt of a replaced document (p.Now for a new one) and sets
	// UpdatedAt to p.Now. It returns the document as stored. Parameters that fail Validate are
	// ErrInvalid (or ErrTooLarge for a body above MaxDocumentBytes) and
	// nothing is stored.
	PutDocument(ctx context.Context, p *PutDocumentParams) (*Document, error)
	// GetDocument returns the document name of collection, or an error
	// wrapping ErrNotFound.
	GetDocument(ctx context.Context, collection, name string) (*Document, error)
	// ListDocuments returns a page of the documents of p.Collection whose
	// names start with p.Prefix, in byte order of name, those after
	// p.After, at most p.Limit of them. The page's Next is the After of
	// the next page, empty on the last. Documents of other collections
	// are never listed.
	ListDocuments(ctx context.Context, p *ListDocumentsParams) (*DocumentPage, error)
	// DeleteDocument removes a document: ErrNotFound when there is none,
	// ErrConflict when p.IfVersion is not 0 and differs from its Version.
	DeleteDocument(ctx context.Context, p *DeleteDocumentParams) error
	// PruneDocuments deletes the documents of p.Collection that come
	// first in name order: those whose names sort before p.Before (when
	// set) and those beyond the p.Keep last ones (when Keep > 0), at most
	// p.Limit of them, first names first. It returns how many it deleted;
	// a count equal to the limit means more may be left. For a collection
	// with time-sortable names this deletes the oldest.
	PruneDocuments(ctx context.Context, p *PruneDocumentsParams) (int, error)
}

// Document is one named JSON document of a collection.
type Document struct {
	// Collection groups documents of one sort ("calendars",
	// "alert-rules"): 1 to MaxCollectionName bytes of lower-case ASCII
	// letters, digits, '-', '_' and '.'.
	Collection string `json:"collection"`
	// Name identifies the document in its collection: 1 to
	// MaxDocumentName bytes of UTF-8 without control characters.
	Name string `json:"name"`
	// Body is the document, one JSON value of at most MaxDocumentBytes,
	// kept byte for byte.
	Body json.RawMessage `json:"body"`
	// Version is assigned by the store at each write (1 for a new
	// document, one more at each change; see PutDocument); pass it back
	// as IfVersion to replace or delete what was read.
	Version int64 `json:"version"`
	// CreatedAt and UpdatedAt are set by the store from
	// PutDocumentParams.Now.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Clone returns a deep copy of d.
func (d *Document) Clone() *Document {
	if d == nil {
		return nil
	}
	c := *d
	c.Body = append(json.RawMessage(nil), d.Body...)
	return &c
}

// Limits of documents.
const (
	// MaxCollectionName is the longest collection name, in bytes.
	MaxCollectionName = 64
	// MaxDocumentName is the longest document name, in bytes.
	MaxDocumentName = 512
	// MaxDocumentBytes is the largest document body, in bytes: room for a
	// calendar of some thousand dates, well inside one value of every
	// store (etcd's default request limit is 1.5 MiB).
	MaxDocumentBytes = 256 << 10
	// DefaultDocumentPage is the page size of a ListDocuments with no
	// Limit, and MaxDocumentPage the largest Limit it takes.
	DefaultDocumentPage = 100
	MaxDocumentPage     = 1000
	// DefaultPruneDocuments is the Limit of a PruneDocuments with none,
	// and MaxPruneDocuments the largest it takes.
	DefaultPruneDocuments = 1000
	MaxPruneDocuments     = 10000
)

// PutDocumentParams is the argument of Documents.PutDocument.
type PutDocumentParams struct {
	Collection string
	Name       string
	// Body is the document: one JSON value.
	Body json.RawMessage
	// IfVersion is the compare-and-set condition: 0 creates only, the
	// Version read replaces only that version, AnyVersion creates or
	// replaces.
	IfVersion int64
	// Now is the time recorded as UpdatedAt (and CreatedAt of a new
	// document). Required.
	Now time.Time
}

// Validate checks the parameters every plugin requires: a collection and
// a name (see CheckDocumentKey), a body that is one JSON value of at most
// MaxDocumentBytes (ErrTooLarge above), a known IfVersion and a time.
func (p *PutDocumentParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil put-document parameters", ErrInvalid)
	}
	if err := CheckDocumentKey(p.Collection, p.Name); err != nil {
		return err
	}
	switch {
	case len(p.Body) > MaxDocumentBytes:
		return fmt.Errorf("%w: document %s/%q: body of %d bytes; keep it within %d (store.MaxDocumentBytes), or split it into several documents", ErrTooLarge, p.Collection, p.Name, len(p.Body), MaxDocumentBytes)
	case len(p.Body) == 0:
		return fmt.Errorf("%w: document %s/%q without a body; give one JSON value (such as {} or null)", ErrInvalid, p.Collection, p.Name)
	case !json.Valid(p.Body):
		return fmt.Errorf("%w: document %s/%q: the body is not one JSON value; encode it with encoding/json", ErrInvalid, p.Collection, p.Name)
	case p.IfVersion < AnyVersion:
		return fmt.Errorf("%w: document %s/%q: IfVersion %d; want 0 (create), the version read (replace) or store.AnyVersion", ErrInvalid, p.Collection, p.Name, p.IfVersion)
	case p.Now.IsZero():
		return fmt.Errorf("%w: document %s/%q: put without a time (set Now)", ErrInvalid, p.Collection, p.Name)
	}
	return nil
}

// CheckCollection returns an error wrapping ErrInvalid when c cannot name
// a collection.
func CheckCollection(c string) error {
	switch {
	case c == "":
		return fmt.Errorf("%w: document without a collection; name one, such as \"calendars\"", ErrInvalid)
	case len(c) > MaxCollectionName:
		return fmt.Errorf("%w: collection name of %d bytes; at most %d", ErrInvalid, len(c), MaxCollectionName)
	}
	for _, r := range c {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%w: collection %q holds %q; use lower-case letters, digits, '-', '_' and '.'", ErrInvalid, c, r)
		}
	}
	return nil
}

// CheckDocumentKey returns an error wrapping ErrInvalid when collection
// (see CheckCollection) or name cannot key a document: a name is 1 to
// MaxDocumentName bytes of UTF-8 without control characters.
func CheckDocumentKey(collection, name string) error {
	if err := CheckCollection(collection); err != nil {
		return err
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: document of collection %s without a name", ErrInvalid, collection)
	case len(name) > MaxDocumentName:
		return fmt.Errorf("%w: document name of %d bytes in collection %s; at most %d", ErrInvalid, len(name), collection, MaxDocumentName)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("%w: document name %q in collection %s holds invalid UTF-8 or control characters; use printable text", ErrInvalid, name, collection)
	}
	return nil
}

// ListDocumentsParams is the argument of Documents.ListDocuments.
type ListDocumentsParams struct {
	// Collection to list. Required.
	Collection string
	// Prefix, when set, lists only the names that start with it.
	Prefix string
	// After is the cursor: only names that sort after it are listed; ""
	// starts at the first.
	After string
	// Limit is the page size: 0 means DefaultDocumentPage; at most
	// MaxDocumentPage.
	Limit int
}

// Validate checks the parameters and returns the page size to use.
func (p *ListDocumentsParams) Validate() (int, error) {
	switch {
	case p == nil:
		return 0, fmt.Errorf("%w: list documents without parameters; set at least the Collection", ErrInvalid)
	case p.Limit < 0 || p.Limit > MaxDocumentPage:
		return 0, fmt.Errorf("%w: list documents of %s with limit %d; want 0 (the default, %d) up to %d, and page with After", ErrInvalid, p.Collection, p.Limit, DefaultDocumentPage, MaxDocumentPage)
	}
	if err := CheckCollection(p.Collection); err != nil {
		return 0, err
	}
	if p.Limit == 0 {
		return DefaultDocumentPage, nil
	}
	return p.Limit, nil
}

// Start returns where a listing of p starts in name order: after After
// (inclusive false) or at Prefix (inclusive true), whichever is later, so
// a store may read a range from it up to where the names with Prefix end.
func (p *ListDocumentsParams) Start() (from string, inclusive bool) {
	if p.After >= p.Prefix {
		return p.After, false
	}
	return p.Prefix, true
}

// Match reports whether name belongs to the listing of p by its prefix
// and cursor.
func (p *ListDocumentsParams) Match(name string) bool {
	return name > p.After && strings.HasPrefix(name, p.Prefix)
}

// DocumentPage is one page of ListDocuments.
type DocumentPage struct {
	// Documents in byte order of name.
	Documents []*Document
	// Next is the After of the next page, or empty when this is the last.
	Next string
}

// DeleteDocumentParams is the argument of Documents.DeleteDocument.
type DeleteDocumentParams struct {
	Collection string
	Name       string
	// IfVersion, when not 0, deletes only the document at that version.
	IfVersion int64
}

// Validate checks the parameters every plugin requires.
func (p *DeleteDocumentParams) Validate() error {
	if p == nil {
		return fmt.Errorf("%w: nil delete-document parameters", ErrInvalid)
	}
	if err := CheckDocumentKey(p.Collection, p.Name); err != nil {
		return err
	}
	if p.IfVersion < 0 {
		return fmt.Errorf("%w: delete document %s/%q with IfVersion %d; want 0 (any version) or the version read", ErrInvalid, p.Collection, p.Name, p.IfVersion)
	}
	return nil
}

// PruneDocumentsParams is the argument of Documents.PruneDocuments. At
// least one of Before and Keep is set.
type PruneDocumentsParams struct {
	// Collection to prune. Required.
	Collection string
	// Before, when set, deletes the documents whose names sort before it.
	Before string
	// Keep, when more than 0, deletes all but the Keep last documents in
	// name order.
	Keep int
	// Limit bounds how many one call deletes: 0 means
	// DefaultPruneDocuments; at most MaxPruneDocuments.
	Limit int
}

// Validate checks the parameters and returns the limit to use.
func (p *PruneDocumentsParams) Validate() (int, error) {
	if p == nil {
		return 0, fmt.Errorf("%w: nil prune-documents parameters", ErrInvalid)
	}
	if err := CheckCollection(p.Collection); err != nil {
		return 0, err
	}
	switch {
	case p.Keep < 0:
		return 0, fmt.Errorf("%w: prune documents of %s keeping %d; want 0 (no count rule) or more", ErrInvalid, p.Collection, p.Keep)
	case p.Before == "" && p.Keep == 0:
		return 0, fmt.Errorf("%w: prune documents of %s without a rule; set Before (a name) or Keep (how many to keep)", ErrInvalid, p.Collection)
	case p.Limit < 0 || p.Limit > MaxPruneDocuments:
		return 0, fmt.Errorf("%w: prune documents of %s with limit %d; want 0 (the default, %d) up to %d, and call again", ErrInvalid, p.Collection, p.Limit, DefaultPruneDocuments, MaxPruneDocuments)
	case p.Limit == 0:
		return DefaultPruneDocuments, nil
	}
	return p.Limit, nil
}

// PruneCount returns how many of the first documents in name order a
// prune deletes, given how many the collection holds (total), how many of
// them sort before p.Before (before; ignored when Before is empty), and
// the limit Validate returned.
func (p *PruneDocumentsParams) PruneCount(total, before, limit int) int {
	n := 0
	if p.Before != "" {
		n = before
	}
	if p.Keep > 0 {
		n = max(n, total-p.Keep)
	}
	return max(0, min(n, limit))
}

// DocumentNotFound is the error of a lookup of a document that is not
// stored; it wraps ErrNotFound.
func DocumentNotFound(collection, name string) error {
	return fmt.Errorf("%w: no document %q in collection %s; create it with PutDocument and IfVersion 0", ErrNotFound, name, collection)
}

// DocumentConflict is the error of a compare-and-set on a document that
// wanted version want (0: absent) and found have (0: absent); it wraps
// ErrConflict, or ErrNotFound when an update finds no document.
func DocumentConflict(collection, name string, want, have int64) error {
	switch {
	case have == 0:
		return fmt.Errorf("%w: document %q of collection %s does not exist (wanted version %d); create it with IfVersion 0", ErrNotFound, name, collection, want)
	case want == 0:
		return fmt.Errorf("%w: document %q of collection %s exists already (version %d); replace it with IfVersion %d", ErrConflict, name, collection, have, have)
	}
	return fmt.Errorf("%w: document %q of collection %s is at version %d, not %d (changed by someone else); read it again and retry", ErrConflict, name, collection, have, want)
}
