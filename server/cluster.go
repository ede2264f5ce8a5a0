package server

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// queueService implements jobkitv1connect.QueueServiceHandler on the
// namespace's manager.
type queueService struct{}

// queueTable reads every queue with its pause flag, counts and lag.
func queueTable(ctx context.Context, m *job.Manager) ([]*pb.Queue, error) {
	infos, err := m.Admin().ListQueues(ctx)
	if err != nil {
		return nil, err
	}
	counts, err := m.Admin().CountInstances(ctx, "", "")
	if err != nil {
		return nil, err
	}
	lag, err := m.Admin().GetLag(ctx, "", "")
	if err != nil {
		return nil, err
	}
	byQueue := map[string]*[store.TimedOut + 1]int64{}
	for i := range counts {
		c := byQueue[counts[i].Queue]
		if c == nil {
			c = new([store.TimedOut + 1]int64)
			byQueue[counts[i].Queue] = c
		}
		for s, n := range counts[i].States {
			c[s] += n
		}
	}
	lags := map[string]store.Lag{}
	for _, l := range lag.Queues {
		lags[l.Name] = l
	}
	seen := map[string]bool{}
	var out []*pb.Queue
	add := func(name string, paused bool) {
		seen[name] = true
		c := byQueue[name]
		if c == nil {
			c = new([store.TimedOut + 1]int64)
		}
		q := &pb.Queue{Name: name, Paused: paused, Counts: countsToProto(c)}
		q.OldestReadyAt, q.Lag = lagFields(lags[name])
		out = append(out, q)
	}
	for _, qi := range infos {
		add(qi.Name, qi.Paused)
	}
	for _, l := range lag.Queues { // queues with counts the queue list lacks
		if !seen[l.Name] {
			add(l.Name, false)
		}
	}
	slices.SortFunc(out, func(a, b *pb.Queue) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// queueNamed returns one queue as queueTable has it (empty counts when the
// store has not seen it).
func queueNamed(ctx context.Context, m *job.Manager, name string) (*pb.Queue, error) {
	qs, err := queueTable(ctx, m)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		if q.Name == name {
			return q, nil
		}
	}
	return &pb.Queue{Name: name, Counts: &pb.StateCounts{}, Lag: durationpb.New(0)}, nil
}

// ListQueues implements QueueService.ListQueues: every queue the store
// knows, by name, with counts by state and lag.
func (queueService) ListQueues(ctx context.Context, _ *connect.Request[pb.ListQueuesRequest]) (*connect.Response[pb.ListQueuesResponse], error) {
	qs, err := queueTable(ctx, managerOf(ctx))
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.ListQueuesResponse{Queues: qs}), nil
}

// PauseQueue implements QueueService.PauseQueue and answers the queue as
// it is after the change.
func (queueService) PauseQueue(ctx context.Context, req *connect.Request[pb.PauseQueueRequest]) (*connect.Response[pb.PauseQueueResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, invalid("name is required; send the name of the queue to pause")
	}
	m := managerOf(ctx)
	if err := m.Admin().PauseQueue(ctx, req.Msg.GetName()); err != nil {
		return nil, toConnect(err)
	}
	q, err := queueNamed(ctx, m, req.Msg.GetName())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.PauseQueueResponse{Queue: q}), nil
}

// ResumeQueue implements QueueService.ResumeQueue and answers the queue as
// it is after the change.
func (queueService) ResumeQueue(ctx context.Context, req *connect.Request[pb.ResumeQueueRequest]) (*connect.Response[pb.ResumeQueueResponse], error) {
	if req.Msg.GetName() == "" {
		return nil, invalid("name is required; send the name of the queue to resume")
	}
	m := managerOf(ctx)
	if err := m.Admin().ResumeQueue(ctx, req.Msg.GetName()); err != nil {
		return nil, toConnect(err)
	}
	q, err := queueNamed(ctx, m, req.Msg.GetName())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.ResumeQueueResponse{Queue: q}), nil
}

