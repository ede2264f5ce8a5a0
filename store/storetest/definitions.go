package storetest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// def returns a definition of kind with every field a caller sets filled.
func def(kind string) *store.Definition {
	return &store.Definition{
		Kind:        kind,
		Queue:       "q-def",
		Priority:    -7,
		MaxRetries:  -1,
		Backoff:     store.Backoff{Kind: store.BackoffExponential, Base: 250 * time.Millisecond, Limit: time.Minute, Jitter: 0.5},
		Timeout:     90 * time.Second,
		Unique:      &store.UniquePolicy{By: store.UniqueByArgs, TTL: time.Hour},
		Labels:      []string{"region=eu", "gpu"},
		Description: "sends the mail — ünïcode",
		// Stored and read back like every other field.
		ConvertArguments: true,
	}
}

func (e *env) putDef(s store.Store, d *store.Definition, ifVersion int64, now time.Time) *store.Definition {
	e.t.Helper()
	got, err := s.PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: d, IfVersion: ifVersion, Now: now})
	if err != nil {
		e.t.Fatalf("PutDefinition(%q, IfVersion %d): %v", d.Kind, ifVersion, err)
	}
	return got
}

func (e *env) getDef(s store.Store, kind string) *store.Definition {
	e.t.Helper()
	got, err := s.GetDefinition(e.ctx, kind)
	if err != nil {
		e.t.Fatalf("GetDefinition(%q): %v", kind, err)
	}
	return got
}

func (e *env) noDef(s store.Store, kind string) {
	e.t.Helper()
	got, err := s.GetDefinition(e.ctx, kind)
	wantErr(e.t, fmt.Sprintf("GetDefinition(%q) (got %+v)", kind, got), err, store.ErrNotFound)
}

// stored returns d as a store keeps it: at version v, created at c,
// updated at u.
func stored(d *store.Definition, v int64, c, u time.Time) *store.Definition {
	w := d.Clone()
	w.Version, w.CreatedAt, w.UpdatedAt = v, c, u
	return w
}

func testDefinitionsCRUD(t *testing.T, h Harness) {
	e := setup(t, h)
	e.noDef(e.s, "mail")
	err := e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "mail"})
	wantErr(t, "DeleteDefinition of a kind without one", err, store.ErrNotFound)

	d := def("mail")
	d.Version, d.CreatedAt = 42, at(-time.Hour) // ignored: the store sets them
	got := e.putDef(e.s, d, 0, at(time.Second))
	want := stored(def("mail"), 1, at(time.Second), at(time.Second))
	checkRecord(t, "created definition", want, got)
	checkRecord(t, "read definition", want, e.getDef(e.s, "mail"))

	// The returned record is a copy.
	got.Labels[0], got.Unique.TTL = "changed", time.Nanosecond
	checkRecord(t, "definition after changing a returned copy", want, e.getDef(e.s, "mail"))

	// Update what was read: version 2, CreatedAt kept.
	upd := def("mail")
	upd.Queue, upd.Priority, upd.MaxRetries, upd.Timeout = "q-other", 3, 0, 0
	upd.Backoff = store.Backoff{Kind: store.BackoffConstant, Base: 2 * time.Second}
	upd.Unique, upd.Labels, upd.Description = nil, nil, ""
	got = e.putDef(e.s, upd, 1, at(2*time.Second))
	want = stored(upd, 2, at(time.Second), at(2*time.Second))
	checkRecord(t, "updated definition", want, got)
	checkRecord(t, "read updated definition", want, e.getDef(e.s, "mail"))

	// AnyVersion replaces whatever is there; a default backoff stays zero.
	upd2 := def("mail")
	upd2.Backoff = store.Backoff{}
	got = e.putDef(e.s, upd2, store.AnyVersion, at(3*time.Second))
	checkRecord(t, "definition put with AnyVersion", stored(upd2, 3, at(time.Second), at(3*time.Second)), got)

	if err := e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "mail", IfVersion: 3}); err != nil {
		t.Fatalf("DeleteDefinition at its version: %v", err)
	}
	e.noDef(e.s, "mail")
	err = e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "mail"})
	wantErr(t, "DeleteDefinition twice", err, store.ErrNotFound)
	if l := e.listDefs(e.s, "", 0); len(l) != 0 {
		t.Fatalf("ListDefinitions after the delete: %d definitions, want none", len(l))
	}

	// Created again: a new life, version 1.
	got = e.putDef(e.s, def("mail"), 0, at(4*time.Second))
	checkRecord(t, "definition created again", stored(def("mail"), 1, at(4*time.Second), at(4*time.Second)), got)
	// AnyVersion creates, too.
	got = e.putDef(e.s, def("other"), store.AnyVersion, at(5*time.Second))
	checkRecord(t, "definition created with AnyVersion", stored(def("other"), 1, at(5*time.Second), at(5*time.Second)), got)
	// Delete without a version.
	if err := e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "other"}); err != nil {
		t.Fatalf("DeleteDefinition without a version: %v", err)
	}
	e.noDef(e.s, "other")
}

