package wire

import (
	"context"

	"github.com/jobkit/job/store"
)

// MethodEnqueueAtomic is store.PartialEnqueuer.EnqueueAtomic: whether
// jobd's store writes an Enqueue of the parameters in one atomic step.
const MethodEnqueueAtomic = "EnqueueAtomic"

// EnqueueAtomic is the result of MethodEnqueueAtomic.
type EnqueueAtomic struct {
	// Atomic: the store writes the parameters asked about in one atomic
	// step.
	Atomic bool `json:"atomic"`
	// Always: the store writes every Enqueue in one atomic step (it is no
	// store.PartialEnqueuer), so the worker need not ask again.
	Always bool `json:"always,omitempty"`
}

func init() {
	methods[MethodEnqueueAtomic] = def(func(_ context.Context, st store.Store, p *store.EnqueueParams) (*EnqueueAtomic, error) {
		pe, ok := st.(store.PartialEnqueuer)
		if !ok {
			return &EnqueueAtomic{Atomic: true, Always: true}, nil
		}
		return &EnqueueAtomic{Atomic: pe.EnqueueAtomic(p)}, nil
	})
}
