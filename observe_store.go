package job

import (
	"context"
	"time"

	"github.com/jobkit/job/store"
)

// observedStore is the store of a manager with observers: it times every
// call (StoreCallEvent) and reports the instances the store took
// (Scheduled), rescued (Rescued) and canceled before they ran (Canceled),
// whichever of the manager's paths made the call. A method the contract
// gains later passes through the embedded Store untimed until it is added
// here. Optional capabilities (store.Notifier) are read from the
// unwrapped store (config.store).
type observedStore struct {
	store.Store
	obs observers
}

func (s *observedStore) Enqueue(ctx context.Context, p *store.EnqueueParams) ([]store.EnqueueResult, error) {
	t := time.Now()
	res, err := s.Store.Enqueue(ctx, p)
	s.obs.storeCall(OpEnqueue, t, err)
	if err == nil && len(res) == len(p.Instances) {
		for i := range res {
			if res[i].Err != nil || res[i].Existed {
				continue
			}
			rec := p.Instances[i]
			ev := ScheduledEvent{Kind: rec.Kind, Queue: rec.Queue, Delay: max(0, rec.RunAt.Sub(p.Now))}
			for _, o := range s.obs {
				o.Scheduled(ev)
			}
		}
	}
	return res, err
}

func (s *observedStore) Rescue(ctx context.Context, p *store.RescueParams) ([]*store.Instance, error) {
	t := time.Now()
	res, err := s.Store.Rescue(ctx, p)
	s.obs.storeCall(OpRescue, t, err)
	s.obs.rescued(res, false)
	return res, err
}

func (s *observedStore) RescueNodes(ctx context.Context, p *store.RescueNodesParams) (*store.RescueNodesResult, error) {
	t := time.Now()
	res, err := s.Store.RescueNodes(ctx, p)
	s.obs.storeCall(OpRescueNodes, t, err)
	if res != nil {
		s.obs.rescued(res.Rescued, true)
	}
	return res, err
}

func (s *observedStore) Cancel(ctx context.Context, p *store.CancelParams) (*store.Instance, error) {
	t := time.Now()
	res, err := s.Store.Cancel(ctx, p)
	s.obs.storeCall(OpCancel, t, err)
	if err == nil && res != nil && res.State == store.Canceled {
		ev := CanceledEvent{Kind: res.Kind, Queue: res.Queue}
		for _, o := range s.obs {
			o.Canceled(ev)
		}
	}
	return res, err
}

func (s *observedStore) Claim(ctx context.Context, p *store.ClaimParams) (*store.ClaimResult, error) {
	t := time.Now()
	res, err := s.Store.Claim(ctx, p)
	s.obs.storeCall(OpClaim, t, err)
	return res, err
}

func (s *observedStore) Renew(ctx context.Context, p *store.RenewParams) (*store.RenewResult, error) {
	t := time.Now()
	res, err := s.Store.Renew(ctx, p)
	s.obs.storeCall(OpRenew, t, err)
	return res, err
}

func (s *observedStore) Finish(ctx context.Context, p *store.FinishParams) ([]store.FinishResult, error) {
	t := time.Now()
	res, err := s.Store.Finish(ctx, p)
	s.obs.storeCall(OpFinish, t, err)
	return res, err
}

func (s *observedStore) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	t := time.Now()
	res, err := s.Store.LookupInstances(ctx, q)
	s.obs.storeCall(OpLookupInstances, t, err)
	return res, err
}

func (s *observedStore) LookupHistory(ctx context.Context, q *store.Query) ([]*store.HistoryRecord, error) {
	t := time.Now()
	res, err := s.Store.LookupHistory(ctx, q)
	s.obs.storeCall(OpLookupHistory, t, err)
	return res, err
}

func (s *observedStore) AppendLogs(ctx context.Context, recs []*store.LogRecord) error {
	t := time.Now()
	err := s.Store.AppendLogs(ctx, recs)
	s.obs.storeCall(OpAppendLogs, t, err)
	return err
}

func (s *observedStore) SetProgress(ctx context.Context, p *store.ProgressParams) error {
	t := time.Now()
	err := s.Store.SetProgress(ctx, p)
	s.obs.storeCall(OpSetProgress, t, err)
	return err
}

func (s *observedStore) LookupProgress(ctx context.Context, ids []string) ([]*store.ProgressRecord, error) {
	t := time.Now()
	res, err := s.Store.LookupProgress(ctx, ids)
	s.obs.storeCall(OpLookupProgress, t, err)
	return res, err
}

func (s *observedStore) LookupLogs(ctx context.Context, q *store.Query) ([]*store.LogRecord, error) {
	t := time.Now()
	res, err := s.Store.LookupLogs(ctx, q)
	s.obs.storeCall(OpLookupLogs, t, err)
	return res, err
}

func (s *observedStore) Prune(ctx context.Context, p *store.PruneParams) (*store.PruneResult, error) {
	t := time.Now()
	res, err := s.Store.Prune(ctx, p)
	s.obs.storeCall(OpPrune, t, err)
	return res, err
}

func (s *observedStore) PutDefinition(ctx context.Context, p *store.PutDefinitionParams) (*store.Definition, error) {
	t := time.Now()
	res, err := s.Store.PutDefinition(ctx, p)
	s.obs.storeCall(OpPutDefinition, t, err)
	return res, err
}

func (s *observedStore) GetDefinition(ctx context.Context, kind string) (*store.Definition, error) {
	t := time.Now()
	res, err := s.Store.GetDefinition(ctx, kind)
	s.obs.storeCall(OpGetDefinition, t, err)
	return res, err
}

