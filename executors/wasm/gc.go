package wasm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jobkit/job/store"
)

// Garbage collection of modules: a module no stored definition names is
// deleted once it has been neither stored nor uploaded again for a grace
// period, so an upload followed by the definition that names it is never
// raced (Put of a module already kept refreshes its time).

// DefaultModuleGrace is how long an unreferenced module is kept after its
// last upload when a Collector is given no grace.
const DefaultModuleGrace = time.Hour

// DefaultCollectLimit bounds the modules one Collector pass deletes, and
// ten times it the entries it examines, when given no limit.
const DefaultCollectLimit = 100

// Collectable is a module store whose unused modules can be deleted.
// StoreModules and DirModules are.
type Collectable interface {
	// Collect deletes the modules whose references keep does not hold
	// and that were last stored before cutoff (and the leftovers of
	// uploads that never finished, by the same rule), at most limit
	// modules, examining at most 10×limit entries from where the previous
	// pass stopped. It returns the references deleted.
	Collect(ctx context.Context, keep map[string]bool, cutoff time.Time, limit int) ([]string, error)
}

// DefinitionLister is the part of a store a Collector reads.
type DefinitionLister interface {
	ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error)
}

// ReferencedModules returns the module references the stored wasm
// definitions of every one of defs name (a config that does not parse
// names none).
func ReferencedModules(ctx context.Context, defs ...DefinitionLister) (map[string]bool, error) {
	refs := map[string]bool{}
	for _, dl := range defs {
		for after := ""; ; {
			page, err := dl.ListDefinitions(ctx, &store.ListDefinitionsParams{After: after, Limit: store.MaxDefinitionsPage})
			if err != nil {
				return nil, fmt.Errorf("wasm modules: read the definitions naming modules: %w", err)
			}
			for _, d := range page {
				if d.Executor == nil || d.Executor.Type != store.ExecutorWasm {
					continue
				}
				var c struct {
					Module string `json:"module"`
				}
				if json.Unmarshal(d.Executor.Config, &c) == nil && c.Module != "" {
					refs[c.Module] = true
				}
			}
			if len(page) < store.MaxDefinitionsPage {
				break
			}
			after = page[len(page)-1].Kind
		}
	}
	return refs, nil
}

// Collector deletes the modules of Modules that no definition of Defs
// names, once they were last stored more than Grace ago: one bounded pass
// per Collect, or one every Every from Run.
type Collector struct {
	// Modules is the module store collected.
	Modules Collectable
	// Defs are the stores whose definitions may name its modules: every
	// namespace sharing it (a DirModules serves all of a node's).
	Defs []DefinitionLister
	// Grace is how long an unreferenced module is kept after its last
	// upload. Defaults to DefaultModuleGrace.
	Grace time.Duration
	// Limit bounds the modules one pass deletes. Defaults to
	// DefaultCollectLimit.
	Limit int
	// Every is Run's interval between passes. Defaults to
	// DefaultCollectEvery.
	Every time.Duration
	// Report, when set, is told each pass's deleted references and
	// error.
	Report func(deleted []string, err error)
}

// DefaultCollectEvery is how often Collector.Run collects when given no
// interval.
const DefaultCollectEvery = 10 * time.Minute

// Collect runs one pass at now: it reads the references first, then
// deletes what the module store holds beyond them.
func (c *Collector) Collect(ctx context.Context, now time.Time) ([]string, error) {
	grace, limit := c.Grace, c.Limit
	if grace <= 0 {
		grace = DefaultModuleGrace
	}
	if limit <= 0 {
		limit = DefaultCollectLimit
	}
	keep, err := ReferencedModules(ctx, c.Defs...)
	if err != nil {
		return nil, err
	}
	return c.Modules.Collect(ctx, keep, now.Add(-grace), limit)
}

// Run collects every c.Every (a pass bounded by a minute) until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	every := c.Every
	if every <= 0 {
		every = DefaultCollectEvery
	}
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		deleted, err := c.Collect(pctx, time.Now())
		cancel()
		if c.Report != nil {
			c.Report(deleted, err)
		}
		t.Reset(every)
	}
}

