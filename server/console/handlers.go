package console

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/store"
)

// signInPage shows the token form.
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, nil, "signin", http.StatusOK, nil)
}

// signIn checks the token with the server and keeps it in the session
// cookie.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	if _, err := c.identify(r.Context(), token); err != nil {
		msg := err.Error()
		if errors.Is(err, errSignIn) {
			msg = "The server does not accept this token: check it, or ask for one (jobd --token)."
		}
		c.render(w, r, nil, "signin", http.StatusUnauthorized, map[string]string{"Error": msg})
		return
	}
	// Base64: a token may hold bytes a cookie value cannot (space, ";", '"').
	c.setCookie(w, r, tokenCookie, base64.RawURLEncoding.EncodeToString([]byte(token)), 0)
	http.Redirect(w, r, c.path("/"), http.StatusSeeOther)
}

// signOut forgets the session.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	c.clearCookie(w, r, tokenCookie)
	c.clearCookie(w, r, nsCookie)
	http.Redirect(w, r, c.path("/signin"), http.StatusSeeOther)
}

// switchNamespace changes the session's namespace to one the token grants.
func (c *Console) switchNamespace(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	ns := r.PostFormValue("ns")
	if !slices.Contains(s.id.namespaces, ns) {
		http.Error(w, "no such namespace", http.StatusNotFound)
		return
	}
	c.setCookie(w, r, nsCookie, ns, 0)
	http.Redirect(w, r, c.path("/"), http.StatusSeeOther)
}

// back redirects to the page the form was on, with a message.
func (c *Console) back(w http.ResponseWriter, r *http.Request, to, msg string) {
	if msg != "" {
		c.setFlash(w, r, msg)
	}
	http.Redirect(w, r, c.path(to), http.StatusSeeOther)
}

// queuesPage lists queues with counts, lag and pause flag.
func (c *Console) queuesPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	res, err := s.api.queues.ListQueues(r.Context(), connect.NewRequest(&pb.ListQueuesRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	kinds, err := s.api.queues.ListKinds(r.Context(), connect.NewRequest(&pb.ListKindsRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, s, "queues", http.StatusOK, map[string]any{"Queues": res.Msg.GetQueues(), "Kinds": kinds.Msg.GetKinds()})
}

// queueAction pauses or resumes a queue.
func (c *Console) queueAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	name := r.PathValue("name")
	var err error
	switch r.PathValue("action") {
	case "pause":
		_, err = s.api.queues.PauseQueue(r.Context(), connect.NewRequest(&pb.PauseQueueRequest{Name: name}))
	case "resume":
		_, err = s.api.queues.ResumeQueue(r.Context(), connect.NewRequest(&pb.ResumeQueueRequest{Name: name}))
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.bus.publish(s.ns)
	to := "/queues"
	if r.PostFormValue("back") == "queue" { // the queue's own page
		to = "/queues/" + url.PathEscape(name)
	}
	c.back(w, r, to, fmt.Sprintf("Queue %s: %sd.", name, r.PathValue("action")))
}

// filterForm is the Instances page's filter as its form and URL hold it.
type filterForm struct {
	Kind, Queue string
	Labels      string // comma-separated; instances requiring all of them
	Text        string // searched in arguments, results and errors
	States      []string
	From, To    string // datetime-local values, in TZ
	TZ          string // the browser's IANA zone; "" is UTC
}

// parseFilter reads the filter from a query or a form.
// stateAliases returns the states a state filter value names: the
// console's own names, and the names jobctl accepts too ("failed" for
// terminated and timed_out, "timedout", "cancelled").
func stateAliases(v string) []string {
	switch v = strings.ToLower(strings.TrimSpace(v)); v {
	case "failed":
		return []string{"terminated", "timed_out"}
	case "timedout", "timed-out":
		return []string{"timed_out"}
	case "cancelled":
		return []string{"canceled"}
	}
	return []string{v}
}

func parseFilter(v url.Values) (filterForm, *pb.InstanceFilter, error) {
	f := filterForm{Kind: strings.TrimSpace(v.Get("kind")), Queue: strings.TrimSpace(v.Get("queue")),
		Labels: strings.TrimSpace(v.Get("labels")), Text: strings.TrimSpace(v.Get("text")), From: v.Get("from"), To: v.Get("to"), TZ: v.Get("tz")}
	pf := &pb.InstanceFilter{Kind: f.Kind, Queue: f.Queue, Text: f.Text}
	for l := range strings.SplitSeq(f.Labels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			pf.Labels = append(pf.Labels, l)
		}
	}
	for _, v := range v["state"] {
		for _, st := range stateAliases(v) {
			i := slices.Index(stateNames, st)
			if i <= 0 {
				return f, nil, fmt.Errorf("unknown state %q; use one of %s, or failed (terminated and timed_out)", v, strings.Join(stateNames[1:], ", "))
			}
			if !slices.Contains(f.States, st) {
				f.States = append(f.States, st)
				pf.States = append(pf.States, pb.State(i))
			}
		}
	}
	loc := time.UTC
	if f.TZ != "" {
		if l, err := time.LoadLocation(f.TZ); err == nil {
			loc = l
		}
	}
	parse := func(field, s string) (*timestamppb.Timestamp, error) {
		if s == "" {
			return nil, nil
		}
		for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
			if t, err := time.ParseInLocation(layout, s, loc); err == nil {
				return timestamppb.New(t), nil
			}
		}
		return nil, fmt.Errorf("%s %q is not a time such as 2026-11-23T21:00", field, s)
	}
	var err error
	if pf.CreatedAfter, err = parse("from", f.From); err != nil {
		return f, nil, err
	}
	if pf.CreatedBefore, err = parse("to", f.To); err != nil {
		return f, nil, err
	}
	return f, pf, nil
}

