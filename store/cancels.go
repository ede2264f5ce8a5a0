package store

import "context"

// CancelNotifier is an optional capability: a store that tells its
// subscribers at once when Cancel requests the cancellation of a running
// (Processing) attempt, whoever called Cancel and from whichever process.
// The node running the attempt can then stop it at once instead of at its
// next Renew: a manager cancels its own attempts' contexts, and jobd pushes
// a cancel to the remote worker that holds the attempt.
//
// Notices are best effort, in addition to Renew's CancelRequested, never
// instead of it: one may be lost (a subscription's connection broke, a
// subscriber's buffer was full), and the owner still learns of the request
// at its next Renew. A notice names the attempt that was Processing when
// the cancel was requested; a subscriber acts only on an attempt it holds.
type CancelNotifier interface {
	// SubscribeCancels returns a channel that receives the attempt of
	// every cancel requested on a Processing instance of the store's
	// namespace from when it returns until ctx ends; then the channel is
	// closed. A subscriber that does not keep up loses notices rather
	// than slowing Cancel.
	SubscribeCancels(ctx context.Context) (<-chan LeaseRef, error)
}
