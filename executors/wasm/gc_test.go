package wasm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// fakeModule is n bytes a module store takes (the Wasm header, then
// filler telling modules apart); only Put's check reads it.
func fakeModule(tag byte, n int) []byte {
	return append([]byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}, bytes.Repeat([]byte{tag}, n)...)
}

func wasmDef(t *testing.T, st store.Store, kind, ref string) {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"module": ref})
	d := &store.Definition{Kind: kind, Queue: "default", Executor: &store.ExecutorSpec{Type: store.ExecutorWasm, Config: cfg}}
	if _, err := st.PutDefinition(context.Background(), &store.PutDefinitionParams{Definition: d, IfVersion: store.AnyVersion, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func moduleDocs(t *testing.T, st store.Store) []string {
	t.Helper()
	var names []string
	for after := ""; ; {
		p, err := st.ListDocuments(context.Background(), &store.ListDocumentsParams{Collection: wasm.ModulesCollection, After: after, Limit: store.MaxDocumentPage})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Documents {
			names = append(names, d.Name)
		}
		if p.Next == "" {
			return names
		}
		after = p.Next
	}
}

// TestCollectStoreModules: under synctest's clock, a module no definition
// names is deleted (manifest and every chunk) once its grace has passed
// since its last upload; a referenced one, one uploaded again within the
// grace and one stored just now are kept; the chunks of an upload that
// never wrote its manifest go too; Run collects on its own interval.
func TestCollectStoreModules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, err := memdbstore.New()
		if err != nil {
			t.Fatal(err)
		}
		mods := wasm.NewStoreModules(st, 0)
		put := func(b []byte) string {
			ref, err := mods.Put(b)
			if err != nil {
				t.Fatal(err)
			}
			return ref
		}
		used := put(fakeModule('a', 10))
		big := put(fakeModule('b', 600<<10)) // several chunks
		again := put(fakeModule('c', 10))
		wasmDef(t, st, "uses-a", used)
		// An upload that stopped after its chunks: no manifest.
		orphan := wasm.Ref(fakeModule('d', 10))
		oh, _ := wasm.ParseRef(orphan)
		for _, n := range []string{".0000", ".0001"} {
			if _, err := st.PutDocument(ctx, &store.PutDocumentParams{Collection: wasm.ModulesCollection, Name: oh + n, Body: json.RawMessage(`"AA=="`), IfVersion: store.AnyVersion, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		if len(moduleDocs(t, st)) < 6 {
			t.Fatalf("documents %v: want the big module's chunks", moduleDocs(t, st))
		}

		c := &wasm.Collector{Modules: mods, Defs: []wasm.DefinitionLister{st}, Grace: time.Hour, Every: 10 * time.Minute}
		if got, err := c.Collect(ctx, time.Now()); err != nil || len(got) != 0 {
			t.Fatalf("a pass within the grace deleted %v, %v; want nothing", got, err)
		}
		time.Sleep(40 * time.Minute)
		put(fakeModule('c', 10)) // uploaded again: its grace starts over
		time.Sleep(21 * time.Minute)
		fresh := put(fakeModule('e', 10))
		got, err := c.Collect(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		want := []string{big, orphan}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("deleted %v, want %v (the unreferenced module past its grace and the orphan chunks)", got, want)
		}
		for _, ref := range []string{used, again, fresh} {
			if _, err := mods.Get(ref); err != nil {
				t.Fatalf("kept module %s: %v", ref, err)
			}
		}
		if _, err := mods.Get(big); !errors.Is(err, wasm.ErrNoModule) {
			t.Fatalf("Get of a collected module = %v, want ErrNoModule", err)
		}
		bh, _ := wasm.ParseRef(big)
		for _, n := range moduleDocs(t, st) {
			if strings.HasPrefix(n, bh) || strings.HasPrefix(n, oh) {
				t.Fatalf("document %s of a collected module is left", n)
			}
		}

		// Run: the re-uploaded module's grace ends 60 min after its
		// upload; a pass every 10 min deletes it by then.
		reports := make(chan []string, 100)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Report = func(d []string, err error) {
				if err != nil {
					t.Error(err)
				}
				reports <- d
			}
			c.Run(rctx)
		}()
		time.Sleep(45 * time.Minute)
		synctest.Wait()
		cancel()
		<-done
		var all []string
		for len(reports) > 0 {
			all = append(all, <-reports...)
		}
		if !slices.Contains(all, again) || slices.Contains(all, used) {
			t.Fatalf("Run deleted %v; want %s (past its grace) and never %s (referenced)", all, again, used)
		}
		if _, err := mods.Get(used); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCollectDirModules: the same rule over files, by modification time;
// Put of a kept module refreshes it.
func TestCollectDirModules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	mods, err := wasm.NewDirModules(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	used, _ := mods.Put(fakeModule('a', 10))
	old, _ := mods.Put(fakeModule('b', 10))
	refreshed, _ := mods.Put(fakeModule('c', 10))
	wasmDef(t, st, "uses-a", used)
	past := time.Now().Add(-2 * time.Hour)
	for _, ref := range []string{used, old, refreshed} {
		h, _ := wasm.ParseRef(ref)
		if err := os.Chtimes(filepath.Join(dir, h+".wasm"), past, past); err != nil {
			t.Fatal(err)
		}
	}
	leftover := filepath.Join(dir, ".upload-123")
	if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(leftover, past, past)
	if _, err := mods.Put(fakeModule('c', 10)); err != nil {
		t.Fatal(err)
	}
	c := &wasm.Collector{Modules: mods, Defs: []wasm.DefinitionLister{st}, Grace: time.Hour}
	got, err := c.Collect(context.Background(), time.Now())
	if err != nil || !slices.Equal(got, []string{old}) {
		t.Fatalf("deleted %v, %v; want [%s]", got, err, old)
	}
	for _, ref := range []string{used, refreshed} {
		if _, err := mods.Get(ref); err != nil {
			t.Fatalf("kept module %s: %v", ref, err)
		}
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an old upload leftover is still there: %v", err)
	}
}