// query encodes the filter for a URL.
func (f filterForm) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"kind": f.Kind, "queue": f.Queue, "labels": f.Labels, "text": f.Text, "from": f.From, "to": f.To, "tz": f.TZ} {
		if s != "" {
			v.Set(k, s)
		}
	}
	for _, st := range f.States {
		v.Add("state", st)
	}
	return v
}

// empty reports whether the filter matches every instance.
func (f filterForm) empty() bool {
	return f.Kind == "" && f.Queue == "" && f.Labels == "" && f.Text == "" && len(f.States) == 0 && f.From == "" && f.To == ""
}

// instancesPage lists the instances a filter matches, a page at a time.
func (c *Console) instancesPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	q := r.URL.Query()
	form, filter, err := parseFilter(q)
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	res, err := s.api.jobs.ListInstances(r.Context(), connect.NewRequest(&pb.ListInstancesRequest{
		Filter: filter, PageSize: 50, PageToken: q.Get("page"), ScanLimit: int32(c.cfg.SearchScanLimit),
	}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	searched := res.Msg.GetScanned()
	if form.Text != "" {
		searched += int64(atoiOr(q.Get("searched"), 0))
	}
	next := ""
	if t := res.Msg.GetNextPageToken(); t != "" {
		v := form.query()
		v.Set("page", t)
		if form.Text != "" {
			v.Set("searched", strconv.FormatInt(searched, 10))
		}
		next = c.path("/instances?" + v.Encode())
	}
	first := ""
	if q.Get("page") != "" {
		first = c.path("/instances?" + form.query().Encode())
	}
	data := map[string]any{
		"Filter": form, "Instances": res.Msg.GetInstances(), "Next": next, "First": first, "Empty": form.empty(),
		"Back": r.URL.RawQuery,
	}
	if form.Text != "" {
		data["Search"] = c.searchProgress(r.Context(), s.api, form, searched, next != "")
	}
	c.render(w, r, s, "instances", http.StatusOK, data)
}

// countLimit bounds how many instances the bulk confirmation counts one by
// one.
const countLimit = 10000

// countMatches counts the instances filter matches, up to countLimit (more
// is reported as "at least").
func countMatches(ctx context.Context, api *clients, filter *pb.InstanceFilter) (n int, more bool, err error) {
	token := ""
	for {
		res, err := api.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: filter, PageSize: 1000, PageToken: token}))
		if err != nil {
			return 0, false, err
		}
		n += len(res.Msg.GetInstances())
		token = res.Msg.GetNextPageToken()
		if token == "" {
			return n, false, nil
		}
		if n >= countLimit {
			return n, true, nil
		}
	}
}

