package wasm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jobkit/job/store"
)

// ModulesCollection is the store.Documents collection StoreModules keeps
// modules in.
const ModulesCollection = "wasm-modules"

// chunkBytes is how much of a module one document holds: base64 of it,
// quoted, stays under store.MaxDocumentBytes.
const chunkBytes = (store.MaxDocumentBytes - 1024) / 4 * 3

// StoreModules keeps modules in a store's Documents, so every node
// sharing the store (and namespace) reads the modules any of them was
// given: a manifest document named by the digest ({"size", "chunks"})
// and the bytes in chunks named "<digest>.<n>", base64, written before
// the manifest, so a manifest is only ever read with all its chunks. A
// module read back whose bytes do not hash to its name is refused.
type StoreModules struct {
	docs     store.Documents
	max      int
	timeout  time.Duration
	gcCursor atomic.Pointer[string] // where the next Collect pass starts
}

// NewStoreModules returns the modules kept in docs (a store of a
// namespace), each at most maxBytes (0: DefaultMaxModuleSize).
func NewStoreModules(docs store.Documents, maxBytes int) *StoreModules {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxModuleSize
	}
	return &StoreModules{docs: docs, max: maxBytes, timeout: time.Minute}
}

// MaxBytes returns the size limit of a module.
func (s *StoreModules) MaxBytes() int { return s.max }

type manifest struct {
	Size   int `json:"size"`
	Chunks int `json:"chunks"`
}

// Put implements Modules.
func (s *StoreModules) Put(b []byte) (string, error) {
	if err := CheckModule(b, s.max); err != nil {
		return "", err
	}
	ref := Ref(b)
	h, _ := ParseRef(ref)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if _, err := s.docs.GetDocument(ctx, ModulesCollection, h); err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("wasm modules: %w", err)
	}
	// A module kept already is written again, chunks then manifest: that
	// refreshes its time (and version), so Collect keeps it for another
	// grace period, and repairs one a collection half deleted.
	now := time.Now()
	n := 0
	for off := 0; off < len(b); off += chunkBytes {
		body, _ := json.Marshal(base64.StdEncoding.EncodeToString(b[off:min(off+chunkBytes, len(b))]))
		if _, err := s.docs.PutDocument(ctx, &store.PutDocumentParams{Collection: ModulesCollection, Name: fmt.Sprintf("%s.%04d", h, n), Body: body, IfVersion: store.AnyVersion, Now: now}); err != nil {
			return "", fmt.Errorf("wasm modules: store chunk %d of %s: %w", n, ref, err)
		}
		n++
	}
	body, _ := json.Marshal(manifest{Size: len(b), Chunks: n})
	if _, err := s.docs.PutDocument(ctx, &store.PutDocumentParams{Collection: ModulesCollection, Name: h, Body: body, IfVersion: store.AnyVersion, Now: now}); err != nil {
		return "", fmt.Errorf("wasm modules: store %s: %w", ref, err)
	}
	return ref, nil
}

// Get implements Modules.
func (s *StoreModules) Get(ref string) ([]byte, error) {
	h, err := ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoModule, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	d, err := s.docs.GetDocument(ctx, ModulesCollection, h)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s is not in the store; upload it (jobctl definitions create --wasm-file)", ErrNoModule, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("wasm modules: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(d.Body, &m); err != nil || m.Size < 0 || m.Size > s.max || m.Chunks < 0 || m.Chunks > s.max/chunkBytes+1 {
		return nil, fmt.Errorf("%w: the manifest of %s is unreadable; upload the module again", ErrModule, ref)
	}
	b := make([]byte, 0, m.Size)
	for i := range m.Chunks {
		c, err := s.docs.GetDocument(ctx, ModulesCollection, fmt.Sprintf("%s.%04d", h, i))
		if err != nil {
			return nil, fmt.Errorf("%w: chunk %d of %s: %v; upload the module again", ErrModule, i, ref, err)
		}
		var text string
		if err := json.Unmarshal(c.Body, &text); err != nil {
			return nil, fmt.Errorf("%w: chunk %d of %s is not a string", ErrModule, i, ref)
		}
		raw, err := base64.StdEncoding.DecodeString(text)
		if err != nil {
			return nil, fmt.Errorf("%w: chunk %d of %s: %v", ErrModule, i, ref, err)
		}
		b = append(b, raw...)
	}
	if Ref(b) != ref {
		return nil, fmt.Errorf("%w: the stored bytes of %s do not hash to it; upload the module again", ErrModule, ref)
	}
	return b, nil
}
