package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// documentTests are the checks of store.Documents.
var documentTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"DocumentsCRUD", testDocumentsCRUD},
	{"DocumentsConflict", testDocumentsConflict},
	{"DocumentsList", testDocumentsList},
	{"DocumentsIsolation", testDocumentsIsolation},
	{"DocumentsInvalid", testDocumentsInvalid},
	{"DocumentsPrune", testDocumentsPrune},
}

func runDocuments(t *testing.T, h Harness) {
	for _, tc := range documentTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// docBody is a body with whitespace and key order a re-encoding would
// change, so a store that does not keep it byte for byte is caught.
func docBody(s string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{ "z": 1,  "a": %q, "u": "ünï\u00e9" }`, s))
}

func (e *env) putDoc(s store.Store, coll, name string, body json.RawMessage, ifVersion int64, now time.Time) *store.Document {
	e.t.Helper()
	d, err := s.PutDocument(e.ctx, &store.PutDocumentParams{Collection: coll, Name: name, Body: body, IfVersion: ifVersion, Now: now})
	if err != nil {
		e.t.Fatalf("PutDocument(%s/%q, IfVersion %d): %v", coll, name, ifVersion, err)
	}
	return d
}

func (e *env) getDoc(s store.Store, coll, name string) *store.Document {
	e.t.Helper()
	d, err := s.GetDocument(e.ctx, coll, name)
	if err != nil {
		e.t.Fatalf("GetDocument(%s/%q): %v", coll, name, err)
	}
	return d
}

func (e *env) noDoc(s store.Store, coll, name string) {
	e.t.Helper()
	d, err := s.GetDocument(e.ctx, coll, name)
	wantErr(e.t, fmt.Sprintf("GetDocument(%s/%q) (got %+v)", coll, name, d), err, store.ErrNotFound)
}

// checkDoc fails unless got is the document coll/name with body at
// version v, created at c and updated at u.
func checkDoc(t testing.TB, what string, got *store.Document, coll, name string, body json.RawMessage, v int64, c, u time.Time) {
	t.Helper()
	switch {
	case got == nil:
		t.Fatalf("%s: nil document", what)
	case got.Collection != coll || got.Name != name:
		t.Fatalf("%s: document %s/%q, want %s/%q", what, got.Collection, got.Name, coll, name)
	case !bytes.Equal(got.Body, body):
		t.Fatalf("%s: body %s, want %s (byte for byte)", what, got.Body, body)
	case v != 0 && got.Version != v:
		t.Fatalf("%s: version %d, want %d", what, got.Version, v)
	case got.Version <= 0:
		t.Fatalf("%s: version %d, want a positive one", what, got.Version)
	case !got.CreatedAt.Equal(c) || !got.UpdatedAt.Equal(u):
		t.Fatalf("%s: created %v, updated %v; want %v, %v", what, got.CreatedAt, got.UpdatedAt, c, u)
	}
}

func testDocumentsCRUD(t *testing.T, h Harness) {
	e := setup(t, h)
	const c = "calendars"
	e.noDoc(e.s, c, "fr")
	err := e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c, Name: "fr"})
	wantErr(t, "DeleteDocument of an absent document", err, store.ErrNotFound)

	b1 := docBody("one")
	made := e.putDoc(e.s, c, "fr", b1, 0, at(time.Second))
	// A new document is at version 1, whatever the namespace stored
	// before in other collections, and counts its own changes.
	checkDoc(t, "created document", made, c, "fr", b1, 1, at(time.Second), at(time.Second))
	checkDoc(t, "read document", e.getDoc(e.s, c, "fr"), c, "fr", b1, made.Version, at(time.Second), at(time.Second))

	// Returned records are copies.
	made.Body[0] = 'X'
	checkDoc(t, "document after changing a returned copy", e.getDoc(e.s, c, "fr"), c, "fr", b1, made.Version, at(time.Second), at(time.Second))

	// Replace what was read: a greater version, CreatedAt kept.
	b2 := json.RawMessage(`[1, 2,3]`)
	upd := e.putDoc(e.s, c, "fr", b2, made.Version, at(2*time.Second))
	checkDoc(t, "replaced document", upd, c, "fr", b2, 0, at(time.Second), at(2*time.Second))
	if upd.Version != made.Version+1 {
		t.Fatalf("version after a replace: %d, want %d", upd.Version, made.Version+1)
	}
	checkDoc(t, "read replaced document", e.getDoc(e.s, c, "fr"), c, "fr", b2, upd.Version, at(time.Second), at(2*time.Second))

	// AnyVersion replaces whatever is there, and creates.
	b3 := json.RawMessage(`"just a string"`)
	anyv := e.putDoc(e.s, c, "fr", b3, store.AnyVersion, at(3*time.Second))
	checkDoc(t, "document put with AnyVersion", anyv, c, "fr", b3, upd.Version+1, at(time.Second), at(3*time.Second))
	other := e.putDoc(e.s, c, "de", json.RawMessage(`null`), store.AnyVersion, at(4*time.Second))
	checkDoc(t, "document created with AnyVersion", other, c, "de", json.RawMessage(`null`), 1, at(4*time.Second), at(4*time.Second))

	// Delete at its version, then without one.
	if err := e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c, Name: "fr", IfVersion: anyv.Version}); err != nil {
		t.Fatalf("DeleteDocument at its version: %v", err)
	}
	e.noDoc(e.s, c, "fr")
	err = e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c, Name: "fr"})
	wantErr(t, "DeleteDocument twice", err, store.ErrNotFound)
	if err := e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c, Name: "de"}); err != nil {
		t.Fatalf("DeleteDocument without a version: %v", err)
	}
	if l := e.listDocs(e.s, &store.ListDocumentsParams{Collection: c}); len(l.Documents) != 0 || l.Next != "" {
		t.Fatalf("ListDocuments after deleting all: %d documents, next %q; want none", len(l.Documents), l.Next)
	}

	// Created again: a new life, with a version never given before, so a
	// writer that read the old document cannot replace the new one.
	again := e.putDoc(e.s, c, "fr", b1, 0, at(5*time.Second))
	checkDoc(t, "document created again", again, c, "fr", b1, 0, at(5*time.Second), at(5*time.Second))
	if again.Version <= anyv.Version {
		t.Fatalf("version of a document created again: %d, want more than any before (%d)", again.Version, anyv.Version)
	}
	for _, v := range []int64{made.Version, upd.Version, anyv.Version} {
		_, err = e.s.PutDocument(e.ctx, &store.PutDocumentParams{Collection: c, Name: "fr", Body: b2, IfVersion: v, Now: at(6 * time.Second)})
		wantErr(t, fmt.Sprintf("replace with version %d of the deleted document", v), err, store.ErrConflict)
	}
	// Its changes count on from there.
	next := e.putDoc(e.s, c, "fr", b2, again.Version, at(7*time.Second))
	if next.Version != again.Version+1 {
		t.Fatalf("version after replacing a document created again: %d, want %d", next.Version, again.Version+1)
	}
	// A pruned document's name, used again, never meets a version its
	// earlier life had either.
	const hc = "alert-history"
	old := e.putDoc(e.s, hc, "a", docBody("a"), 0, at(time.Second))
	old = e.putDoc(e.s, hc, "a", docBody("a2"), old.Version, at(time.Second))
	e.putDoc(e.s, hc, "b", docBody("b"), 0, at(time.Second))
	if n, err := e.s.PruneDocuments(e.ctx, &store.PruneDocumentsParams{Collection: hc, Keep: 1}); err != nil || n != 1 {
		t.Fatalf("PruneDocuments(keep 1) = %d, %v; want 1", n, err)
	}
	reborn := e.putDoc(e.s, hc, "a", docBody("a3"), 0, at(2*time.Second))
	if reborn.Version <= old.Version {
		t.Fatalf("version of a pruned document created again: %d, want more than %d", reborn.Version, old.Version)
	}
}

func testDocumentsConflict(t *testing.T, h Harness) {
	e := setup(t, h)
	const c = "alert-rules"
	put := func(name string, v int64) error {
		_, err := e.s.PutDocument(e.ctx, &store.PutDocumentParams{Collection: c, Name: name, Body: docBody("changed"), IfVersion: v, Now: at(2 * time.Second)})
		return err
	}
	first := e.putDoc(e.s, c, "cas", docBody("first"), 0, at(time.Second))
	wantErr(t, "create over an existing document", put("cas", 0), store.ErrConflict)
	wantErr(t, "replace at a version never stored", put("cas", first.Version+1000), store.ErrConflict)
	wantErr(t, "replace of an absent document", put("absent", first.Version), store.ErrNotFound)
	e.noDoc(e.s, c, "absent")
	err := e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c, Name: "cas", IfVersion: first.Version + 1000})
	wantErr(t, "delete at another version", err, store.ErrConflict)
	checkDoc(t, "document after refused changes", e.getDoc(e.s, c, "cas"), c, "cas", docBody("first"), first.Version, at(time.Second), at(time.Second))

	// Writers on several handles replace what they read: exactly one
	// wins, the others are told.
	const writers = 8
	handles := []store.Store{e.s, e.open()}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = handles[i%len(handles)].PutDocument(e.ctx, &store.PutDocumentParams{
				Collection: c, Name: "cas", Body: docBody(fmt.Sprintf("writer %d", i)), IfVersion: first.Version, Now: at(3 * time.Second)})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both replaced version %d", winner, i, first.Version)
		case err == nil:
			winner = i
		default:
			wantErr(t, fmt.Sprintf("writer %d", i), err, store.ErrConflict)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer replaced version %d: %v", first.Version, errs)
	}
	got := e.getDoc(handles[1], c, "cas")
	checkDoc(t, "document after the race", got, c, "cas", docBody(fmt.Sprintf("writer %d", winner)), 0, at(time.Second), at(3*time.Second))

	// Creators race too: one creates, the others find it.
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = handles[i%len(handles)].PutDocument(e.ctx, &store.PutDocumentParams{
				Collection: c, Name: "new", Body: docBody(fmt.Sprint(i)), Now: at(4 * time.Second)})
		})
	}
	wg.Wait()
	created := 0
	for i, err := range errs {
		if err == nil {
			created++
			continue
		}
		wantErr(t, fmt.Sprintf("creator %d", i), err, store.ErrConflict)
	}
	if created != 1 {
		t.Fatalf("%d creators created the same document, want 1", created)
	}
}

func (e *env) listDocs(s store.Store, p *store.ListDocumentsParams) *store.DocumentPage {
	e.t.Helper()
	page, err := s.ListDocuments(e.ctx, p)
	if err != nil {
		e.t.Fatalf("ListDocuments(%+v): %v", *p, err)
	}
	return page
}

func docNames(ds []*store.Document) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Name
	}
	return out
}

// listAll pages through p with its limit and returns every name.
func (e *env) listAll(s store.Store, p store.ListDocumentsParams, bound int) []string {
	e.t.Helper()
	var got []string
	for pages := 0; ; pages++ {
		if pages > bound {
			e.t.Fatalf("paging %+v does not end: %q", p, got)
		}
		page := e.listDocs(s, &p)
		if p.Limit > 0 && len(page.Documents) > p.Limit {
			e.t.Fatalf("page of %d with limit %d", len(page.Documents), p.Limit)
		}
		got = append(got, docNames(page.Documents)...)
		if page.Next == "" {
			return got
		}
		if len(page.Documents) == 0 || page.Next != page.Documents[len(page.Documents)-1].Name {
			e.t.Fatalf("page %q has Next %q; want its last name", docNames(page.Documents), page.Next)
		}
		p.After = page.Next
	}
}

func testDocumentsList(t *testing.T, h Harness) {
	e := setup(t, h)
	const c = "history"
	// Names that sort differently escaped than raw, prefixes of each
	// other, a slash, and time-sortable ones.
	names := []string{"a", "a b", "a/b", "a%2F", "a0", "ab", "Z", "ä", "zz", "a/", "a/b/c"}
	for i := range 16 {
		names = append(names, fmt.Sprintf("20261124T00%02d00Z-%d", 15-i, i))
	}
	for i, n := range names {
		e.putDoc(e.s, c, n, docBody(n), 0, at(time.Duration(i)*time.Millisecond))
	}
	// A document of another collection, named like one of them, and of
	// collections whose names extend c's.
	e.putDoc(e.s, "other", "a", docBody("x"), 0, base)
	e.putDoc(e.s, c+"x", "a", docBody("x"), 0, base)
	e.putDoc(e.s, c+".x", "b", docBody("x"), 0, base)
	want := append([]string(nil), names...)
	sort.Strings(want)

	page := e.listDocs(e.s, &store.ListDocumentsParams{Collection: c})
	if got := docNames(page.Documents); !slicesEqual(got, want) || page.Next != "" {
		t.Fatalf("ListDocuments with the default page:\n got  %q (next %q)\n want %q", got, page.Next, want)
	}
	for i, d := range page.Documents {
		if i == 0 {
			checkDoc(t, "listed document", d, c, d.Name, docBody(d.Name), 0, d.CreatedAt, d.CreatedAt)
		}
		if !bytes.Equal(d.Body, docBody(d.Name)) {
			t.Fatalf("listed document %q has body %s", d.Name, d.Body)
		}
	}
	for _, limit := range []int{1, 7, len(want) - 1, len(want)} {
		if got := e.listAll(e.s, store.ListDocumentsParams{Collection: c, Limit: limit}, len(want)+1); !slicesEqual(got, want) {
			t.Fatalf("pages of %d:\n got  %q\n want %q", limit, got, want)
		}
	}
	// A page exactly as long as what is left may or may not say more
	// follows, but the next one is then empty and last.
	p := e.listDocs(e.s, &store.ListDocumentsParams{Collection: c, After: want[len(want)-2], Limit: 1})
	if got := docNames(p.Documents); !slicesEqual(got, want[len(want)-1:]) {
		t.Fatalf("last page: %q", got)
	}
	// A cursor between names, and one past the last.
	if got := docNames(e.listDocs(e.s, &store.ListDocumentsParams{Collection: c, After: "a/a", Limit: 3}).Documents); !slicesEqual(got, []string{"a/b", "a/b/c", "a0"}) {
		t.Fatalf("ListDocuments after %q: %q", "a/a", got)
	}
	if got := e.listDocs(e.s, &store.ListDocumentsParams{Collection: c, After: "\U0010FFFF"}); len(got.Documents) != 0 || got.Next != "" {
		t.Fatalf("ListDocuments past the last name: %q", docNames(got.Documents))
	}

	// Prefixes, with and without a cursor.
	prefixed := func(prefix string) []string {
		var out []string
		for _, n := range want {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		return out
	}
	for _, prefix := range []string{"a", "a/", "2026", "20261124T0007", "ä", "zz", "nothing"} {
		for _, limit := range []int{0, 1, 2} {
			got := e.listAll(e.s, store.ListDocumentsParams{Collection: c, Prefix: prefix, Limit: limit}, len(want)+1)
			if w := prefixed(prefix); !slicesEqual(got, w) {
				t.Fatalf("prefix %q, pages of %d:\n got  %q\n want %q", prefix, limit, got, w)
			}
		}
	}
	if got := docNames(e.listDocs(e.s, &store.ListDocumentsParams{Collection: c, Prefix: "a/", After: "a/b"}).Documents); !slicesEqual(got, []string{"a/b/c"}) {
		t.Fatalf("prefix %q after %q: %q", "a/", "a/b", got)
	}
	if got := docNames(e.listDocs(e.s, &store.ListDocumentsParams{Collection: c, Prefix: "a/", After: "0"}).Documents); !slicesEqual(got, []string{"a/", "a/b", "a/b/c"}) {
		t.Fatalf("prefix %q after %q: %q", "a/", "0", got)
	}
	if got := e.listDocs(e.s, &store.ListDocumentsParams{Collection: c, Prefix: "a/", After: "b"}); len(got.Documents) != 0 {
		t.Fatalf("prefix %q after %q: %q", "a/", "b", docNames(got.Documents))
	}
	if got := e.listDocs(e.s, &store.ListDocumentsParams{Collection: "empty"}); len(got.Documents) != 0 || got.Next != "" {
		t.Fatalf("an empty collection lists %q", docNames(got.Documents))
	}
}

func testDocumentsIsolation(t *testing.T, h Harness) {
	e := setup(t, h)
	// Collections: one name in two collections is two documents.
	a := e.putDoc(e.s, "silences", "x", docBody("silence"), 0, at(time.Second))
	b := e.putDoc(e.s, "channels", "x", docBody("channel"), 0, at(2*time.Second))
	checkDoc(t, "document of the first collection", e.getDoc(e.s, "silences", "x"), "silences", "x", docBody("silence"), a.Version, at(time.Second), at(time.Second))
	checkDoc(t, "document of the second collection", e.getDoc(e.s, "channels", "x"), "channels", "x", docBody("channel"), b.Version, at(2*time.Second), at(2*time.Second))
	if err := e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: "silences", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	e.noDoc(e.s, "silences", "x")
	e.getDoc(e.s, "channels", "x")
	if n, err := e.s.PruneDocuments(e.ctx, &store.PruneDocumentsParams{Collection: "silences", Keep: 1}); err != nil || n != 0 {
		t.Fatalf("prune of an emptied collection: %d, %v", n, err)
	}
	e.getDoc(e.s, "channels", "x")

	// Handles of one namespace share documents.
	other := e.open()
	checkDoc(t, "document read through another handle", e.getDoc(other, "channels", "x"), "channels", "x", docBody("channel"), b.Version, at(2*time.Second), at(2*time.Second))
	upd := e.putDoc(other, "channels", "x", docBody("changed"), b.Version, at(3*time.Second))
	checkDoc(t, "replace read back through the first handle", e.getDoc(e.s, "channels", "x"), "channels", "x", docBody("changed"), upd.Version, at(2*time.Second), at(3*time.Second))

	// Another namespace neither sees nor changes them.
	f := setup(t, h)
	f.noDoc(f.s, "channels", "x")
	if l := f.listDocs(f.s, &store.ListDocumentsParams{Collection: "channels"}); len(l.Documents) != 0 {
		t.Fatalf("another namespace lists %q", docNames(l.Documents))
	}
	err := f.s.DeleteDocument(f.ctx, &store.DeleteDocumentParams{Collection: "channels", Name: "x"})
	wantErr(t, "DeleteDocument from another namespace", err, store.ErrNotFound)
	if n, err := f.s.PruneDocuments(f.ctx, &store.PruneDocumentsParams{Collection: "channels", Keep: 1, Before: "z"}); err != nil || n != 0 {
		t.Fatalf("prune in another namespace: %d, %v", n, err)
	}
	mine := f.putDoc(f.s, "channels", "x", docBody("f's"), 0, at(4*time.Second))
	checkDoc(t, "document created in another namespace", mine, "channels", "x", docBody("f's"), 0, at(4*time.Second), at(4*time.Second))
	checkDoc(t, "document of the first namespace", e.getDoc(e.s, "channels", "x"), "channels", "x", docBody("changed"), upd.Version, at(2*time.Second), at(3*time.Second))
}

func testDocumentsInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	const c = "calendars"
	kept := e.putDoc(e.s, c, "kept", docBody("kept"), 0, at(time.Second))
	put := func(p *store.PutDocumentParams) error { _, err := e.s.PutDocument(e.ctx, p); return err }
	ok := func() *store.PutDocumentParams {
		return &store.PutDocumentParams{Collection: c, Name: "bad", Body: docBody("x"), Now: at(2 * time.Second)}
	}
	mod := func(f func(p *store.PutDocumentParams)) *store.PutDocumentParams { p := ok(); f(p); return p }
	huge := append(append([]byte(`"`), bytes.Repeat([]byte("x"), store.MaxDocumentBytes)...), '"')
	bad := []struct {
		name string
		err  error
		want error
	}{
		{"nil put parameters", put(nil), store.ErrInvalid},
		{"no collection", put(mod(func(p *store.PutDocumentParams) { p.Collection = "" })), store.ErrInvalid},
		{"upper-case collection", put(mod(func(p *store.PutDocumentParams) { p.Collection = "Calendars" })), store.ErrInvalid},
		{"collection with a slash", put(mod(func(p *store.PutDocumentParams) { p.Collection = "a/b" })), store.ErrInvalid},
		{"collection too long", put(mod(func(p *store.PutDocumentParams) { p.Collection = strings.Repeat("c", store.MaxCollectionName+1) })), store.ErrInvalid},
		{"no name", put(mod(func(p *store.PutDocumentParams) { p.Name = "" })), store.ErrInvalid},
		{"name too long", put(mod(func(p *store.PutDocumentParams) { p.Name = strings.Repeat("n", store.MaxDocumentName+1) })), store.ErrInvalid},
		{"control character in name", put(mod(func(p *store.PutDocumentParams) { p.Name = "a\nb" })), store.ErrInvalid},
		{"invalid UTF-8 in name", put(mod(func(p *store.PutDocumentParams) { p.Name = "a\xffb" })), store.ErrInvalid},
		{"no body", put(mod(func(p *store.PutDocumentParams) { p.Body = nil })), store.ErrInvalid},
		{"body not JSON", put(mod(func(p *store.PutDocumentParams) { p.Body = json.RawMessage(`{"a":`) })), store.ErrInvalid},
		{"two JSON values", put(mod(func(p *store.PutDocumentParams) { p.Body = json.RawMessage(`1 2`) })), store.ErrInvalid},
		{"body too large", put(mod(func(p *store.PutDocumentParams) { p.Body = huge })), store.ErrTooLarge},
		{"IfVersion -2", put(mod(func(p *store.PutDocumentParams) { p.IfVersion = -2 })), store.ErrInvalid},
		{"no time", put(mod(func(p *store.PutDocumentParams) { p.Now = time.Time{} })), store.ErrInvalid},
		{"invalid replace of a stored one", put(&store.PutDocumentParams{Collection: c, Name: "kept", Body: json.RawMessage(`{`), IfVersion: kept.Version, Now: base}), store.ErrInvalid},
		{"list without parameters", func() error { _, err := e.s.ListDocuments(e.ctx, nil); return err }(), store.ErrInvalid},
		{"list without a collection", func() error { _, err := e.s.ListDocuments(e.ctx, &store.ListDocumentsParams{}); return err }(), store.ErrInvalid},
		{"list with a negative limit", func() error {
			_, err := e.s.ListDocuments(e.ctx, &store.ListDocumentsParams{Collection: c, Limit: -1})
			return err
		}(), store.ErrInvalid},
		{"list beyond the largest page", func() error {
			_, err := e.s.ListDocuments(e.ctx, &store.ListDocumentsParams{Collection: c, Limit: store.MaxDocumentPage + 1})
			return err
		}(), store.ErrInvalid},
		{"nil delete parameters", e.s.DeleteDocument(e.ctx, nil), store.ErrInvalid},
		{"delete without a name", e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c}), store.ErrInvalid},
		{"delete with a negative version", e.s.DeleteDocument(e.ctx, &store.DeleteDocumentParams{Collection: c, Name: "kept", IfVersion: -1}), store.ErrInvalid},
		{"prune without parameters", func() error { _, err := e.s.PruneDocuments(e.ctx, nil); return err }(), store.ErrInvalid},
		{"prune without a rule", func() error {
			_, err := e.s.PruneDocuments(e.ctx, &store.PruneDocumentsParams{Collection: c})
			return err
		}(), store.ErrInvalid},
		{"prune keeping a negative count", func() error {
			_, err := e.s.PruneDocuments(e.ctx, &store.PruneDocumentsParams{Collection: c, Keep: -1})
			return err
		}(), store.ErrInvalid},
		{"prune beyond the largest limit", func() error {
			_, err := e.s.PruneDocuments(e.ctx, &store.PruneDocumentsParams{Collection: c, Keep: 1, Limit: store.MaxPruneDocuments + 1})
			return err
		}(), store.ErrInvalid},
	}
	for _, tc := range bad {
		wantErr(t, tc.name, tc.err, tc.want)
	}
	e.noDoc(e.s, c, "bad")
	checkDoc(t, "document after invalid calls", e.getDoc(e.s, c, "kept"), c, "kept", docBody("kept"), kept.Version, at(time.Second), at(time.Second))

	// A body of exactly the limit is stored whole.
	edge := append(append([]byte(`"`), bytes.Repeat([]byte("é"), (store.MaxDocumentBytes-2)/2)...), '"')
	d := e.putDoc(e.s, c, "edge", edge, 0, base)
	if got := e.getDoc(e.s, c, "edge"); !bytes.Equal(got.Body, edge) || got.Version != d.Version {
		t.Fatalf("a body of %d bytes read back as %d bytes", len(edge), len(got.Body))
	}

	// A canceled ctx stores, reads, deletes and prunes nothing.
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.s.PutDocument(ctx, &store.PutDocumentParams{Collection: c, Name: "late", Body: docBody("late"), Now: base}); err == nil {
		t.Fatal("PutDocument with a canceled ctx: no error")
	}
	if _, err := e.s.GetDocument(ctx, c, "kept"); err == nil {
		t.Fatal("GetDocument with a canceled ctx: no error")
	}
	if _, err := e.s.ListDocuments(ctx, &store.ListDocumentsParams{Collection: c}); err == nil {
		t.Fatal("ListDocuments with a canceled ctx: no error")
	}
	if err := e.s.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: c, Name: "kept"}); err == nil {
		t.Fatal("DeleteDocument with a canceled ctx: no error")
	}
	if _, err := e.s.PruneDocuments(ctx, &store.PruneDocumentsParams{Collection: c, Keep: 1}); err == nil {
		t.Fatal("PruneDocuments with a canceled ctx: no error")
	}
	e.noDoc(e.s, c, "late")
	e.getDoc(e.s, c, "kept")
	e.getDoc(e.s, c, "edge")
}