func testDefinitionsConflict(t *testing.T, h Harness) {
	e := setup(t, h)
	put := func(d *store.Definition, v int64, now time.Time) error {
		_, err := e.s.PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: d, IfVersion: v, Now: now})
		return err
	}
	first := e.putDef(e.s, def("cas"), 0, at(time.Second))

	changed := def("cas")
	changed.Queue = "q-changed"
	wantErr(t, "create over an existing definition", put(changed, 0, at(2*time.Second)), store.ErrConflict)
	wantErr(t, "update at a version never stored", put(changed, 5, at(2*time.Second)), store.ErrConflict)
	wantErr(t, "update of an absent definition", put(def("absent"), 1, at(2*time.Second)), store.ErrConflict)
	e.noDef(e.s, "absent")
	err := e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "cas", IfVersion: 2})
	wantErr(t, "delete at another version", err, store.ErrConflict)
	checkRecord(t, "definition after refused changes", first, e.getDef(e.s, "cas"))

	// Several writers on several handles update what they read: exactly
	// one wins, the others are told.
	const writers = 8
	handles := []store.Store{e.s, e.open()}
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := def("cas")
			d.Description = fmt.Sprintf("writer %d", i)
			_, errs[i] = handles[i%len(handles)].PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: d, IfVersion: 1, Now: at(3 * time.Second)})
		}()
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both updated version 1", winner, i)
		case err == nil:
			winner = i
		default:
			wantErr(t, fmt.Sprintf("writer %d", i), err, store.ErrConflict)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer updated version 1: %v", errs)
	}
	got := e.getDef(e.s, "cas")
	if got.Version != 2 || got.Description != fmt.Sprintf("writer %d", winner) {
		t.Fatalf("after the race: version %d, description %q; want 2, %q", got.Version, got.Description, fmt.Sprintf("writer %d", winner))
	}
}

func testDefinitionsInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	keep := e.putDef(e.s, def("kept"), 0, at(time.Second))
	mod := func(kind string, f func(d *store.Definition)) *store.Definition {
		d := def(kind)
		f(d)
		return d
	}
	bad := []struct {
		name string
		d    *store.Definition
	}{
		{"empty kind", mod("", func(*store.Definition) {})},
		{"control character in kind", mod("a\nb", func(*store.Definition) {})},
		{"no queue", mod("bad", func(d *store.Definition) { d.Queue = "" })},
		{"retries below forever", mod("bad", func(d *store.Definition) { d.MaxRetries = -2 })},
		{"retries above the limit", mod("bad", func(d *store.Definition) { d.MaxRetries = store.MaxRetriesLimit + 1 })},
		{"negative timeout", mod("bad", func(d *store.Definition) { d.Timeout = -time.Second })},
		{"unknown backoff kind", mod("bad", func(d *store.Definition) { d.Backoff.Kind = "fibonacci" })},
		{"jitter above 1", mod("bad", func(d *store.Definition) { d.Backoff.Jitter = 1.5 })},
		{"negative jitter", mod("bad", func(d *store.Definition) { d.Backoff.Jitter = -0.1 })},
		{"exponential limit below base", mod("bad", func(d *store.Definition) { d.Backoff.Limit = time.Millisecond })},
		{"exponential without base", mod("bad", func(d *store.Definition) { d.Backoff.Base = 0 })},
		{"constant with limit", mod("bad", func(d *store.Definition) {
			d.Backoff = store.Backoff{Kind: store.BackoffConstant, Base: time.Second, Limit: time.Minute}
		})},
		{"default backoff with base", mod("bad", func(d *store.Definition) { d.Backoff = store.Backoff{Base: time.Second} })},
		{"unique by nothing", mod("bad", func(d *store.Definition) { d.Unique.By = "" })},
		{"unique without TTL", mod("bad", func(d *store.Definition) { d.Unique.TTL = 0 })},
		{"empty label", mod("bad", func(d *store.Definition) { d.Labels = []string{""} })},
		{"label without key", mod("bad", func(d *store.Definition) { d.Labels = []string{"=eu"} })},
		{"label with space", mod("bad", func(d *store.Definition) { d.Labels = []string{"region = eu"} })},
		{"labels in one string", mod("bad", func(d *store.Definition) { d.Labels = []string{"a,b"} })},
		{"label twice", mod("bad", func(d *store.Definition) { d.Labels = []string{"gpu", "gpu"} })},
		{"invalid update of a stored one", mod("kept", func(d *store.Definition) { d.MaxRetries = -5 })},
	}
	for _, tc := range bad {
		for _, v := range []int64{0, 1, store.AnyVersion} {
			_, err := e.s.PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: tc.d, IfVersion: v, Now: at(2 * time.Second)})
			wantErr(t, tc.name, err, store.ErrInvalid)
		}
	}
	e.noDef(e.s, "bad")
	e.noDef(e.s, "")
	checkRecord(t, "definition after an invalid update", keep, e.getDef(e.s, "kept"))

	params := []struct {
		name string
		err  error
	}{
		{"nil put parameters", func() error { _, err := e.s.PutDefinition(e.ctx, nil); return err }()},
		{"put without a definition", func() error {
			_, err := e.s.PutDefinition(e.ctx, &store.PutDefinitionParams{Now: base})
			return err
		}()},
		{"put without a time", func() error {
			_, err := e.s.PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: def("bad")})
			return err
		}()},
		{"put with IfVersion -2", func() error {
			_, err := e.s.PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: def("bad"), IfVersion: -2, Now: base})
			return err
		}()},
		{"list with a negative limit", func() error {
			_, err := e.s.ListDefinitions(e.ctx, &store.ListDefinitionsParams{Limit: -1})
			return err
		}()},
		{"list beyond the largest page", func() error {
			_, err := e.s.ListDefinitions(e.ctx, &store.ListDefinitionsParams{Limit: store.MaxDefinitionsPage + 1})
			return err
		}()},
		{"nil delete parameters", e.s.DeleteDefinition(e.ctx, nil)},
		{"delete without a kind", e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{})},
		{"delete with a negative version", e.s.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "kept", IfVersion: -1})},
	}
	for _, p := range params {
		wantErr(t, p.name, p.err, store.ErrInvalid)
	}
	e.noDef(e.s, "bad")
	checkRecord(t, "definition after invalid calls", keep, e.getDef(e.s, "kept"))

	// A canceled ctx stores nothing.
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.s.PutDefinition(ctx, &store.PutDefinitionParams{Definition: def("late"), Now: base}); err == nil {
		t.Fatal("PutDefinition with a canceled ctx: no error")
	}
	e.noDef(e.s, "late")
}

func (e *env) listDefs(s store.Store, after string, limit int) []*store.Definition {
	e.t.Helper()
	got, err := s.ListDefinitions(e.ctx, &store.ListDefinitionsParams{After: after, Limit: limit})
	if err != nil {
		e.t.Fatalf("ListDefinitions(after %q, limit %d): %v", after, limit, err)
	}
	return got
}

