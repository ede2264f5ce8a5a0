package job_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// pipelineTemplate is a template of two "tick" tasks, b after a, each
// given the parameter who.
func pipelineTemplate() *job.WorkflowTemplate {
	return &job.WorkflowTemplate{
		Name:   "pipeline",
		Params: []job.TemplateParam{{Name: "who"}},
		Tasks: []job.TemplateTask{
			{Name: "a", Kind: "tick", Args: []byte(`["${who}"]`)},
			{Name: "b", Kind: "tick", Args: []byte(`["${who}"]`), After: []string{"a"}},
		},
	}
}

// pipelineRuns returns the workflows of the template, by ID.
func pipelineRuns(t *testing.T, m *job.Manager) map[string]*job.WorkflowInfo {
	t.Helper()
	page, err := m.ListWorkflows(context.Background(), job.WorkflowQuery{Name: "pipeline", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*job.WorkflowInfo{}
	for _, w := range page.Items {
		out[w.ID] = w
	}
	return out
}

// TestTriggerRunsWorkflowTemplate: a stored trigger that names a
// workflow template runs it with its parameters at each tick, once per
// cluster (two managers), and its overlap policy applies to whole
// workflows: forbid skips a tick while the previous workflow runs,
// replace cancels it.
func TestTriggerRunsWorkflowTemplate(t *testing.T) {
	t.Parallel()
	t.Run("allow", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var mu sync.Mutex
			runs := map[string]int{}
			_, ms := triggerCluster(t, 2, func(ji job.Instance, who string) error {
				mu.Lock()
				defer mu.Unlock()
				if who != "ada" {
					return job.Permanent(errors.New("parameter not passed: " + who))
				}
				runs[ji.Info().Workflow+"/"+ji.Info().Task]++
				return nil
			})
			ctx := context.Background()
			if _, err := ms[0].Admin().PutWorkflowTemplate(ctx, pipelineTemplate(), 0); err != nil {
				t.Fatal(err)
			}
			tr := &store.Trigger{Name: "wf", Workflow: "pipeline", Params: []byte(`{"who": "ada"}`), Interval: time.Second}
			if _, err := ms[1].Admin().PutTrigger(ctx, tr, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3*time.Second + 500*time.Millisecond)
			synctest.Wait()
			wfs := pipelineRuns(t, ms[0])
			if len(wfs) != 3 {
				t.Fatalf("%d workflows after 3.5 s of a 1 s trigger, want 3", len(wfs))
			}
			got, err := ms[0].Admin().GetTrigger(ctx, "wf")
			if err != nil {
				t.Fatal(err)
			}
			if wfs[got.LastInstanceID] == nil {
				t.Fatalf("the trigger's last run %q is not one of its workflows", got.LastInstanceID)
			}
			mu.Lock()
			defer mu.Unlock()
			for id, w := range wfs {
				if w.State != job.WorkflowCompleted {
					t.Errorf("workflow %s is %s, want completed", id, w.State)
				}
				for _, task := range []string{"a", "b"} {
					if n := runs[id+"/"+task]; n != 1 {
						t.Errorf("task %s of workflow %s ran %d times, want once", task, id, n)
					}
				}
			}
		})
	})
	t.Run("forbid", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			_, ms := triggerCluster(t, 2, func(ji job.Instance, who string) {
				if ji.Info().Task == "b" {
					<-release
				}
			})
			defer once.Do(func() { close(release) })
			ctx := context.Background()
			if _, err := ms[0].Admin().PutWorkflowTemplate(ctx, pipelineTemplate(), 0); err != nil {
				t.Fatal(err)
			}
			tr := &store.Trigger{Name: "wf", Workflow: "pipeline", Params: []byte(`{"who": "ada"}`), Interval: time.Second, Overlap: store.OverlapForbid}
			if _, err := ms[0].Admin().PutTrigger(ctx, tr, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3*time.Second + 500*time.Millisecond)
			synctest.Wait()
			if wfs := pipelineRuns(t, ms[0]); len(wfs) != 1 {
				t.Fatalf("%d workflows while the first runs, want 1 (overlap forbid)", len(wfs))
			}
			got, err := ms[0].Admin().GetTrigger(ctx, "wf")
			if err != nil {
				t.Fatal(err)
			}
			if got.Skipped != 2 {
				t.Fatalf("the trigger skipped %d ticks, want 2", got.Skipped)
			}
			once.Do(func() { close(release) })
			time.Sleep(time.Second)
			synctest.Wait()
			wfs := pipelineRuns(t, ms[0])
			if len(wfs) != 2 {
				t.Fatalf("%d workflows after the first ended, want 2", len(wfs))
			}
		})
	})
	t.Run("replace", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, ms := triggerCluster(t, 1, func(ctx context.Context, who string) error {
				<-ctx.Done()
				return ctx.Err()
			})
			ctx := context.Background()
			if _, err := ms[0].Admin().PutWorkflowTemplate(ctx, pipelineTemplate(), 0); err != nil {
				t.Fatal(err)
			}
			tr := &store.Trigger{Name: "wf", Workflow: "pipeline", Params: []byte(`{"who": "ada"}`), Interval: time.Second, Overlap: store.OverlapReplace}
			if _, err := ms[0].Admin().PutTrigger(ctx, tr, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2*time.Second + 500*time.Millisecond)
			if err := ms[0].Admin().DeleteTrigger(ctx, "wf"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			synctest.Wait()
			wfs := pipelineRuns(t, ms[0])
			if len(wfs) != 2 {
				t.Fatalf("%d workflows, want 2", len(wfs))
			}
			canceled, running := 0, 0
			for _, w := range wfs {
				switch w.State {
				case job.WorkflowCanceled:
					canceled++
				case job.WorkflowRunning:
					running++
				}
			}
			if canceled != 1 || running != 1 {
				t.Fatalf("%d workflows canceled and %d running, want the first canceled by the second tick, the second running", canceled, running)
			}
		})
	})
}