// ListKinds implements QueueService.ListKinds: every kind the store has
// seen instances of, registered on a live node or defined in the store,
// by name, with counts by state (zeros for a kind with no instances) and
// lag.
func (queueService) ListKinds(ctx context.Context, _ *connect.Request[pb.ListKindsRequest]) (*connect.Response[pb.ListKindsResponse], error) {
	m := managerOf(ctx)
	counts, err := m.Admin().CountInstances(ctx, "", "")
	if err != nil {
		return nil, toConnect(err)
	}
	lag, err := m.Admin().GetLag(ctx, "", "")
	if err != nil {
		return nil, toConnect(err)
	}
	byKind := map[string]*[store.TimedOut + 1]int64{}
	for i := range counts {
		c := byKind[counts[i].Kind]
		if c == nil {
			c = new([store.TimedOut + 1]int64)
			byKind[counts[i].Kind] = c
		}
		for s, n := range counts[i].States {
			c[s] += n
		}
	}
	out := &pb.ListKindsResponse{}
	for _, l := range lag.Kinds {
		c := byKind[l.Name]
		if c == nil {
			c = new([store.TimedOut + 1]int64)
		}
		delete(byKind, l.Name)
		k := &pb.Kind{Name: l.Name, Counts: countsToProto(c)}
		k.OldestReadyAt, k.Lag = lagFields(l)
		out.Kinds = append(out.Kinds, k)
	}
	for name, c := range byKind { // kinds the lag report lacks
		k := &pb.Kind{Name: name, Counts: countsToProto(c)}
		k.OldestReadyAt, k.Lag = lagFields(store.Lag{Name: name})
		out.Kinds = append(out.Kinds, k)
	}
	// Kinds with no instances yet: registered on a live node, or defined
	// in the store (go-job's ListRegisteredJobs lists them too).
	idle, err := idleKinds(ctx, m)
	if err != nil {
		return nil, toConnect(err)
	}
	for _, k := range out.Kinds {
		delete(idle, k.Name)
	}
	for name := range idle {
		k := &pb.Kind{Name: name, Counts: countsToProto(new([store.TimedOut + 1]int64))}
		k.OldestReadyAt, k.Lag = lagFields(store.Lag{Name: name})
		out.Kinds = append(out.Kinds, k)
	}
	slices.SortFunc(out.Kinds, func(a, b *pb.Kind) int { return strings.Compare(a.Name, b.Name) })
	return connect.NewResponse(out), nil
}

// idleKinds returns the kinds a live node of m's store registered and
// the kinds the store has a definition of.
func idleKinds(ctx context.Context, m *job.Manager) (map[string]bool, error) {
	kinds := map[string]bool{}
	nodes, err := m.Admin().ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if n.Status == store.NodeLive {
			for _, k := range n.Kinds {
				kinds[k] = true
			}
		}
	}
	for after := ""; ; {
		page, err := m.Admin().ListDefinitions(ctx, after, store.MaxDefinitionsPage)
		if err != nil {
			return nil, err
		}
		for _, d := range page.Items {
			kinds[d.Kind] = true
		}
		if page.Next == "" {
			return kinds, nil
		}
		after = page.Next
	}
}

// nodeService implements jobkitv1connect.NodeServiceHandler.
type nodeService struct{}

// ListNodes implements NodeService.ListNodes: live nodes and those gone
// recently, from the store's registry.
func (nodeService) ListNodes(ctx context.Context, _ *connect.Request[pb.ListNodesRequest]) (*connect.Response[pb.ListNodesResponse], error) {
	nodes, err := managerOf(ctx).Admin().ListNodes(ctx)
	if err != nil {
		return nil, toConnect(err)
	}
	out := &pb.ListNodesResponse{Nodes: make([]*pb.Node, len(nodes))}
	for i, n := range nodes {
		out.Nodes[i] = nodeToProto(n)
	}
	return connect.NewResponse(out), nil
}

// GetVersion implements NodeService.GetVersion: this server's version
// (Version), the engine's, the API's and the Go release's.
func (nodeService) GetVersion(context.Context, *connect.Request[pb.GetVersionRequest]) (*connect.Response[pb.GetVersionResponse], error) {
	return connect.NewResponse(&pb.GetVersionResponse{
		ServerVersion: Version(),
		EngineVersion: job.Version,
		ApiVersion:    APIVersion,
		GoVersion:     runtime.Version(),
	}), nil
}

// APIVersion is the API the server speaks, as its protobuf package; the
// version call reports it.
const APIVersion = "jobkit.v1"

// Version returns the version of the running binary's main module when it
// was built from a tagged module (go install ...@v1.4.0), else job.Version:
// what jobd version and jobctl version print first, and the server version
// the version call (NodeService.GetVersion) reports.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return job.Version
}