// bulkAction cancels, retries or deletes everything a filter matches: the
// first POST shows the count and asks to confirm; the confirmed one acts.
func (c *Console) bulkAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	form, filter, err := parseFilter(r.PostForm)
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	action := r.PostFormValue("action")
	if action != "cancel" && action != "retry" && action != "delete" {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unknown bulk action %q; use cancel, retry or delete", action)))
		return
	}
	all := form.empty()
	if r.PostFormValue("confirmed") != "yes" {
		n, more, err := countMatches(r.Context(), s.api, filter)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		c.render(w, r, s, "confirm", http.StatusOK, map[string]any{
			"Action": action, "Count": n, "More": more, "Filter": form, "All": all,
			"Back": c.path("/instances?" + form.query().Encode()),
		})
		return
	}
	var res *pb.BulkResult
	switch action {
	case "cancel":
		out, e := s.api.jobs.CancelInstances(r.Context(), connect.NewRequest(&pb.CancelInstancesRequest{Filter: filter, All: all}))
		err = e
		if e == nil {
			res = out.Msg.GetResult()
		}
	case "retry":
		out, e := s.api.jobs.RetryInstances(r.Context(), connect.NewRequest(&pb.RetryInstancesRequest{Filter: filter, All: all}))
		err = e
		if e == nil {
			res = out.Msg.GetResult()
		}
	case "delete":
		out, e := s.api.jobs.DeleteInstances(r.Context(), connect.NewRequest(&pb.DeleteInstancesRequest{Filter: filter, All: all}))
		err = e
		if e == nil {
			res = out.Msg.GetResult()
		}
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, "/instances?"+form.query().Encode(), fmt.Sprintf("%s: %d matched, %d applied, %d skipped (changed in between or not applicable).",
		strings.ToUpper(action[:1])+action[1:], res.GetMatched(), res.GetApplied(), res.GetSkipped()))
}

// instancePage shows one instance with its history and logs.
func (c *Console) instancePage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	id := r.PathValue("id")
	ctx := r.Context()
	got, err := s.api.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	hist, err := s.api.jobs.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{InstanceId: id, PageSize: 1000}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	logs, err := s.api.jobs.ListLogs(ctx, connect.NewRequest(&pb.ListLogsRequest{InstanceId: id, PageSize: 1000}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	inst := got.Msg.GetInstance()
	var shards []*pb.Instance // a sharded task's parent lists its shards (issue 21)
	if n := inst.GetShardCount(); n > 0 && inst.GetParentId() == "" {
		res, err := s.api.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{
			Filter: &pb.InstanceFilter{ParentId: id}, PageSize: min(n, 1000)}))
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		shards = res.Msg.GetInstances()
		slices.SortFunc(shards, func(a, b *pb.Instance) int { return int(a.GetShardIndex()) - int(b.GetShardIndex()) })
	}
	// The node running the attempt, or the one its history last names
	// (a finished instance holds no lease).
	node := inst.GetLeaseOwner()
	for _, h := range slices.Backward(hist.Msg.GetChanges()) {
		if node != "" {
			break
		}
		node = h.GetNode()
	}
	c.render(w, r, s, "instance", http.StatusOK, map[string]any{
		"I": inst, "Node": node, "History": hist.Msg.GetChanges(), "Logs": logs.Msg.GetRecords(),
		"Args": rawJSON(inst.GetArgsJson()), "Result": rawJSON(inst.GetResultJson()), "Shards": shards,
		"ArgsTree": jsonTree("args", inst.GetArgsJson()), "ResultTree": jsonTree("result", inst.GetResultJson()),
		"Waiting": consoleWaiting(inst, got.Msg.GetWaiting()), // why a scheduled instance does not run (issue 21)
	})
}

