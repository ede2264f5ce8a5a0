package alert

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/jobkit/job/store"
)

// stateName is the evaluator's state document: one per namespace, shared
// by every evaluator of the cluster.
const stateName = "evaluator"

// evalState is what the evaluation carries from one step to the next.
// Each step reads it, folds in the events after Cursor and what the
// inspection queries say, and writes it back with a compare-and-set on
// its version: of several evaluators stepping at once, one wins, and the
// others' steps are dropped (their events are folded by the winner).
type evalState struct {
	Cursor string    `json:"cursor"`
	StepAt time.Time `json:"step_at"`
	// PrunedAt is when the notification history was last pruned.
	PrunedAt time.Time `json:"pruned_at,omitzero"`
	// Failures: per rule and kind, the failures in a row and the last.
	Failures map[string]*failRun `json:"failures,omitempty"`
	// LagSince: per rule and queue (or kind), since when the lag has been
	// above the threshold.
	LagSince map[string]time.Time `json:"lag_since,omitempty"`
	// Ticks: per rule and trigger, the tick state seen at the last step.
	Ticks map[string]*tickSeen `json:"ticks,omitempty"`
	// Firing: the incidents whose condition holds, by incident ID.
	Firing map[string]*firing `json:"firing,omitempty"`
	// WorkflowFails: per workflow_failed rule and workflow name, the
	// failed workflows in a row and the last (workflows.go).
	WorkflowFails map[string]*failRun `json:"workflow_fails,omitempty"`
}

type failRun struct {
	Count int     `json:"count"`
	Last  Subject `json:"last"`
}

type tickSeen struct {
	Tick    time.Time `json:"tick,omitzero"`
	Skipped int64     `json:"skipped,omitempty"`
}

type firing struct {
	Rule      string    `json:"rule"`
	Condition Condition `json:"condition"`
	Subject   Subject   `json:"subject"`
	Since     time.Time `json:"since"`
}

// missedGrace is how late a trigger's tick may be before it counts as
// missed: the engine fires a tick up to twice its reload interval (5 s)
// late and still counts it on time.
const missedGrace = 15 * time.Second

// evaluator runs the steps of one Service.
type evaluator struct {
	s       *Service
	wakeCh  chan struct{}
	mu      sync.Mutex
	started map[string]time.Time // instance ID + attempt → start of the attempt
}

func newEvaluator(s *Service) *evaluator {
	return &evaluator{s: s, wakeCh: make(chan struct{}, 1), started: map[string]time.Time{}}
}

func (e *evaluator) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

func key(parts ...string) string { return strings.Join(parts, "\x00") }

// Run evaluates the rules every Config.Interval and delivers the
// notifications due, until ctx ends. Run it on every node: steps and
// deliveries are claimed in the store, so each transition is notified
// once in the cluster. Errors of one step are logged and the next step
// tries again.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.ev.wakeCh:
		}
		if err := s.Step(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("alert: evaluation failed; trying again at the next step", "namespace", s.cfg.Namespace, "err", err)
		}
		if err := s.Deliver(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("alert: delivery round failed; trying again at the next step", "namespace", s.cfg.Namespace, "err", err)
		}
		if err := s.announceChannels(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("alert: listing the channels for metrics failed; trying again at the next step", "namespace", s.cfg.Namespace, "err", err)
		}
		t.Reset(s.cfg.Interval)
	}
}