// TestTriggerWorkflowTemplateInvalid: a trigger naming a template is
// refused, nothing stored, when the template is not stored, a
// parameter is missing or unknown, or it also names a kind, arguments,
// or parameters that are not a JSON object.
func TestTriggerWorkflowTemplateInvalid(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		_, ms := triggerCluster(t, 1, func(string) {})
		ctx := context.Background()
		if _, err := ms[0].Admin().PutWorkflowTemplate(ctx, pipelineTemplate(), 0); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			tr   store.Trigger
			want error
		}{
			{"no template", store.Trigger{Workflow: "nope", Interval: time.Second}, job.ErrTemplateNotFound},
			{"missing param", store.Trigger{Workflow: "pipeline", Interval: time.Second}, job.ErrWorkflow},
			{"unknown param", store.Trigger{Workflow: "pipeline", Params: []byte(`{"who": 1, "what": 2}`), Interval: time.Second}, job.ErrWorkflow},
			{"kind too", store.Trigger{Kind: "tick", Workflow: "pipeline", Params: []byte(`{"who": 1}`), Interval: time.Second}, store.ErrInvalid},
			{"args", store.Trigger{Workflow: "pipeline", Args: []byte(`[1]`), Params: []byte(`{"who": 1}`), Interval: time.Second}, store.ErrInvalid},
			{"params not an object", store.Trigger{Workflow: "pipeline", Params: []byte(`["ada"]`), Interval: time.Second}, store.ErrInvalid},
			{"params with a kind", store.Trigger{Kind: "tick", Params: []byte(`{"who": 1}`), Interval: time.Second}, store.ErrInvalid},
		} {
			tr := c.tr
			tr.Name = "bad"
			_, err := ms[0].Admin().PutTrigger(ctx, &tr, 0)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: PutTrigger: %v, want %v", c.name, err, c.want)
			} else {
				t.Logf("%s: %v", c.name, err)
			}
		}
		if _, err := ms[0].Admin().GetTrigger(ctx, "bad"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a refused trigger is stored: %v", err)
		}
	})
}