// pretty indents JSON for reading; anything else is returned as is.
func pretty(s string) string {
	var v any
	if s == "" || json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return s
	}
	return string(b)
}

// instanceAction cancels, retries, deletes or clones one instance.
func (c *Console) instanceAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	id, ctx := r.PathValue("id"), r.Context()
	var err error
	to, msg := "/instances/"+id, ""
	switch r.PathValue("action") {
	case "cancel":
		_, err = s.api.jobs.CancelInstance(ctx, connect.NewRequest(&pb.CancelInstanceRequest{Id: id}))
		msg = "Cancel requested."
	case "retry":
		_, err = s.api.jobs.RetryInstance(ctx, connect.NewRequest(&pb.RetryInstanceRequest{Id: id}))
		msg = "Scheduled to run again."
	case "delete":
		_, err = s.api.jobs.DeleteInstance(ctx, connect.NewRequest(&pb.DeleteInstanceRequest{Id: id}))
		to, msg = "/instances", "Instance "+id+" deleted."
	case "clone":
		var got *connect.Response[pb.GetInstanceResponse]
		if got, err = s.api.jobs.GetInstance(ctx, connect.NewRequest(&pb.GetInstanceRequest{Id: id})); err == nil {
			i := got.Msg.GetInstance()
			prio := i.GetPriority()
			var res *connect.Response[pb.ScheduleResponse]
			res, err = s.api.jobs.Schedule(ctx, connect.NewRequest(&pb.ScheduleRequest{
				Kind: i.GetKind(), ArgsJson: i.GetArgsJson(), Queue: i.GetQueue(), Priority: &prio,
			}))
			if err == nil {
				to, msg = "/instances/"+res.Msg.GetInstance().GetId(), "Cloned from "+id+"."
			}
		}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.back(w, r, to, msg)
}