// Step runs one evaluation: it folds the events since the stored cursor
// and the inspection queries into the shared state (a compare-and-set:
// when another evaluator stepped meanwhile, this step is dropped), then
// opens, repeats and resolves incidents to match what holds.
func (s *Service) Step(ctx context.Context) error {
	st, ver, err := s.loadState(ctx)
	if err != nil {
		return err
	}
	now := s.now()
	stepping := st.StepAt.IsZero() || now.Sub(st.StepAt) >= s.cfg.Interval/2
	var events []store.Event
	cursor := st.Cursor
	if stepping {
		if events, cursor, err = s.ev.drain(ctx, st.Cursor); err != nil {
			return err
		}
	}
	// The rules are read after the events: every rule stored before the
	// last event read judges it.
	rules, err := s.ListRules(ctx)
	if err != nil {
		return err
	}
	byName := make(map[string]*Rule, len(rules))
	var active []*Rule
	for _, r := range rules {
		byName[r.Name] = r
		if !r.Disabled {
			active = append(active, r)
		}
	}
	if stepping {
		next, err := s.ev.evaluate(ctx, st, events, cursor, active, now)
		if err != nil {
			return err
		}
		prune := now.Sub(st.PrunedAt) >= time.Minute
		if prune {
			next.PrunedAt = now
		}
		_, err = s.putDoc(ctx, colState, stateName, next, ver)
		switch {
		case errors.Is(err, store.ErrConflict):
			// Another evaluator stepped; its state is the one to act on.
			if st, _, err = s.loadState(ctx); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("alert: write the evaluator state: %w", err)
		default:
			st = next
			if prune {
				if err := s.pruneHistory(ctx, now); err != nil {
					s.log.Warn("alert: prune the notification history", "namespace", s.cfg.Namespace, "err", err)
				}
			}
		}
	}
	return s.reconcile(ctx, byName, st.Firing, now)
}

// loadState reads the shared state, creating it (following events from
// now) when there is none.
func (s *Service) loadState(ctx context.Context) (*evalState, int64, error) {
	st := new(evalState)
	d, err := s.getDoc(ctx, colState, stateName, st)
	if err == nil {
		return st, d.Version, nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return nil, 0, fmt.Errorf("alert: read the evaluator state: %w", err)
	}
	cur, err := s.cfg.Store.EventCursor(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("alert: event cursor: %w", err)
	}
	st.Cursor = cur
	d, err = s.putDoc(ctx, colState, stateName, st, 0)
	if errors.Is(err, store.ErrConflict) {
		return s.loadState(ctx)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("alert: create the evaluator state: %w", err)
	}
	return st, d.Version, nil
}

// evaluate returns the state after st: st's counters moved by events
// (those up to cursor), and the firing set from them and the inspection
// queries.
func (e *evaluator) evaluate(ctx context.Context, st *evalState, events []store.Event, cursor string, rules []*Rule, now time.Time) (*evalState, error) {
	next := &evalState{
		Cursor: st.Cursor, StepAt: now, PrunedAt: st.PrunedAt,
		Failures: maps.Clone(st.Failures), LagSince: map[string]time.Time{},
		Ticks: map[string]*tickSeen{}, Firing: map[string]*firing{},
		WorkflowFails: maps.Clone(st.WorkflowFails),
	}
	if next.Failures == nil {
		next.Failures = map[string]*failRun{}
	}
	byCond := map[Condition][]*Rule{}
	for _, r := range rules {
		byCond[r.Condition] = append(byCond[r.Condition], r)
	}
	// Triggers are read when a rule needs them (missed ticks, a trigger's
	// scope, no node).
	var triggers map[string]*store.Trigger
	needTriggers := len(byCond[MissedTick]) > 0 || len(byCond[NoNode]) > 0
	for _, r := range rules {
		needTriggers = needTriggers || r.Trigger != ""
	}
	if needTriggers {
		var err error
		if triggers, err = e.listTriggers(ctx); err != nil {
			return nil, err
		}
	}

	// Failures, from the events.
	next.Cursor = cursor
	for _, ev := range events {
		if ev.State != store.Terminated && ev.State != store.TimedOut && ev.State != store.Completed {
			continue
		}
		for _, r := range byCond[Failed] {
			ok, err := e.inScope(ctx, r, triggers, ev.Kind, ev.Queue, ev.InstanceID)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			k := key(r.Name, ev.Kind)
			if ev.State == store.Completed {
				delete(next.Failures, k)
				continue
			}
			run := next.Failures[k]
			c := 1
			if run != nil {
				c = run.Count + 1
			}
			next.Failures[k] = &failRun{Count: c, Last: Subject{
				Kind: ev.Kind, Queue: ev.Queue, Trigger: r.Trigger, InstanceID: ev.InstanceID, Attempt: ev.Attempt,
				Error: ev.Error, Detail: fmt.Sprintf("%d failure(s) in a row, the last %s", c, strings.ToLower(ev.State.String())),
			}}
		}
	}
	for k, run := range next.Failures {
		name, _, _ := strings.Cut(k, "\x00")
		var r *Rule
		for _, x := range byCond[Failed] {
			if x.Name == name {
				r = x
			}
		}
		if r == nil {
			delete(next.Failures, k) // the rule is gone or disabled
			continue
		}
		if run.Count >= r.failures() {
			next.fire(r, run.Last, now, st)
		}
	}

	if err := e.workflowFailures(ctx, byCond[WorkflowFailed], events, next, st, now); err != nil {
		return nil, err
	}
	if err := e.longRuns(ctx, byCond[LongRun], triggers, next, st, now); err != nil {
		return nil, err
	}
	if err := e.lags(ctx, byCond[QueueLag], next, st, now); err != nil {
		return nil, err
	}
	e.ticks(byCond[MissedTick], triggers, next, st, now)
	if err := e.noNodes(ctx, byCond[NoNode], triggers, next, st, now); err != nil {
		return nil, err
	}
	return next, nil
}

