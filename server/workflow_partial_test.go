package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/remote"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/memdbstore"
)

// TestRemoteWorkflowWholeOrNothingOnEtcd: a manager whose store is jobd
// (remote.Store) backed by etcd stores a workflow too large for one etcd
// transaction in parts under its end (store.PartialEnqueuer passed on),
// so a write that etcd refuses part way runs nothing, and a workflow of
// the same size written whole runs each task once.
func TestRemoteWorkflowWholeOrNothingOnEtcd(t *testing.T) {
	// A request limit below what etcdstore packs into one transaction
	// (1 MiB): the transaction with three 150 KB arguments is refused.
	srv := testserver.StartEtcd(t, "--max-request-bytes", "400000")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	es, err := etcdstore.New(cli, etcdstore.WithNamespace(fmt.Sprintf("wfpart-%d", nsSeq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { es.Close() })
	_, url := executorServer(t, es, nil, "default")
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, NodeID: "wf-worker", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })

	var (
		mu   sync.Mutex
		runs = map[string]int{}
		n    atomic.Int64
	)
	j, err := job.NewJob(job.WithKind("wf.step"), job.WithExecutor(func(ji job.Instance, _ string) error {
		mu.Lock()
		runs[ji.Info().Task]++
		mu.Unlock()
		n.Add(1)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := job.NewManager(job.WithStore(rs), job.WithPollInterval(50*time.Millisecond), job.WithShardRecheck(200*time.Millisecond), job.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
	})
	ctx := t.Context()

	const roots = 60
	big := func(id string, large int) *job.Workflow {
		wf := job.NewWorkflow("big", job.WithWorkflowID(id))
		var seconds []string
		for i := range roots {
			arg := "x"
			if i >= roots-large {
				arg = strings.Repeat("y", 150<<10)
			}
			wf.Add(fmt.Sprintf("r%d", i), "wf.step", job.WithArguments(arg))
			wf.Add(fmt.Sprintf("s%d", i), "wf.step", job.WithArguments("x"), job.After(fmt.Sprintf("r%d", i)))
			seconds = append(seconds, fmt.Sprintf("s%d", i))
		}
		wf.Add("last", "wf.step", job.WithArguments("x"), job.After(seconds...))
		return wf
	}
	if _, err := m.ScheduleWorkflow(ctx, big("broken", 3)); err == nil {
		t.Fatal("ScheduleWorkflow with a transaction etcd refuses succeeded")
	} else {
		t.Logf("the failed call: %v", err)
	}
	ids := []string{"broken"}
	for i := range roots {
		ids = append(ids, store.WorkflowTaskID("broken", fmt.Sprintf("r%d", i)), store.WorkflowTaskID("broken", fmt.Sprintf("s%d", i)))
	}
	ids = append(ids, store.WorkflowTaskID("broken", "last"))
	var stored []*store.Instance
	waitFor(t, "every task stored by the failed call ended", func() bool {
		stored, err = es.LookupInstances(ctx, &store.Query{IDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range stored {
			if !in.State.Final() {
				return false
			}
		}
		return len(stored) > 0 || n.Load() > 0
	})
	if len(stored) == 0 {
		t.Fatal("the failed call stored nothing: the test did not split the write (raise roots)")
	}
	t.Logf("the failed call left %d of %d instances stored", len(stored), len(ids))
	if got := n.Load(); got != 0 {
		t.Fatalf("%d tasks of a workflow whose ScheduleWorkflow through jobd failed ran; want none (whole or nothing)", got)
	}
	for _, in := range stored {
		if in.ID == "broken" {
			t.Fatalf("the end of a workflow whose write failed is stored: %+v", in)
		}
		if in.State != store.Canceled || !in.Task.Parted {
			t.Fatalf("task %s of the failed workflow ended %s (parted %v); want canceled, stored in parts", in.Task.GetName(), in.State, in.Task.Parted)
		}
	}
	if _, err := m.GetWorkflow(ctx, "broken"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetWorkflow of the failed workflow: %v; want not found", err)
	}

	// The same size, written whole: every task runs once.
	info, err := m.ScheduleWorkflow(ctx, big("whole", 0))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the whole workflow completed", func() bool {
		got, err := m.GetWorkflow(ctx, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == job.WorkflowFailed || got.State == job.WorkflowCanceled {
			t.Fatalf("the whole workflow ended %s: %v", got.State, got.End.Error)
		}
		return got.State == job.WorkflowCompleted
	})
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 2*roots+1 {
		t.Fatalf("%d tasks ran, want %d", len(runs), 2*roots+1)
	}
	for name, c := range runs {
		if c != 1 {
			t.Fatalf("task %s ran %d times, want once", name, c)
		}
	}
}

// TestRemoteEnqueueAtomic: remote.Store answers EnqueueAtomic as jobd's
// store does: always true over a store whose Enqueue is atomic (memdb),
// and as etcdstore answers over etcd (true for a small call, false for
// one past a transaction).
func TestRemoteEnqueueAtomic(t *testing.T) {
	params := func(n int) *store.EnqueueParams {
		p := &store.EnqueueParams{Now: time.Now()}
		for i := range n {
			p.Instances = append(p.Instances, &store.Instance{ID: fmt.Sprintf("i%d", i), Kind: "k", Queue: "default", CreatedAt: p.Now, RunAt: p.Now})
		}
		return p
	}
	mem, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	_, url := executorServer(t, mem, nil, "default")
	rs, err := remote.Dial(t.Context(), remote.Options{Address: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	for _, n := range []int{1, 1000} {
		if !rs.EnqueueAtomic(params(n)) {
			t.Fatalf("EnqueueAtomic of %d instances over memdb: false, want true", n)
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: testserver.Etcd(t), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	es, err := etcdstore.New(cli, etcdstore.WithNamespace(fmt.Sprintf("wfatomic-%d", nsSeq.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { es.Close() })
	_, eurl := executorServer(t, es, nil, "default")
	ers, err := remote.Dial(t.Context(), remote.Options{Address: eurl, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ers.Close() })
	for _, n := range []int{1, 1000} {
		p := params(n)
		if got, want := ers.EnqueueAtomic(p), es.EnqueueAtomic(p); got != want {
			t.Fatalf("EnqueueAtomic of %d instances through jobd on etcd: %v, etcdstore says %v", n, got, want)
		}
	}
	if ers.EnqueueAtomic(params(1000)) {
		t.Fatal("EnqueueAtomic of 1,000 instances through jobd on etcd: true; etcd cannot write them in one transaction")
	}
}