func testDefinitionsList(t *testing.T, h Harness) {
	e := setup(t, h)
	// Kinds that sort differently escaped than raw, and prefixes of
	// each other.
	kinds := []string{"a", "a b", "a/b", "a%2F", "a0", "ab", "Z", "ä", "zz"}
	for i := range 16 {
		kinds = append(kinds, fmt.Sprintf("k%02d", 15-i))
	}
	for i, k := range kinds {
		e.putDef(e.s, def(k), 0, at(time.Duration(i)*time.Millisecond))
	}
	want := append([]string(nil), kinds...)
	sort.Strings(want)
	kindsOf := func(ds []*store.Definition) []string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = d.Kind
		}
		return out
	}
	if got := kindsOf(e.listDefs(e.s, "", 0)); !slicesEqual(got, want) {
		t.Fatalf("ListDefinitions with the default page:\n got  %q\n want %q", got, want)
	}
	for _, limit := range []int{1, 7, len(want)} {
		var got []string
		after, pages := "", 0
		for {
			page := e.listDefs(e.s, after, limit)
			if len(page) > limit {
				t.Fatalf("page of %d with limit %d", len(page), limit)
			}
			pages++
			got = append(got, kindsOf(page)...)
			if len(page) < limit {
				break
			}
			after = page[len(page)-1].Kind
			if pages > len(want)+1 {
				t.Fatalf("paging with limit %d does not end: %q", limit, got)
			}
		}
		if !slicesEqual(got, want) {
			t.Fatalf("pages of %d:\n got  %q\n want %q", limit, got, want)
		}
	}
	// A cursor between kinds, and one past the last.
	if got := kindsOf(e.listDefs(e.s, "k07x", 3)); !slicesEqual(got, []string{"k08", "k09", "k10"}) {
		t.Fatalf("ListDefinitions after %q: %q", "k07x", got)
	}
	if got := e.listDefs(e.s, "\U0010FFFF", 0); len(got) != 0 {
		t.Fatalf("ListDefinitions past the last kind: %q", kindsOf(got))
	}
	// Records listed are whole.
	for _, d := range e.listDefs(e.s, "k00", 1) {
		checkRecord(t, "listed definition", stored(def("k01"), 1, at(23*time.Millisecond), at(23*time.Millisecond)), d)
	}
}

func testDefinitionsShared(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.open()
	made := e.putDef(e.s, def("shared"), 0, at(time.Second))
	checkRecord(t, "definition read through another handle", made, e.getDef(other, "shared"))
	upd := e.putDef(other, def("shared"), made.Version, at(2*time.Second))
	checkRecord(t, "update read back through the first handle", upd, e.getDef(e.s, "shared"))
	if err := other.DeleteDefinition(e.ctx, &store.DeleteDefinitionParams{Kind: "shared", IfVersion: upd.Version}); err != nil {
		t.Fatal(err)
	}
	e.noDef(e.s, "shared")

	// Another namespace neither sees nor changes e's definitions.
	e.putDef(e.s, def("iso"), 0, at(3*time.Second))
	f := setup(t, h)
	f.noDef(f.s, "iso")
	if l := f.listDefs(f.s, "", 0); len(l) != 0 {
		t.Fatalf("another namespace lists %d definitions", len(l))
	}
	err := f.s.DeleteDefinition(f.ctx, &store.DeleteDefinitionParams{Kind: "iso"})
	wantErr(t, "DeleteDefinition from another namespace", err, store.ErrNotFound)
	mine := def("iso")
	mine.Queue = "q-f"
	if got := f.putDef(f.s, mine, 0, at(4*time.Second)); got.Version != 1 {
		t.Fatalf("definition created in another namespace at version %d, want 1", got.Version)
	}
	checkRecord(t, "definition of the first namespace", stored(def("iso"), 1, at(3*time.Second), at(3*time.Second)), e.getDef(e.s, "iso"))
}