// fire adds r's incident about sub to the firing set, keeping the time it
// started firing from the previous state.
func (st *evalState) fire(r *Rule, sub Subject, now time.Time, prev *evalState) {
	id := incidentID(r.Name, subjectKey(r.Condition, sub))
	since := now
	if f, ok := prev.Firing[id]; ok {
		since = f.Since
	}
	st.Firing[id] = &firing{Rule: r.Name, Condition: r.Condition, Subject: sub, Since: since}
}

// drain reads the events after cursor that are there now (up to a
// bound), and the cursor after the last one read. An expired cursor
// starts over from now: what fell in between is lost to the counters, and
// the log says so.
func (e *evaluator) drain(ctx context.Context, cursor string) ([]store.Event, string, error) {
	s := e.s
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := s.cfg.Store.Follow(fctx, &store.FollowParams{Cursor: cursor, Buffer: 1024})
	if errors.Is(err, store.ErrCursorExpired) || errors.Is(err, store.ErrInvalid) {
		s.log.Warn("alert: the evaluator's event cursor expired; following from now (failures in between are not counted)", "namespace", s.cfg.Namespace, "err", err)
		cur, err := s.cfg.Store.EventCursor(ctx)
		return nil, cur, err
	}
	if err != nil {
		return nil, cursor, fmt.Errorf("alert: follow events: %w", err)
	}
	var out []store.Event
	idle := time.NewTimer(100 * time.Millisecond)
	defer idle.Stop()
	for len(out) < 5000 {
		select {
		case ev, ok := <-ch:
			if !ok {
				return out, cursor, ctx.Err()
			}
			if ev.Err != nil {
				if errors.Is(ev.Err, store.ErrCursorExpired) {
					s.log.Warn("alert: the evaluator's event cursor expired; following from now", "namespace", s.cfg.Namespace, "err", ev.Err)
					cur, err := s.cfg.Store.EventCursor(ctx)
					return out, cur, err
				}
				return out, cursor, nil
			}
			out = append(out, ev)
			cursor = ev.Cursor
			if !idle.Stop() {
				select {
				case <-idle.C:
				default:
				}
			}
			idle.Reset(20 * time.Millisecond)
		case <-idle.C:
			return out, cursor, nil
		case <-ctx.Done():
			return out, cursor, ctx.Err()
		}
	}
	return out, cursor, nil
}

