package wire

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jobkit/job/store"
)

// method is one store method: how to decode its parameters (JSON or
// Msgpack) and apply them.
type method struct {
	decode        func([]byte) (any, error)
	decodeMsgpack func([]byte) (any, error)
	apply         func(ctx context.Context, st store.Store, p any) (any, error)
}

// def builds a method whose parameters are a P and whose store call
// returns an R (encoded as it is, or through conv when given).
func def[P any, R any](call func(ctx context.Context, st store.Store, p P) (R, error)) method {
	return method{
		decode: func(b []byte) (any, error) {
			var p P
			if len(b) > 0 {
				if err := json.Unmarshal(b, &p); err != nil {
					return nil, fmt.Errorf("%w: undecodable parameters: %v", store.ErrInvalid, err)
				}
			}
			return p, nil
		},
		decodeMsgpack: func(b []byte) (any, error) {
			var p P
			if len(b) > 0 {
				if err := UnmarshalMsgpack(b, &p); err != nil {
					return nil, fmt.Errorf("%w: undecodable parameters: %v", store.ErrInvalid, err)
				}
			}
			return p, nil
		},
		apply: func(ctx context.Context, st store.Store, p any) (any, error) {
			return call(ctx, st, p.(P))
		},
	}
}

// DocumentKey names a document: the parameters of GetDocument.
type DocumentKey struct {
	Collection string
	Name       string
}

// none is the result of a method that returns only an error.
type none struct{}

func errOnly[P any](call func(ctx context.Context, st store.Store, p P) error) method {
	return def(func(ctx context.Context, st store.Store, p P) (*none, error) {
		return nil, call(ctx, st, p)
	})
}

