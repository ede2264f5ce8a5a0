package job

import "github.com/jobkit/job/store"

// InstanceRecord returns a copy of the stored record an Instance returned
// by this package was read from: every field the store keeps, including
// those the Instance interface leaves out (the lease, the sequence number,
// the cancel request, the unique key's expiry, the arguments and results
// as the stored JSON). It is for code that shows instances in full, such
// as a network server. ok is false for an Instance this package did not
// make (a test double).
func InstanceRecord(ji Instance) (rec *store.Instance, ok bool) {
	if w, isWrapped := ji.(wrappedInstance); isWrapped {
		ji = w.wrapped()
	}
	if in, isInst := ji.(*instance); isInst && in != nil && in.rec != nil {
		return in.rec.Clone(), true
	}
	return nil, false
}

// wrappedInstance is an Instance that wraps another (TypedInstance).
type wrappedInstance interface{ wrapped() Instance }

func (t TypedInstance[A, R]) wrapped() Instance { return t.Instance }