func (s *observedStore) ListDefinitions(ctx context.Context, p *store.ListDefinitionsParams) ([]*store.Definition, error) {
	t := time.Now()
	res, err := s.Store.ListDefinitions(ctx, p)
	s.obs.storeCall(OpListDefinitions, t, err)
	return res, err
}

func (s *observedStore) DeleteDefinition(ctx context.Context, p *store.DeleteDefinitionParams) error {
	t := time.Now()
	err := s.Store.DeleteDefinition(ctx, p)
	s.obs.storeCall(OpDeleteDefinition, t, err)
	return err
}

// The trigger calls are document calls on store.TriggerCollection
// (store.TriggersIn); they are observed under the trigger operations, as
// when triggers were store calls of their own. Other documents are not
// observed.

func (s *observedStore) PutDocument(ctx context.Context, p *store.PutDocumentParams) (*store.Document, error) {
	t := time.Now()
	res, err := s.Store.PutDocument(ctx, p)
	if p != nil && p.Collection == store.TriggerCollection {
		s.obs.storeCall(OpPutTrigger, t, err)
	}
	return res, err
}

func (s *observedStore) GetDocument(ctx context.Context, collection, name string) (*store.Document, error) {
	t := time.Now()
	res, err := s.Store.GetDocument(ctx, collection, name)
	if collection == store.TriggerCollection {
		s.obs.storeCall(OpGetTrigger, t, err)
	}
	return res, err
}

func (s *observedStore) ListDocuments(ctx context.Context, p *store.ListDocumentsParams) (*store.DocumentPage, error) {
	t := time.Now()
	res, err := s.Store.ListDocuments(ctx, p)
	if p != nil && p.Collection == store.TriggerCollection {
		s.obs.storeCall(OpListTriggers, t, err)
	}
	return res, err
}

func (s *observedStore) DeleteDocument(ctx context.Context, p *store.DeleteDocumentParams) error {
	t := time.Now()
	err := s.Store.DeleteDocument(ctx, p)
	if p != nil && p.Collection == store.TriggerCollection {
		s.obs.storeCall(OpDeleteTrigger, t, err)
	}
	return err
}

func (s *observedStore) EventCursor(ctx context.Context) (string, error) {
	t := time.Now()
	res, err := s.Store.EventCursor(ctx)
	s.obs.storeCall(OpEventCursor, t, err)
	return res, err
}

func (s *observedStore) Follow(ctx context.Context, p *store.FollowParams) (<-chan store.Event, error) {
	t := time.Now()
	res, err := s.Store.Follow(ctx, p)
	s.obs.storeCall(OpFollow, t, err)
	return res, err
}

func (s *observedStore) Heartbeat(ctx context.Context, p *store.HeartbeatParams) (*store.HeartbeatResult, error) {
	t := time.Now()
	res, err := s.Store.Heartbeat(ctx, p)
	s.obs.storeCall(OpHeartbeat, t, err)
	return res, err
}

func (s *observedStore) ListNodes(ctx context.Context, p *store.ListNodesParams) ([]*store.NodeInfo, error) {
	t := time.Now()
	res, err := s.Store.ListNodes(ctx, p)
	s.obs.storeCall(OpListNodes, t, err)
	return res, err
}

func (s *observedStore) PauseQueue(ctx context.Context, p *store.QueueParams) error {
	t := time.Now()
	err := s.Store.PauseQueue(ctx, p)
	s.obs.storeCall(OpPauseQueue, t, err)
	return err
}

func (s *observedStore) ResumeQueue(ctx context.Context, p *store.QueueParams) error {
	t := time.Now()
	err := s.Store.ResumeQueue(ctx, p)
	s.obs.storeCall(OpResumeQueue, t, err)
	return err
}

func (s *observedStore) ListQueues(ctx context.Context) ([]store.QueueInfo, error) {
	t := time.Now()
	res, err := s.Store.ListQueues(ctx)
	s.obs.storeCall(OpListQueues, t, err)
	return res, err
}

func (s *observedStore) Counts(ctx context.Context, p *store.CountsParams) ([]store.GroupCount, error) {
	t := time.Now()
	res, err := s.Store.Counts(ctx, p)
	s.obs.storeCall(OpCounts, t, err)
	return res, err
}

func (s *observedStore) Lag(ctx context.Context, p *store.LagParams) (*store.LagResult, error) {
	t := time.Now()
	res, err := s.Store.Lag(ctx, p)
	s.obs.storeCall(OpLag, t, err)
	return res, err
}

func (s *observedStore) PageInstances(ctx context.Context, q *store.Query) (*store.InstancePage, error) {
	t := time.Now()
	res, err := s.Store.PageInstances(ctx, q)
	s.obs.storeCall(OpPageInstances, t, err)
	return res, err
}

func (s *observedStore) PageHistory(ctx context.Context, q *store.Query) (*store.HistoryPage, error) {
	t := time.Now()
	res, err := s.Store.PageHistory(ctx, q)
	s.obs.storeCall(OpPageHistory, t, err)
	return res, err
}

func (s *observedStore) PageLogs(ctx context.Context, q *store.Query) (*store.LogPage, error) {
	t := time.Now()
	res, err := s.Store.PageLogs(ctx, q)
	s.obs.storeCall(OpPageLogs, t, err)
	return res, err
}

func (s *observedStore) Retry(ctx context.Context, p *store.RetryParams) ([]store.AdminResult, error) {
	t := time.Now()
	res, err := s.Store.Retry(ctx, p)
	s.obs.storeCall(OpRetry, t, err)
	return res, err
}

func (s *observedStore) Delete(ctx context.Context, p *store.DeleteParams) ([]store.AdminResult, error) {
	t := time.Now()
	res, err := s.Store.Delete(ctx, p)
	s.obs.storeCall(OpDelete, t, err)
	return res, err
}