// listTriggers reads every stored trigger, by name.
func (e *evaluator) listTriggers(ctx context.Context) (map[string]*store.Trigger, error) {
	out := map[string]*store.Trigger{}
	after := ""
	for {
		p, err := store.TriggersIn(e.s.cfg.Store).ListTriggers(ctx, &store.ListTriggersParams{After: after, Limit: store.MaxTriggerPage})
		if err != nil {
			return nil, fmt.Errorf("alert: list triggers: %w", err)
		}
		for _, t := range p.Triggers {
			out[t.Name] = t
		}
		if p.Next == "" {
			return out, nil
		}
		after = p.Next
	}
}

// inScope reports whether an instance (kind, queue, id) is in r's scope.
// A trigger's scope is the instances its ticks scheduled: of its kind,
// with its tick's unique key.
func (e *evaluator) inScope(ctx context.Context, r *Rule, triggers map[string]*store.Trigger, kind, queue, id string) (bool, error) {
	switch {
	case r.Kind != "":
		return r.Kind == kind, nil
	case r.Queue != "":
		return r.Queue == queue, nil
	case r.Trigger != "":
		t := triggers[r.Trigger]
		if t == nil || t.Kind != kind {
			return false, nil
		}
		insts, err := e.s.cfg.Store.LookupInstances(ctx, &store.Query{InstanceID: id, Limit: 1})
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return false, fmt.Errorf("alert: look up instance %s: %w", id, err)
		}
		return len(insts) == 1 && strings.HasSuffix(insts[0].UniqueKey, "@"+r.Trigger), nil
	}
	return true, nil
}

// longRuns fires for the attempts running longer than a LongRun rule's
// threshold: the Processing instances in its scope (one lookup by state),
// each attempt's start read once from its history.
func (e *evaluator) longRuns(ctx context.Context, rules []*Rule, triggers map[string]*store.Trigger, next, prev *evalState, now time.Time) error {
	if len(rules) == 0 {
		return nil
	}
	seen := map[string]bool{}
	for _, r := range rules {
		q := &store.Query{States: []store.State{store.Processing}, Kind: r.Kind, Queue: r.Queue, Limit: 1000}
		if r.Trigger != "" {
			t := triggers[r.Trigger]
			if t == nil {
				continue
			}
			q.Kind = t.Kind
		}
		insts, err := e.s.cfg.Store.LookupInstances(ctx, q)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return fmt.Errorf("alert: look up running instances: %w", err)
		}
		for _, in := range insts {
			if r.Trigger != "" && !strings.HasSuffix(in.UniqueKey, "@"+r.Trigger) {
				continue
			}
			k := fmt.Sprintf("%s#%d", in.ID, in.Attempt)
			seen[k] = true
			start, err := e.attemptStart(ctx, in, k)
			if err != nil {
				return err
			}
			if start.IsZero() {
				continue
			}
			if ran := now.Sub(start); ran > r.Threshold {
				next.fire(r, Subject{
					Kind: in.Kind, Queue: in.Queue, Trigger: r.Trigger, InstanceID: in.ID, Attempt: in.Attempt,
					Detail: fmt.Sprintf("attempt %d running for %v, above %v", in.Attempt, roundDur(ran), r.Threshold),
				}, now, prev)
			}
		}
	}
	e.mu.Lock()
	for k := range e.started {
		if !seen[k] {
			delete(e.started, k)
		}
	}
	e.mu.Unlock()
	return nil
}

// attemptStart returns when in's current attempt started: the time of its
// latest Processing history record of that attempt (zero when none).
func (e *evaluator) attemptStart(ctx context.Context, in *store.Instance, k string) (time.Time, error) {
	e.mu.Lock()
	t, ok := e.started[k]
	e.mu.Unlock()
	if ok {
		return t, nil
	}
	hist, err := e.s.cfg.Store.LookupHistory(ctx, &store.Query{InstanceID: in.ID, States: []store.State{store.Processing}})
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return time.Time{}, fmt.Errorf("alert: history of %s: %w", in.ID, err)
	}
	for _, h := range hist {
		if h.Attempt == in.Attempt {
			t = h.Time
		}
	}
	if !t.IsZero() {
		e.mu.Lock()
		e.started[k] = t
		e.mu.Unlock()
	}
	return t, nil
}

