package remote

import (
	"context"
	"time"

	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/store"
)

// enqueueAtomicWait bounds the EnqueueAtomic call to jobd; past it the
// answer is false.
const enqueueAtomicWait = 10 * time.Second

// EnqueueAtomic implements store.PartialEnqueuer through jobd: whether
// jobd's store writes an Enqueue of p in one atomic step (etcd may not:
// past one transaction it splits the call). The engine then stores a
// workflow it cannot write at once in parts, under a commit marker
// (store.WorkflowTask.Parted). jobd answers once that its store writes
// every Enqueue atomically, and the Store asks no more; an error (jobd
// unreachable, or older than this call) answers false, which costs the
// parted write, never atomicity.
func (s *Store) EnqueueAtomic(p *store.EnqueueParams) bool {
	if s.enqueueAlwaysAtomic.Load() {
		return true
	}
	ctx, cancel := context.WithTimeout(s.ctx, enqueueAtomicWait)
	defer cancel()
	var r wire.EnqueueAtomic
	if err := s.unaryCall(ctx, wire.MethodEnqueueAtomic, p, &r); err != nil {
		s.log.Warn("asking jobd whether its store writes a workflow at once; storing it in parts", "err", err)
		return false
	}
	if r.Always {
		s.enqueueAlwaysAtomic.Store(true)
	}
	return r.Atomic
}