func testDocumentsPrune(t *testing.T, h Harness) {
	e := setup(t, h)
	const c = "notifications"
	name := func(i int) string { return fmt.Sprintf("20261124T%06dZ-n", i) }
	for i := range 30 {
		e.putDoc(e.s, c, name(i), docBody(fmt.Sprint(i)), 0, at(time.Duration(i)*time.Millisecond))
	}
	e.putDoc(e.s, "neighbour", name(0), docBody("n"), 0, base)
	names := func() []string {
		return e.listAll(e.s, store.ListDocumentsParams{Collection: c, Limit: 1000}, 2)
	}
	want := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, name(i))
		}
		return out
	}
	prune := func(p store.PruneDocumentsParams, wantN int) {
		t.Helper()
		p.Collection = c
		n, err := e.s.PruneDocuments(e.ctx, &p)
		if err != nil || n != wantN {
			t.Fatalf("PruneDocuments(%+v) = %d, %v; want %d", p, n, err, wantN)
		}
	}
	// Before: names before it go, the one named so stays.
	prune(store.PruneDocumentsParams{Before: name(5)}, 5)
	if got := names(); !slicesEqual(got, want(5, 30)) {
		t.Fatalf("after a prune before %q: %q", name(5), got)
	}
	// Keep: all but the last ones go, at most Limit a call.
	prune(store.PruneDocumentsParams{Keep: 10, Limit: 6}, 6)
	if got := names(); !slicesEqual(got, want(11, 30)) {
		t.Fatalf("after a limited prune: %q", got)
	}
	prune(store.PruneDocumentsParams{Keep: 10}, 9)
	prune(store.PruneDocumentsParams{Keep: 10}, 0)
	if got := names(); !slicesEqual(got, want(20, 30)) {
		t.Fatalf("after keeping 10: %q", got)
	}
	// Both rules: whichever deletes more.
	prune(store.PruneDocumentsParams{Keep: 8, Before: name(21)}, 2)
	prune(store.PruneDocumentsParams{Keep: 3, Before: name(24)}, 5)
	prune(store.PruneDocumentsParams{Keep: 100, Before: name(20)}, 0)
	// A Before past every name empties the collection.
	prune(store.PruneDocumentsParams{Before: "~"}, 3)
	if got := names(); len(got) != 0 {
		t.Fatalf("after pruning all: %q", got)
	}
	e.getDoc(e.s, "neighbour", name(0))
}
