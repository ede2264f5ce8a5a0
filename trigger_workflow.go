package job

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobkit/job/store"
)

// Triggers of workflow templates: a stored trigger whose Workflow names a
// workflow template runs it, with the trigger's Params, at each tick, as
// the workflow whose ID is the tick's instance ID (triggerInstanceID).
// So a tick fired by two managers stores one workflow (the second
// ScheduleWorkflow is a repeat), the trigger's LastInstanceID is the
// workflow's (its end's) ID, and the overlap policy looks at the end
// (active while the workflow runs) and, under replace, cancels the whole
// workflow.

// triggerParams decodes a trigger's Params; nil for none.
func triggerParams(t *store.Trigger) (map[string]any, error) {
	if len(t.Params) == 0 {
		return nil, nil
	}
	var params map[string]any
	if err := json.Unmarshal(t.Params, &params); err != nil {
		return nil, fmt.Errorf("%w: trigger %q: parameters %.40q: %v; encode them as a JSON object", store.ErrInvalid, t.Name, t.Params, err)
	}
	return params, nil
}

// checkTriggerTemplate checks that the template t names is stored and
// takes t's parameters (a missing or unknown one is an error wrapping
// ErrWorkflow naming it; a template not stored, ErrTemplateNotFound).
func (m *Manager) checkTriggerTemplate(ctx context.Context, t *store.Trigger) error {
	tmpl, err := m.Admin().GetWorkflowTemplate(ctx, t.Workflow)
	if err != nil {
		return err
	}
	params, err := triggerParams(t)
	if err != nil {
		return err
	}
	if _, err := tmpl.Workflow(params); err != nil {
		return fmt.Errorf("%w (the trigger's Params)", err)
	}
	return nil
}

// scheduleTriggerTemplate runs the template name with params as the
// workflow id. A template deleted since the trigger was stored is an
// error that does not wrap store.ErrNotFound (which would say the
// trigger is gone): the tick is retried, and logged.
func (m *Manager) scheduleTriggerTemplate(ctx context.Context, name string, params map[string]any, id string) error {
	_, err := m.ScheduleWorkflowTemplate(ctx, name, params, WithWorkflowID(id))
	if err != nil {
		return fmt.Errorf("run workflow template %q: %v", name, err)
	}
	return nil
}

// fireWorkflow runs the workflow of cur's tick and records the tick.
func (s *scheduler) fireWorkflow(ctx context.Context, cur *store.Trigger, tick time.Time) error {
	params, err := triggerParams(cur)
	if err != nil {
		return fmt.Errorf("%v", err)
	}
	id := triggerInstanceID(cur, tick)
	if err := s.scheduleTemplate(ctx, cur.Workflow, params, id); err != nil {
		return err
	}
	return s.recordTick(ctx, cur, tick, id)
}