// lags fires for the queues (or kinds) whose lag has been above a
// QueueLag rule's threshold for its duration.
func (e *evaluator) lags(ctx context.Context, rules []*Rule, next, prev *evalState, now time.Time) error {
	if len(rules) == 0 {
		return nil
	}
	res, err := e.s.cfg.Store.Lag(ctx, &store.LagParams{Now: now})
	if err != nil {
		return fmt.Errorf("alert: lag: %w", err)
	}
	for _, r := range rules {
		var list []store.Lag
		var sub func(name string) Subject
		switch {
		case r.Kind != "":
			list, sub = res.Kinds, func(n string) Subject { return Subject{Kind: n} }
		default:
			list, sub = res.Queues, func(n string) Subject { return Subject{Queue: n} }
		}
		for _, l := range list {
			if (r.Kind != "" && l.Name != r.Kind) || (r.Queue != "" && l.Name != r.Queue) {
				continue
			}
			k := key(r.Name, l.Name)
			if l.Age <= r.Threshold {
				continue
			}
			since, ok := prev.LagSince[k]
			if !ok {
				since = now
			}
			next.LagSince[k] = since
			if now.Sub(since) >= r.For {
				s := sub(l.Name)
				s.Detail = fmt.Sprintf("lag %v, above %v for %v", l.Age.Round(time.Second), r.Threshold, now.Sub(since).Round(time.Second))
				next.fire(r, s, now, prev)
			}
		}
	}
	return nil
}

// ticks fires for the triggers in a MissedTick rule's scope that skipped
// a tick (forbid) or missed ticks (no scheduler ran): skipping now (the
// last tick decided was skipped), skipped since the last step, ticks that
// the last fired tick jumped over, or a tick overdue by more than
// missedGrace.
func (e *evaluator) ticks(rules []*Rule, triggers map[string]*store.Trigger, next, prev *evalState, now time.Time) {
	for _, r := range rules {
		for _, t := range triggers {
			if (r.Trigger != "" && t.Name != r.Trigger) || (r.Kind != "" && t.Kind != r.Kind) {
				continue
			}
			k := key(r.Name, t.Name)
			seen := prev.Ticks[k]
			next.Ticks[k] = &tickSeen{Tick: t.LastTick, Skipped: t.Skipped}
			var why []string
			if seen != nil && t.Skipped > seen.Skipped {
				why = append(why, fmt.Sprintf("%d tick(s) skipped by the overlap policy", t.Skipped-seen.Skipped))
			} else if !t.Paused && t.LastSkipped.After(t.LastTick) {
				why = append(why, "its last tick was skipped by the overlap policy")
			}
			if seen != nil && t.LastTick.After(seen.Tick) {
				from := seen.Tick
				if t.UpdatedAt.After(from) {
					from = t.UpdatedAt // ticks before its creation or a user's change (a resume) are not owed
				}
				if n := ticksBetween(t, from, t.LastTick) - int(t.Skipped-seen.Skipped); n > 0 {
					why = append(why, fmt.Sprintf("%d tick(s) missed while no scheduler fired them", n))
				}
			}
			if !t.Paused {
				base := t.UpdatedAt
				for _, b := range []time.Time{t.LastTick, t.LastSkipped} {
					if b.After(base) {
						base = b
					}
				}
				if due, err := t.Spec().Next(base, nil); err == nil && now.Sub(due) > missedGrace {
					why = append(why, fmt.Sprintf("the tick of %s is %v late: no scheduler fired it", due.UTC().Format(time.RFC3339), now.Sub(due).Round(time.Second)))
				}
			}
			if len(why) > 0 {
				next.fire(r, Subject{Kind: t.Kind, Trigger: t.Name, InstanceID: t.LastInstanceID, Detail: strings.Join(why, "; ")}, now, prev)
			}
		}
	}
}

