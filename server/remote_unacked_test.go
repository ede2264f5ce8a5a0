package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	job "github.com/jobkit/job"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestExecutorUnacknowledgedTasks: a worker that takes credit, is pushed
// tasks and then never acknowledges them, never finishes them and never
// heartbeats again, with its stream still open, holds them only until
// its node is found dead (the cluster's dead threshold): a live worker's
// manager rescues them and runs them, each completed once, none by the
// mute worker.
func TestExecutorUnacknowledgedTasks(t *testing.T) {
	st, _ := memdbstore.New()
	_, url := executorServer(t, st, nil, "default")
	now := time.Now()
	var ins []*store.Instance
	for _, id := range []string{"t1", "t2", "t3"} {
		ins = append(ins, &store.Instance{ID: id, Kind: "noop", Queue: "default", Args: []byte("[]"), RunAt: now, CreatedAt: now, MaxRetries: 3})
	}
	if _, err := st.Enqueue(t.Context(), &store.EnqueueParams{Instances: ins, Now: now}); err != nil {
		t.Fatal(err)
	}

	mute := rawSession(t, url, "", "")
	_ = mute.Send(hello(&pb.Hello{NodeId: "mute", Slots: 2}))
	if m, err := mute.Receive(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("hello: %v, %v", m, err)
	}
	hb, _ := json.Marshal(&store.HeartbeatParams{Node: store.NodeInfo{ID: "mute", Workers: 2, Kinds: []string{"noop"}, Queues: []string{"default"}}, Now: now, DeadAfter: time.Second})
	_ = mute.Send(callMsg(1, "Heartbeat", hb))
	cl, _ := json.Marshal(&store.ClaimParams{Queue: "default", Owner: "mute", Limit: 2, Now: now, LeaseUntil: now.Add(time.Hour), Kinds: []string{"noop"}})
	_ = mute.Send(callMsg(2, "Claim", cl))
	// It reads what jobd sends (so nothing blocks) and answers nothing.
	var held int
	deadline := time.Now().Add(10 * time.Second)
	for held < 2 && time.Now().Before(deadline) {
		m, err := mute.Receive()
		if err != nil {
			t.Fatalf("the mute worker's session ended: %v", err)
		}
		if r := m.GetReply(); r != nil && r.GetId() == 2 {
			var res store.ClaimResult
			_ = json.Unmarshal(r.GetResultJson(), &res)
			held += len(res.Instances)
		}
		held += len(m.GetTasks().GetInstancesJson())
	}
	if held != 2 {
		t.Fatalf("the mute worker got %d tasks, want 2 (its slots)", held)
	}
	go func() {
		for {
			if _, err := mute.Receive(); err != nil {
				return
			}
		}
	}()

	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "live", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	m, err := job.NewManager(job.WithStore(rs), job.WithNodeID("live"), job.WithWorkers(4), job.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	j, _ := job.NewJob(job.WithKind("noop"), job.WithExecutor(func() {}))
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	}()
	waitCond(t, "the live worker completes all three, the mute one's two rescued", func() bool {
		got, _ := st.LookupInstances(t.Context(), &store.Query{Kind: "noop", States: []store.State{store.Completed}})
		return len(got) == 3
	})
	hist, _ := st.LookupHistory(t.Context(), &store.Query{Kind: "noop", States: []store.State{store.Completed}})
	done := map[string]int{}
	for _, h := range hist {
		if h.Node != "live" {
			t.Errorf("%s completed on %s", h.InstanceID, h.Node)
		}
		done[h.InstanceID]++
	}
	for id, n := range done {
		if n != 1 {
			t.Errorf("%s completed %d times", id, n)
		}
	}
}
