package job_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// releaseCount is a memdb store that counts reads by ID and the wake-ups
// of each instance.
type releaseCount struct {
	*memdbstore.Store
	reads atomic.Int64
	mu    sync.Mutex
	woken map[string]int
}

func (s *releaseCount) LookupInstances(ctx context.Context, q *store.Query) ([]*store.Instance, error) {
	if len(q.IDs) > 0 {
		s.reads.Add(1)
	}
	return s.Store.LookupInstances(ctx, q)
}

func (s *releaseCount) Wake(ctx context.Context, p *store.WakeParams) error {
	s.mu.Lock()
	for _, id := range p.IDs {
		s.woken[id]++
	}
	s.mu.Unlock()
	return s.Store.Wake(ctx, p)
}

func (s *releaseCount) wakes(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.woken[id]
}

// TestWorkflowReleaseOnOneManager: on one manager, a fan-out and fan-in
// runs with no read of a dependency (each gate knows what the manager saw
// done), and the join is woken once, when its last dependency ended (not
// at each of the 12 ends), and claimed once.
func TestWorkflowReleaseOnOneManager(t *testing.T) {
	t.Parallel()
	st := &releaseCount{Store: newMemdb(t), woken: map[string]int{}}
	joined := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	step := mustJob(t, job.WithKind("step"), job.WithExecutor(func(ji job.Instance) string {
		name := ji.Info().Task
		mu.Lock()
		ran = append(ran, name)
		mu.Unlock()
		if name == "join" {
			close(joined)
		}
		return name
	}))
	// Workers for all twelve: they are claimed together (src's release
	// wakes them in one call), so each of their ends finds the others
	// done or running here, and the release reads none of them.
	m := newManager(t, job.WithStore(st), job.WithWorkers(16), job.WithShardRecheck(time.Hour))
	if err := m.RegisterJob(step); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	wf := job.NewWorkflow("release").Add("src", "step")
	var mids []string
	for i := range 12 {
		mids = append(mids, fmt.Sprint("m", i))
		wf.Add(mids[i], "step", job.After("src"))
	}
	wf.Add("join", "step", job.After(mids...))
	info, err := m.ScheduleWorkflow(context.Background(), wf)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-joined:
	case <-time.After(15 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the join did not run within 15 s (ran: %v)", ran)
	}
	if n := st.reads.Load(); n != 0 {
		t.Errorf("%d reads by ID before the join ran, want 0 (every gate knows its dependencies done)", n)
	}
	join := info.Task("join")
	if n := st.wakes(join.ID); n != 1 {
		t.Errorf("the join was woken %d times, want once (when its last dependency ended)", n)
	}
	got := waitWorkflow(t, m, info.ID, job.WorkflowCompleted)
	hist, err := m.LookupInstanceHistory(context.Background(), job.NewQuery(job.WithQueryInstanceID(join.ID)))
	if err != nil {
		t.Fatal(err)
	}
	claims := 0
	for _, h := range hist {
		if h.State == job.Processing {
			claims++
		}
	}
	if claims != 1 {
		t.Errorf("the join was claimed %d times, want once", claims)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 14 || ran[0] != "src" || ran[13] != "join" || slices.Index(ran, "join") != 13 {
		t.Errorf("ran %v, want src, the 12 in any order, then join, each once", ran)
	}
	var end []string // the end completes with its dependency's results: the join's
	if err := got.End.ResultsInto(&end); err != nil || !slices.Equal(end, []string{"join"}) {
		t.Errorf("the end's result %v (%v), want [join]", end, err)
	}
}
