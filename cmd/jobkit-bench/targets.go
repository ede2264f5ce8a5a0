package main

import (
	"context"
	"fmt"
	"runtime"
	"sort"

	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// target is a store under measurement.
type target interface {
	// open returns a handle on a fresh, empty namespace.
	open(ctx context.Context, ns string) (store.Store, error)
	// memoryName says what memoryUsed measures.
	memoryName() string
	// memoryUsed returns the memory the store's data takes now.
	memoryUsed(ctx context.Context) (int64, error)
	close()
}

var targets = map[string]func(ctx context.Context, cfg *config) (target, error){
	"memdb": func(context.Context, *config) (target, error) { return memdbTarget{}, nil },
}

func storeNames() []string {
	var ns []string
	for n := range targets {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func openTarget(ctx context.Context, cfg *config) (target, error) {
	open, ok := targets[cfg.store]
	if !ok {
		return nil, fmt.Errorf("unknown store %q; want one of %v", cfg.store, storeNames())
	}
	return open(ctx, cfg)
}

// memdbTarget measures the embedded go-memdb store; a namespace is a new
// store value.
type memdbTarget struct{}

func (memdbTarget) open(context.Context, string) (store.Store, error) { return memdbstore.New(), nil }
func (memdbTarget) memoryName() string                               { return "Go heap (after GC)" }
func (memdbTarget) close()                                           {}

func (memdbTarget) memoryUsed(context.Context) (int64, error) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), nil
}