// methods is every store method that travels, by name (the Go method's).
var methods = map[string]method{
	"Enqueue": def(func(ctx context.Context, st store.Store, p *store.EnqueueParams) ([]EnqueueResult, error) {
		rs, err := st.Enqueue(ctx, p)
		out := make([]EnqueueResult, len(rs))
		for i, r := range rs {
			out[i] = EnqueueResult{ID: r.ID, Seq: r.Seq, Existed: r.Existed, Err: encodeErr(r.Err)}
		}
		return out, err
	}),
	MethodClaim: def(func(ctx context.Context, st store.Store, p *store.ClaimParams) (*ClaimResult, error) {
		r, err := st.Claim(ctx, p)
		return EncodeClaim(r), err
	}),
	MethodRenew: def(func(ctx context.Context, st store.Store, p *store.RenewParams) (*store.RenewResult, error) {
		return st.Renew(ctx, p)
	}),
	MethodFinish: def(func(ctx context.Context, st store.Store, p *store.FinishParams) ([]FinishResult, error) {
		rs, err := st.Finish(ctx, p)
		out := make([]FinishResult, len(rs))
		for i, r := range rs {
			out[i] = FinishResult{State: r.State, Err: encodeErr(r.Err)}
		}
		return out, err
	}),
	MethodRescue: def(func(ctx context.Context, st store.Store, p *store.RescueParams) ([]*store.Instance, error) {
		return st.Rescue(ctx, p)
	}),
	"Cancel": def(func(ctx context.Context, st store.Store, p *store.CancelParams) (*store.Instance, error) {
		return st.Cancel(ctx, p)
	}),
	"LookupInstances": def(func(ctx context.Context, st store.Store, q *store.Query) ([]*store.Instance, error) {
		return st.LookupInstances(ctx, q)
	}),
	"LookupHistory": def(func(ctx context.Context, st store.Store, q *store.Query) ([]*store.HistoryRecord, error) {
		return st.LookupHistory(ctx, q)
	}),
	MethodAppendLogs: errOnly(func(ctx context.Context, st store.Store, recs []*store.LogRecord) error {
		return st.AppendLogs(ctx, recs)
	}),
	"LookupLogs": def(func(ctx context.Context, st store.Store, q *store.Query) ([]*store.LogRecord, error) {
		return st.LookupLogs(ctx, q)
	}),
	MethodSetProgress: errOnly(func(ctx context.Context, st store.Store, p *store.ProgressParams) error {
		return st.SetProgress(ctx, p)
	}),
	"LookupProgress": def(func(ctx context.Context, st store.Store, ids []string) ([]*store.ProgressRecord, error) {
		return st.LookupProgress(ctx, ids)
	}),
	"Prune": def(func(ctx context.Context, st store.Store, p *store.PruneParams) (*store.PruneResult, error) {
		return st.Prune(ctx, p)
	}),
	"PutDefinition": def(func(ctx context.Context, st store.Store, p *store.PutDefinitionParams) (*store.Definition, error) {
		return st.PutDefinition(ctx, p)
	}),
	"GetDefinition": def(func(ctx context.Context, st store.Store, kind string) (*store.Definition, error) {
		return st.GetDefinition(ctx, kind)
	}),
	"ListDefinitions": def(func(ctx context.Context, st store.Store, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
		return st.ListDefinitions(ctx, p)
	}),
	"DeleteDefinition": errOnly(func(ctx context.Context, st store.Store, p *store.DeleteDefinitionParams) error {
		return st.DeleteDefinition(ctx, p)
	}),
	// The trigger calls of remote stores from before triggers were
	// documents (store.TriggersIn): served for them until they upgrade.
	"PutTrigger": def(func(ctx context.Context, st store.Store, p *store.PutTriggerParams) (*store.Trigger, error) {
		return store.TriggersIn(st).PutTrigger(ctx, p)
	}),
	"GetTrigger": def(func(ctx context.Context, st store.Store, name string) (*store.Trigger, error) {
		return store.TriggersIn(st).GetTrigger(ctx, name)
	}),
	"ListTriggers": def(func(ctx context.Context, st store.Store, p *store.ListTriggersParams) (*store.TriggerPage, error) {
		return store.TriggersIn(st).ListTriggers(ctx, p)
	}),
	"DeleteTrigger": errOnly(func(ctx context.Context, st store.Store, p *store.DeleteTriggerParams) error {
		return store.TriggersIn(st).DeleteTrigger(ctx, p)
	}),
	"EventCursor": def(func(ctx context.Context, st store.Store, _ *none) (string, error) {
		return st.EventCursor(ctx)
	}),
	MethodHeartbeat: def(func(ctx context.Context, st store.Store, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
		return st.Heartbeat(ctx, p)
	}),
	"ListNodes": def(func(ctx context.Context, st store.Store, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
		return st.ListNodes(ctx, p)
	}),
	MethodRescueNodes: def(func(ctx context.Context, st store.Store, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
		return st.RescueNodes(ctx, p)
	}),
	"PauseQueue": errOnly(func(ctx context.Context, st store.Store, p *store.QueueParams) error {
		return st.PauseQueue(ctx, p)
	}),
	"ResumeQueue": errOnly(func(ctx context.Context, st store.Store, p *store.QueueParams) error {
		return st.ResumeQueue(ctx, p)
	}),
	"ListQueues": def(func(ctx context.Context, st store.Store, _ *none) ([]store.QueueInfo, error) {
		return st.ListQueues(ctx)
	}),
	"Counts": def(func(ctx context.Context, st store.Store, p *store.CountsParams) ([]store.GroupCount, error) {
		return st.Counts(ctx, p)
	}),
	"Lag": def(func(ctx context.Context, st store.Store, p *store.LagParams) (*store.LagResult, error) {
		return st.Lag(ctx, p)
	}),
	"PageInstances": def(func(ctx context.Context, st store.Store, q *store.Query) (*store.InstancePage, error) {
		return st.PageInstances(ctx, q)
	}),
	"PageHistory": def(func(ctx context.Context, st store.Store, q *store.Query) (*store.HistoryPage, error) {
		return st.PageHistory(ctx, q)
	}),
	"PageLogs": def(func(ctx context.Context, st store.Store, q *store.Query) (*store.LogPage, error) {
		return st.PageLogs(ctx, q)
	}),
	MethodFollowNext: def(followNext),
	"PutDocument": def(func(ctx context.Context, st store.Store, p *PutDocument) (*Document, error) {
		d, err := st.PutDocument(ctx, p.Store())
		return EncodeDocument(d), err
	}),
	"GetDocument": def(func(ctx context.Context, st store.Store, p *DocumentKey) (*Document, error) {
		if p == nil {
			p = &DocumentKey{}
		}
		d, err := st.GetDocument(ctx, p.Collection, p.Name)
		return EncodeDocument(d), err
	}),
	"ListDocuments": def(func(ctx context.Context, st store.Store, p *store.ListDocumentsParams) (*DocumentPage, error) {
		pg, err := st.ListDocuments(ctx, p)
		if pg == nil {
			return nil, err
		}
		out := &DocumentPage{Next: pg.Next}
		for _, d := range pg.Documents {
			out.Documents = append(out.Documents, EncodeDocument(d))
		}
		return out, err
	}),
	"DeleteDocument": errOnly(func(ctx context.Context, st store.Store, p *store.DeleteDocumentParams) error {
		return st.DeleteDocument(ctx, p)
	}),
	"PruneDocuments": def(func(ctx context.Context, st store.Store, p *store.PruneDocumentsParams) (int, error) {
		return st.PruneDocuments(ctx, p)
	}),
	"Wake": errOnly(func(ctx context.Context, st store.Store, p *store.WakeParams) error {
		return st.Wake(ctx, p)
	}),
	"Retry": def(func(ctx context.Context, st store.Store, p *store.RetryParams) ([]AdminResult, error) {
		rs, err := st.Retry(ctx, p)
		return encodeAdmin(rs), err
	}),
	"Delete": def(func(ctx context.Context, st store.Store, p *store.DeleteParams) ([]AdminResult, error) {
		rs, err := st.Delete(ctx, p)
		return encodeAdmin(rs), err
	}),
}

func encodeAdmin(rs []store.AdminResult) []AdminResult {
	out := make([]AdminResult, len(rs))
	for i, r := range rs {
		out[i] = AdminResult{ID: r.ID, State: r.State, Err: encodeErr(r.Err)}
	}
	return out
}

// EncodeClaim returns r as it travels (nil for nil).
func EncodeClaim(r *store.ClaimResult) *ClaimResult {
	if r == nil {
		return nil
	}
	out := &ClaimResult{Instances: r.Instances, NextRunAt: r.NextRunAt, Limited: r.Limited, RetryAfter: r.RetryAfter}
	for _, u := range r.Undecodable {
		out.Undecodable = append(out.Undecodable, Undecodable{LeaseRef: u.LeaseRef, Err: encodeErr(u.Err)})
	}
	return out
}

// Decode decodes the parameters of a call of method; ErrUnknownMethod (and
// store.ErrInvalid) for a method that does not exist, store.ErrInvalid for
// parameters that do not decode.
func Decode(name string, params []byte) (any, error) {
	m, ok := methods[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: %w (this jobd may be older than the worker's jobkit; upgrade jobd)", ErrUnknownMethod, name, store.ErrInvalid)
	}
	return m.decode(params)
}

// Apply applies decoded parameters of method name to st and returns the
// result as it travels (encode it with json.Marshal) and the call's error.
func Apply(ctx context.Context, st store.Store, name string, p any) (any, error) {
	m, ok := methods[name]
	if !ok {
		return nil, fmt.Errorf("%w %q: %w", ErrUnknownMethod, name, store.ErrInvalid)
	}
	return m.apply(ctx, st, p)
}
