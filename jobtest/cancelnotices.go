package jobtest

import "github.com/jobkit/job/store"

// withoutCancelNotices returns s without its store.CancelNotifier (and
// with its store.Notifier, when it has one): a manager on it learns of
// cancels asked elsewhere only at its lease renewals, as on a store that
// reports no cancels. For scenarios about what happens before a renewal
// carries the request.
func withoutCancelNotices(s store.Store) store.Store {
	if n, ok := s.(store.Notifier); ok {
		return struct {
			store.Store
			store.Notifier
		}{s, n}
	}
	return struct{ store.Store }{s}
}