// jobsPage lists kinds, definitions and triggers, with the forms to
// schedule and to create triggers.
func (c *Console) jobsPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	ctx := r.Context()
	defs, err := s.api.defs.ListDefinitions(ctx, connect.NewRequest(&pb.ListDefinitionsRequest{PageSize: 1000}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	trig, err := s.api.triggers.ListTriggers(ctx, connect.NewRequest(&pb.ListTriggersRequest{PageSize: 1000}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	kinds, err := s.api.queues.ListKinds(ctx, connect.NewRequest(&pb.ListKindsRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	names := []string{}
	for _, k := range kinds.Msg.GetKinds() {
		names = append(names, k.GetName())
	}
	for _, d := range defs.Msg.GetDefinitions() {
		if !slices.Contains(names, d.GetKind()) {
			names = append(names, d.GetKind())
		}
	}
	slices.Sort(names)
	c.render(w, r, s, "jobs", http.StatusOK, map[string]any{
		"Definitions": defs.Msg.GetDefinitions(), "Triggers": trig.Msg.GetTriggers(), "KindNames": names,
	})
}

// checkArgs checks that args is empty or a JSON array, as the API wants
// it, naming the fix otherwise.
func checkArgs(args string) error {
	if strings.TrimSpace(args) == "" {
		return nil
	}
	var v []json.RawMessage
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return fmt.Errorf("the arguments are not a JSON array (%v); write them like [1, \"two\", {\"three\": 3}]", err)
	}
	return nil
}

// parseDelay reads an optional Go duration ("90s", "5m").
func parseDelay(field, s string) (*durationpb.Duration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return nil, fmt.Errorf("%s %q is not a duration such as 90s or 5m", field, s)
	}
	return durationpb.New(d), nil
}

// schedule schedules one instance by hand.
func (c *Console) schedule(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	args := r.PostFormValue("args")
	if err := checkArgs(args); err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	delay, err := parseDelay("delay", r.PostFormValue("delay"))
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	req := &pb.ScheduleRequest{Kind: strings.TrimSpace(r.PostFormValue("kind")), ArgsJson: args, Delay: delay, Queue: strings.TrimSpace(r.PostFormValue("queue"))}
	res, err := s.api.jobs.Schedule(r.Context(), connect.NewRequest(req))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	id := res.Msg.GetInstance().GetId()
	c.back(w, r, "/instances/"+id, "Scheduled "+req.Kind+".")
}

// createTrigger stores a cron or interval trigger.
func (c *Console) createTrigger(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	args := r.PostFormValue("args")
	if err := checkArgs(args); err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	interval, err := parseDelay("interval", r.PostFormValue("interval"))
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	t := &pb.Trigger{
		Name: strings.TrimSpace(r.PostFormValue("name")), Kind: strings.TrimSpace(r.PostFormValue("kind")), ArgsJson: args,
		Cron: strings.TrimSpace(r.PostFormValue("cron")), TimeZone: strings.TrimSpace(r.PostFormValue("tz")), Interval: interval,
	}
	if _, err := s.api.triggers.CreateTrigger(r.Context(), connect.NewRequest(&pb.CreateTriggerRequest{Trigger: t})); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.bus.publish(s.ns)
	c.back(w, r, "/jobs", "Trigger "+t.Name+" created.")
}

// triggerAction pauses, resumes, runs or deletes a trigger.
func (c *Console) triggerAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	name, ctx := r.PathValue("name"), r.Context()
	var err error
	to, msg := "/jobs", ""
	switch r.PathValue("action") {
	case "pause":
		_, err = s.api.triggers.PauseTrigger(ctx, connect.NewRequest(&pb.PauseTriggerRequest{Name: name}))
		msg = "Trigger " + name + " paused."
	case "resume":
		_, err = s.api.triggers.ResumeTrigger(ctx, connect.NewRequest(&pb.ResumeTriggerRequest{Name: name}))
		msg = "Trigger " + name + " resumed."
	case "delete":
		_, err = s.api.triggers.DeleteTrigger(ctx, connect.NewRequest(&pb.DeleteTriggerRequest{Name: name}))
		msg = "Trigger " + name + " deleted."
	case "run":
		var res *connect.Response[pb.RunTriggerResponse]
		if res, err = s.api.triggers.RunTrigger(ctx, connect.NewRequest(&pb.RunTriggerRequest{Name: name})); err == nil {
			to, msg = "/instances/"+res.Msg.GetInstance().GetId(), "Trigger "+name+" run now."
		}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.bus.publish(s.ns)
	c.back(w, r, to, msg)
}

// nodesPage lists the nodes sharing the store.
func (c *Console) nodesPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	res, err := s.api.nodes.ListNodes(r.Context(), connect.NewRequest(&pb.ListNodesRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, s, "nodes", http.StatusOK, map[string]any{"Nodes": res.Msg.GetNodes(), "Now": strconv.FormatInt(time.Now().Unix(), 10)})
}

// previewCount is how many fire times the trigger form previews.
const previewCount = 5

// triggerPreview answers the trigger form as its spec is typed: the next
// fire times of a cron spec (in a time zone) or an interval, or what is
// wrong with it. It reads the spec as the store does (store.Trigger).
func (c *Console) triggerPreview(w http.ResponseWriter, r *http.Request) {
	if s := c.session(w, r); s == nil {
		return
	}
	q := r.URL.Query()
	data := map[string]any{}
	t := store.Trigger{Name: "preview", Kind: "preview", Cron: strings.TrimSpace(q.Get("cron")), TimeZone: strings.TrimSpace(q.Get("tz"))}
	interval, err := parseDelay("interval", q.Get("interval"))
	switch {
	case err != nil:
		data["Error"] = err.Error()
	case t.Cron == "" && interval == nil:
		data["Error"] = "Type a cron spec or an interval to see when it fires."
	default:
		if interval != nil {
			t.Interval = interval.AsDuration()
		}
		var next []time.Time
		if err = t.Validate(); err == nil {
			next, err = t.Spec().NextTimes(time.Now(), previewCount, nil)
		}
		if err != nil {
			data["Error"] = err.Error()
		}
		times := make([]*timestamppb.Timestamp, len(next))
		for i, n := range next {
			times[i] = timestamppb.New(n)
		}
		data["Times"] = times
	}
	var buf strings.Builder
	if err := c.pages["jobs"].ExecuteTemplate(&buf, "preview", data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, buf.String())
}

// overviewPage shows the last hour's charts (from Config.Stats), the depth
// of the queues by state, and the live nodes.
func (c *Console) overviewPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	queues, err := s.api.queues.ListQueues(r.Context(), connect.NewRequest(&pb.ListQueuesRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	nodes, err := s.api.nodes.ListNodes(r.Context(), connect.NewRequest(&pb.ListNodesRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var live []*pb.Node
	for _, n := range nodes.Msg.GetNodes() {
		if n.GetStatus() == pb.NodeStatus_NODE_STATUS_LIVE {
			live = append(live, n)
		}
	}
	data := map[string]any{"Queues": queues.Msg.GetQueues(), "Nodes": live}
	if st := c.cfg.Stats[s.ns]; st != nil {
		data["Charts"] = overviewCharts(st.lastHour(), st.following())
	}
	c.render(w, r, s, "overview", http.StatusOK, data)
}

// consoleWaiting is w with the console's own fix where the API's names an
// API call (a paused queue: the Queues page's Resume).
func consoleWaiting(in *pb.Instance, w *pb.WaitExplanation) *pb.WaitExplanation {
	if w.GetReason() != "queue_paused" {
		return w
	}
	w = proto.Clone(w).(*pb.WaitExplanation)
	w.Message = fmt.Sprintf("queue %q is paused; resume it on the Queues page to run its instances", in.GetQueue())
	return w
}

// selectedLimit bounds the instances one selection acts on (a page of
// the Instances list holds 50).
const selectedLimit = 1000

// selectedAction retries, cancels or deletes the instances ticked on the
// Instances list (form fields "instance"), one call each, and goes back to the
// list (field "back", its query) saying how many the server applied and
// why it refused the others.
func (c *Console) selectedAction(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	action, ids := r.PostFormValue("action"), r.PostForm["instance"]
	if action != "cancel" && action != "retry" && action != "delete" {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unknown action %q for the selected instances; use cancel, retry or delete", action)))
		return
	}
	back := "/instances"
	if q := r.PostFormValue("back"); q != "" {
		if v, err := url.ParseQuery(q); err == nil {
			back += "?" + v.Encode()
		}
	}
	if len(ids) == 0 {
		c.back(w, r, back, "No instance selected: tick the boxes of the rows to act on.")
		return
	}
	if len(ids) > selectedLimit {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%d instances selected; select at most %d, or act on a filter (the bulk actions)", len(ids), selectedLimit)))
		return
	}
	ctx := r.Context()
	applied := 0
	refused := map[string]int{} // the server's reason → how many
	for _, id := range ids {
		var err error
		switch action {
		case "cancel":
			_, err = s.api.jobs.CancelInstance(ctx, connect.NewRequest(&pb.CancelInstanceRequest{Id: id}))
		case "retry":
			_, err = s.api.jobs.RetryInstance(ctx, connect.NewRequest(&pb.RetryInstanceRequest{Id: id}))
		case "delete":
			_, err = s.api.jobs.DeleteInstance(ctx, connect.NewRequest(&pb.DeleteInstanceRequest{Id: id}))
		}
		if err == nil {
			applied++
			continue
		}
		var ce *connect.Error
		if errors.As(err, &ce) && (ce.Code() == connect.CodePermissionDenied || ce.Code() == connect.CodeUnauthenticated) {
			c.fail(w, r, s, err)
			return
		}
		// The same reason for many reads once: without the instance's ID.
		refused[strings.ReplaceAll(apiMessage(err), id, "<id>")]++
	}
	c.bus.publish(s.ns)
	msg := fmt.Sprintf("%s: %d of %d selected applied.", strings.ToUpper(action[:1])+action[1:], applied, len(ids))
	reasons := make([]string, 0, len(refused))
	for why, n := range refused {
		reasons = append(reasons, fmt.Sprintf("%d: %s", n, why))
	}
	slices.Sort(reasons)
	if len(reasons) > 0 {
		msg += " Not applied — " + strings.Join(reasons, "; ")
	}
	c.back(w, r, back, msg)
}