// Collect implements Collectable. It lists one document per module (the
// listing skips past a module's chunks, never reading them), deletes an
// unreferenced manifest only at the version it read (so a module uploaded
// again meanwhile is kept), then its chunks; chunks with no manifest
// before them (an upload that failed) go when their first is older than
// cutoff.
func (s *StoreModules) Collect(ctx context.Context, keep map[string]bool, cutoff time.Time, limit int) ([]string, error) {
	var deleted []string
	cursor := s.gcCursor.Load()
	after := ""
	if cursor != nil {
		after = *cursor
	}
	for examined := 0; examined < 10*limit && len(deleted) < limit; examined++ {
		page, err := s.docs.ListDocuments(ctx, &store.ListDocumentsParams{Collection: ModulesCollection, After: after, Limit: 1})
		if err != nil {
			return deleted, fmt.Errorf("wasm modules: collect: %w", err)
		}
		if len(page.Documents) == 0 {
			after = "" // the end: the next pass starts over
			break
		}
		d := page.Documents[0]
		h, chunk, isChunk := strings.Cut(d.Name, ".")
		after = h + "/" // '/' sorts after '.', before every hex digit: past h's chunks
		ref := "sha256:" + h
		if keep[ref] || !d.UpdatedAt.Before(cutoff) {
			continue
		}
		if isChunk {
			if chunk != fmt.Sprintf("%04d", 0) {
				// A later chunk without its manifest or first chunk:
				// delete from here on.
				n, _ := strconv.Atoi(chunk)
				if err := s.deleteChunks(ctx, h, n, -1); err != nil {
					return deleted, err
				}
				continue
			}
			if err := s.deleteChunks(ctx, h, 0, -1); err != nil {
				return deleted, err
			}
			deleted = append(deleted, ref)
			continue
		}
		var m manifest
		_ = json.Unmarshal(d.Body, &m)
		err = s.docs.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: ModulesCollection, Name: h, IfVersion: d.Version})
		switch {
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			continue // uploaded again (or collected) meanwhile: kept
		case err != nil:
			return deleted, fmt.Errorf("wasm modules: collect %s: %w", ref, err)
		}
		if err := s.deleteChunks(ctx, h, 0, m.Chunks); err != nil {
			return deleted, err
		}
		deleted = append(deleted, ref)
	}
	s.gcCursor.Store(&after)
	return deleted, nil
}

// deleteChunks deletes chunks from..to-1 of digest h (to < 0: until one
// is missing).
func (s *StoreModules) deleteChunks(ctx context.Context, h string, from, to int) error {
	for n := from; to < 0 || n < to; n++ {
		err := s.docs.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: ModulesCollection, Name: fmt.Sprintf("%s.%04d", h, n)})
		if errors.Is(err, store.ErrNotFound) {
			if to < 0 {
				return nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("wasm modules: collect chunk %d of sha256:%s: %w", n, h, err)
		}
	}
	return nil
}

// Collect implements Collectable: module files not named by keep and
// last written before cutoff, and upload leftovers older than it, are
// removed.
func (d *DirModules) Collect(ctx context.Context, keep map[string]bool, cutoff time.Time, limit int) ([]string, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("wasm modules: collect: %w", err)
	}
	var deleted []string
	for i, e := range entries {
		if i >= 10*limit || len(deleted) >= limit || ctx.Err() != nil {
			break
		}
		name := e.Name()
		h, isModule := strings.CutSuffix(name, ".wasm")
		if !isModule && !strings.HasPrefix(name, ".upload-") {
			continue
		}
		if isModule && keep["sha256:"+h] {
			continue
		}
		path := filepath.Join(d.dir, name)
		// Stat at the last moment: Put of a kept module refreshes its time.
		if fi, err := os.Stat(path); err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return deleted, fmt.Errorf("wasm modules: collect: %w", err)
		}
		if isModule {
			deleted = append(deleted, "sha256:"+h)
		}
	}
	return deleted, nil
}
