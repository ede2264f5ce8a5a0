package store

import "context"

type unsharedKey struct{}

// Unshared returns a context whose store calls the engine must make on
// their own, never batched with other callers' calls: it carries state of
// one caller only, such as the caller's database transaction
// (pgstore.WithTx). The engine's group commit of ScheduleJob sends an
// Enqueue with such a context as its own call, at once.
func Unshared(ctx context.Context) context.Context {
	return context.WithValue(ctx, unsharedKey{}, true)
}

// IsUnshared reports whether ctx came from Unshared.
func IsUnshared(ctx context.Context) bool {
	v, _ := ctx.Value(unsharedKey{}).(bool)
	return v
}