// ticksBetween counts t's ticks strictly between from and to (at most
// 1000).
func ticksBetween(t *store.Trigger, from, to time.Time) int {
	n := 0
	at := from
	for n < 1000 {
		nt, err := t.Spec().Next(at, nil)
		if err != nil || !nt.Before(to) {
			return n
		}
		n++
		at = nt
	}
	return n
}

// noNodes fires for the kinds in a NoNode rule's scope that have work
// (instances Scheduled, or a trigger not paused) and no live node that
// runs them.
func (e *evaluator) noNodes(ctx context.Context, rules []*Rule, triggers map[string]*store.Trigger, next, prev *evalState, now time.Time) error {
	if len(rules) == 0 {
		return nil
	}
	st := e.s.cfg.Store
	rows, err := st.Counts(ctx, &store.CountsParams{})
	if err != nil {
		return fmt.Errorf("alert: counts: %w", err)
	}
	nodes, err := st.ListNodes(ctx, &store.ListNodesParams{Now: now, DeadAfter: deadAfter})
	if err != nil {
		return fmt.Errorf("alert: list nodes: %w", err)
	}
	waiting := map[string]int64{}
	for _, g := range rows {
		waiting[g.Kind] += g.States[store.Scheduled]
	}
	triggered := map[string]string{}
	for _, t := range triggers {
		if !t.Paused {
			triggered[t.Kind] = t.Name
		}
	}
	live := map[string]bool{}
	for _, n := range nodes {
		if n.Status == store.NodeLive {
			for _, k := range n.Kinds {
				live[k] = true
			}
		}
	}
	for _, r := range rules {
		kinds := map[string]bool{}
		switch {
		case r.Kind != "":
			kinds[r.Kind] = true
		case r.Trigger != "":
			if t := triggers[r.Trigger]; t != nil && !t.Paused {
				kinds[t.Kind] = true
			}
		default:
			for k, n := range waiting {
				if n > 0 {
					kinds[k] = true
				}
			}
			for k := range triggered {
				kinds[k] = true
			}
		}
		for k := range kinds {
			if live[k] || (waiting[k] == 0 && triggered[k] == "") {
				continue
			}
			var what []string
			if waiting[k] > 0 {
				what = append(what, fmt.Sprintf("%d instance(s) scheduled", waiting[k]))
			}
			if t := triggered[k]; t != "" {
				what = append(what, "trigger "+t)
			}
			next.fire(r, Subject{Kind: k, Trigger: r.Trigger, Detail: "no live node runs kind " + k + " (" + strings.Join(what, ", ") + ")"}, now, prev)
		}
	}
	return nil
}

// roundDur rounds d for people: to the millisecond below a minute, to the
// second above.
func roundDur(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// pruneHistory deletes the notifications older than Config.HistoryRetain:
// their names sort after the name of the cutoff (newest first), so one
// listing from there finds exactly them.
func (s *Service) pruneHistory(ctx context.Context, now time.Time) error {
	after := notificationID(now.Add(-s.cfg.HistoryRetain), "", 0, "")
	for range 10 {
		p, err := s.cfg.Store.ListDocuments(ctx, &store.ListDocumentsParams{Collection: colNotifications, After: after, Limit: 1000})
		if err != nil {
			return err
		}
		for _, d := range p.Documents {
			err := s.cfg.Store.DeleteDocument(ctx, &store.DeleteDocumentParams{Collection: colNotifications, Name: d.Name, IfVersion: d.Version})
			if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
				return err
			}
		}
		if p.Next == "" || len(p.Documents) == 0 {
			return nil
		}
	}
	return nil
}
