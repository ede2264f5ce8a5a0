package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// on runs jobctl in-process against s.
func (s *testServer) jobctl(t *testing.T, args ...string) result {
	t.Helper()
	return jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, "", args...)
}

// ok runs jobctl and fails the test unless it exits 0.
func (s *testServer) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.jobctl(t, args...)
	if r.code != 0 {
		t.Fatalf("jobctl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// okJSON runs jobctl -o json and parses its output into m.
func (s *testServer) okJSON(t *testing.T, m proto.Message, args ...string) {
	t.Helper()
	out := s.ok(t, append(args, "-o", "json")...)
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("jobctl %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestScheduleRunInspect schedules through jobctl, waits for the real
// executor to complete the instance, and reads it back in every format.
func TestScheduleRunInspect(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) { scheduleRunInspect(t, newTestServerOn(t, false, sk)) })
}

func scheduleRunInspect(t *testing.T, s *testServer) {

	var sr jobkitv1.ScheduleResponse
	s.okJSON(t, &sr, "schedule", "sum", "--args", "[1,2]", "--retries", "5", "--priority", "10", "--timeout", "30s", "--unique-key", "u1", "--unique-ttl", "1h")
	in := sr.GetInstance()
	if in.GetKind() != "sum" || in.GetArgsJson() != "[1,2]" || in.GetMaxRetries() != 5 || in.GetPriority() != 10 ||
		in.GetTimeout().AsDuration().Seconds() != 30 || in.GetUniqueKey() != "u1" || in.GetId() == "" {
		t.Fatalf("scheduled %v", in)
	}
	id := in.GetId()

	var got jobkitv1.GetInstanceResponse
	waitFor(t, "the instance to complete", func() bool {
		s.okJSON(t, &got, "instance", "get", id)
		return got.GetInstance().GetState() == jobkitv1.State_STATE_COMPLETED
	})
	if got.GetInstance().GetResultJson() != "[3]" {
		t.Fatalf("result %q, want [3]", got.GetInstance().GetResultJson())
	}

	// Table output: a header and the values a reader looks for.
	table := s.ok(t, "instance", "get", id)
	for _, want := range []string{"FIELD", "state", "completed", "[3]", id} {
		if !strings.Contains(table, want) {
			t.Errorf("instance get table lacks %q:\n%s", want, table)
		}
	}
	list := s.ok(t, "instances", "list", "--kind", "sum", "--state", "completed")
	if lines := strings.Split(strings.TrimSpace(list), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[1], id) || !strings.Contains(lines[1], "completed") {
		t.Fatalf("instances list table:\n%s", list)
	}

	// YAML is the same message.
	var y map[string]map[string]any
	if err := yaml.Unmarshal([]byte(s.ok(t, "instance", "get", id, "-o", "yaml")), &y); err != nil || y["instance"]["id"] != id || y["instance"]["state"] != "STATE_COMPLETED" {
		t.Fatalf("yaml: %v %v", y, err)
	}

	var lr jobkitv1.ListInstancesResponse
	s.okJSON(t, &lr, "instances", "list", "--kind", "sum", "--state", "failed")
	if len(lr.GetInstances()) != 0 {
		t.Fatalf("failed instances: %v", lr.GetInstances())
	}
	s.okJSON(t, &lr, "instances", "list", "--text", "[3]", "--all-pages")
	if len(lr.GetInstances()) != 1 || lr.GetInstances()[0].GetId() != id {
		t.Fatalf(`instances with text "[3]" (the result): %v`, lr.GetInstances())
	}
	s.okJSON(t, &lr, "instances", "list", "--text", "no such text", "--all-pages")
	if len(lr.GetInstances()) != 0 {
		t.Fatalf("instances with a text nowhere: %v", lr.GetInstances())
	}
	s.okJSON(t, &lr, "instances", "list", "--kind", "sum", "--since", "1h", "--all-pages")
	if len(lr.GetInstances()) != 1 || lr.GetInstances()[0].GetId() != id {
		t.Fatalf("instances since 1h: %v", lr.GetInstances())
	}

	var hr jobkitv1.ListHistoryResponse
	s.okJSON(t, &hr, "instance", "history", id)
	var states []string
	for _, c := range hr.GetChanges() {
		states = append(states, stateName(c.GetState()))
	}
	if got, want := strings.Join(states, ","), "created,scheduled,processing,completed"; got != want {
		t.Fatalf("history %s, want %s", got, want)
	}

	logs := s.ok(t, "instance", "logs", id)
	if !strings.Contains(logs, "info #1 adding 1 and 2") {
		t.Fatalf("logs:\n%s", logs)
	}
	// --follow on a finished instance prints what was logged and ends.
	follow := s.ok(t, "instance", "logs", id, "--follow", "-o", "json")
	var fr jobkitv1.FollowLogsResponse
	if err := protojson.Unmarshal([]byte(strings.TrimSpace(follow)), &fr); err != nil || fr.GetRecord().GetMessage() != "adding 1 and 2" {
		t.Fatalf("follow: %v\n%s", err, follow)
	}
}

// TestPagingAcrossPages lists three instances one per page, by token and
// with --all-pages.
func TestPagingAcrossPages(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	want := map[string]bool{}
	for range 3 {
		var sr jobkitv1.ScheduleResponse
		s.okJSON(t, &sr, "schedule", "sum", "--args", "[1,1]", "--in", "1h")
		want[sr.GetInstance().GetId()] = true
	}
	seen := map[string]bool{}
	token := ""
	for page := 0; ; page++ {
		args := []string{"instances", "list", "--kind", "sum", "--page-size", "1"}
		if token != "" {
			args = append(args, "--page-token", token)
		}
		var lr jobkitv1.ListInstancesResponse
		s.okJSON(t, &lr, args...)
		for _, in := range lr.GetInstances() {
			seen[in.GetId()] = true
		}
		token = lr.GetNextPageToken()
		if token == "" || page > 5 {
			break
		}
	}
	var all jobkitv1.ListInstancesResponse
	s.okJSON(t, &all, "instances", "list", "--kind", "sum", "--page-size", "1", "--all-pages")
	if len(seen) != 3 || len(all.GetInstances()) != 3 || all.GetNextPageToken() != "" {
		t.Fatalf("paged %v, all pages %d", seen, len(all.GetInstances()))
	}
	for id := range want {
		if !seen[id] {
			t.Fatalf("instance %s never listed", id)
		}
	}
	// The table says where the next page starts.
	r := s.jobctl(t, "instances", "list", "--kind", "sum", "--page-size", "1")
	if r.code != 0 || !strings.Contains(r.stderr, "more: --page-token ") {
		t.Fatalf("table paging hint: %d %q", r.code, r.stderr)
	}
}

// TestExitCodesAgainstServer runs commands the server refuses and checks
// the exit code scripts branch on, and that refused calls changed nothing.
func TestExitCodesAgainstServer(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) { exitCodesAgainstServer(t, newTestServerOn(t, false, sk)) })
}

func exitCodesAgainstServer(t *testing.T, s *testServer) {
	var later jobkitv1.ScheduleResponse
	s.okJSON(t, &later, "schedule", "sum", "--args", "[1,2]", "--in", "1h", "--unique-key", "once")
	s.ok(t, "definitions", "create", "report", "--queue", "reports")
	s.ok(t, "triggers", "create", "nightly", "--kind", "sum", "--args", "[1,2]", "--cron", "0 2 * * *")

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"instance", "get", "0194c6a0-0000-7000-8000-000000000000"}, exitNotFound, "not_found"},
		{[]string{"instance", "history", "0194c6a0-0000-7000-8000-000000000000"}, exitOK, ""},
		{[]string{"schedule", "nosuchkind"}, exitNotFound, "not_found"},
		{[]string{"definitions", "get", "nosuchkind"}, exitNotFound, "not_found"},
		{[]string{"triggers", "get", "nosuch"}, exitNotFound, "not_found"},
		{[]string{"-n", "nosuchns", "kinds"}, exitNotFound, `namespace "nosuchns" is not served`},
		{[]string{"schedule", "sum", "--args", "[3,4]", "--unique-key", "once"}, exitConflict, "already_exists"},
		{[]string{"definitions", "create", "report", "--queue", "reports"}, exitConflict, "already_exists"},
		{[]string{"triggers", "create", "nightly", "--kind", "sum", "--args", "[1,2]", "--cron", "@hourly"}, exitConflict, "already_exists"},
		{[]string{"definitions", "update", "report", "--retries", "2", "--if-version", "7"}, exitConflict, "failed_precondition"},
		{[]string{"instance", "retry", later.GetInstance().GetId()}, exitConflict, "failed_precondition"},
		{[]string{"schedule", "sum", "--args", `["x","y"]`}, exitUsage, "invalid_argument"},
		{[]string{"schedule", "sum", "--args", `[1]`}, exitUsage, "invalid_argument"},
		{[]string{"triggers", "create", "bad", "--kind", "sum", "--cron", "every tuesday"}, exitUsage, "invalid_argument"},
		{[]string{"instances", "list", "--page-token", "garbage"}, exitUsage, "invalid_argument"},
	} {
		r := s.jobctl(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("jobctl %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.msg)
		}
	}
	// Nothing the refused calls asked for happened: one instance, one
	// definition at version 1, one trigger.
	var lr jobkitv1.ListInstancesResponse
	s.okJSON(t, &lr, "instances", "list", "--all-pages")
	var dr jobkitv1.GetDefinitionResponse
	s.okJSON(t, &dr, "definitions", "get", "report")
	var tr jobkitv1.ListTriggersResponse
	s.okJSON(t, &tr, "triggers", "list")
	if len(lr.GetInstances()) != 1 || dr.GetDefinition().GetVersion() != 1 || len(tr.GetTriggers()) != 1 {
		t.Fatalf("after refused calls: %d instances, definition v%d, %d triggers", len(lr.GetInstances()), dr.GetDefinition().GetVersion(), len(tr.GetTriggers()))
	}
}

// TestAuthExitCodes: no token, a wrong one, a role that may not, and a
// namespace the token may not use exit 5; the right token exits 0, from a
// flag, the environment or a file.
func TestAuthExitCodes(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, true)
	env := func(kv ...string) map[string]string {
		m := map[string]string{"JOBCTL_ADDR": s.url}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tokenFile := t.TempDir() + "/token"
	if err := writeFile(tokenFile, adminSecret+"\n"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		code int
	}{
		{env(), []string{"kinds"}, exitAuth},
		{env(), []string{"--token", "wrong", "kinds"}, exitAuth},
		{env("JOBCTL_TOKEN", viewerSecret), []string{"schedule", "sum", "--args", "[1,2]"}, exitAuth},
		{env("JOBCTL_TOKEN", viewerSecret, "JOBCTL_NAMESPACE", "other"), []string{"kinds"}, exitAuth},
		{env("JOBCTL_TOKEN", viewerSecret), []string{"kinds"}, exitOK},
		{env(), []string{"--token", adminSecret, "schedule", "sum", "--args", "[1,2]"}, exitOK},
		{env("JOBCTL_NAMESPACE", "other"), []string{"--token-file", tokenFile, "schedule", "sum", "--args", "[1,2]"}, exitOK},
	} {
		r := jobctlEnv(t, tc.env, "", tc.args...)
		if r.code != tc.code {
			t.Errorf("env %v jobctl %v: exit %d, want %d\n%s", tc.env, tc.args, r.code, tc.code, r.stderr)
		}
	}
	// The viewer's refused schedule stored nothing; the admin's two went
	// one to each namespace.
	for ns, want := range map[string]int{"default": 1, "other": 1} {
		r := jobctlEnv(t, env("JOBCTL_TOKEN", adminSecret, "JOBCTL_NAMESPACE", ns), "", "instances", "list", "-o", "json")
		var lr jobkitv1.ListInstancesResponse
		if err := protojson.Unmarshal([]byte(r.stdout), &lr); err != nil || len(lr.GetInstances()) != want {
			t.Errorf("namespace %s: %d instances (%v), want %d", ns, len(lr.GetInstances()), err, want)
		}
	}
}

// TestOperateInstancesQueuesDefinitionsTriggers drives the rest of the
// commands and checks each did what it says.
func TestOperateInstancesQueuesDefinitionsTriggers(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, sk storeKind) {
		operateInstancesQueuesDefinitionsTriggers(t, newTestServerOn(t, false, sk))
	})
}

func operateInstancesQueuesDefinitionsTriggers(t *testing.T, s *testServer) {

	// Cancel, retry, delete one instance.
	var sr jobkitv1.ScheduleResponse
	s.okJSON(t, &sr, "schedule", "sum", "--args", "[1,2]", "--in", "1h")
	id := sr.GetInstance().GetId()
	var cr jobkitv1.CancelInstanceResponse
	s.okJSON(t, &cr, "instance", "cancel", id)
	if cr.GetInstance().GetState() != jobkitv1.State_STATE_CANCELED {
		t.Fatalf("canceled: %v", cr.GetInstance())
	}
	var rr jobkitv1.RetryInstanceResponse
	s.okJSON(t, &rr, "instance", "retry", id, "--at", "2099-01-01T00:00:00Z")
	if rr.GetInstance().GetState() != jobkitv1.State_STATE_SCHEDULED || rr.GetInstance().GetRunAt().AsTime().Year() != 2099 {
		t.Fatalf("retried: %v", rr.GetInstance())
	}
	s.ok(t, "instance", "delete", id)
	if r := s.jobctl(t, "instance", "get", id); r.code != exitNotFound {
		t.Fatalf("get after delete: exit %d", r.code)
	}

	// Bulk by filter.
	for range 3 {
		s.ok(t, "schedule", "sum", "--args", "[1,2]", "--in", "1h", "--queue", "slow")
	}
	var bc jobkitv1.CancelInstancesResponse
	s.okJSON(t, &bc, "instances", "cancel", "--queue", "slow", "--state", "scheduled", "--yes")
	if bc.GetResult().GetMatched() != 3 || bc.GetResult().GetApplied() != 3 {
		t.Fatalf("bulk cancel: %v", bc.GetResult())
	}
	var bd jobkitv1.DeleteInstancesResponse
	s.okJSON(t, &bd, "instances", "delete", "--all", "--yes")
	if bd.GetResult().GetApplied() != 3 {
		t.Fatalf("bulk delete all: %v", bd.GetResult())
	}

	// Queues: pause holds work, resume lets it run.
	var pq jobkitv1.PauseQueueResponse
	s.okJSON(t, &pq, "queues", "pause", "default")
	if !pq.GetQueue().GetPaused() {
		t.Fatalf("paused: %v", pq.GetQueue())
	}
	s.okJSON(t, &sr, "schedule", "sum", "--args", "[2,2]")
	table := s.ok(t, "queues", "list")
	if !strings.Contains(table, "QUEUE") || !strings.Contains(table, "default") || !strings.Contains(table, "true") {
		t.Fatalf("queues table:\n%s", table)
	}
	s.ok(t, "queues", "resume", "default")
	waitFor(t, "the instance to run after resume", func() bool {
		var g jobkitv1.GetInstanceResponse
		s.okJSON(t, &g, "instance", "get", sr.GetInstance().GetId())
		return g.GetInstance().GetState() == jobkitv1.State_STATE_COMPLETED
	})
	var kr jobkitv1.ListKindsResponse
	s.okJSON(t, &kr, "kinds")
	if !slices.ContainsFunc(kr.GetKinds(), func(k *jobkitv1.Kind) bool { return k.GetName() == "sum" && k.GetCounts().GetCompleted() > 0 }) {
		t.Fatalf("kinds: %v", kr.GetKinds())
	}
	var nr jobkitv1.ListNodesResponse
	s.okJSON(t, &nr, "nodes")
	if len(nr.GetNodes()) != 1 || nr.GetNodes()[0].GetId() != s.mgr.NodeID() {
		t.Fatalf("nodes: %v", nr.GetNodes())
	}

	// Definitions: create, update keeps what it is not told, delete.
	var dc jobkitv1.CreateDefinitionResponse
	s.okJSON(t, &dc, "definitions", "create", "report", "--queue", "reports", "--retries", "5", "--timeout", "10m", "--label", "gpu", "--unique-by", "args", "--unique-ttl", "1h", "--convert-arguments")
	if !dc.GetDefinition().GetConvertArguments() {
		t.Fatalf("created with --convert-arguments: %v", dc.GetDefinition())
	}
	var du jobkitv1.UpdateDefinitionResponse
	s.okJSON(t, &du, "definitions", "update", "report", "--retries", "9")
	d := du.GetDefinition()
	if d.GetMaxRetries() != 9 || d.GetQueue() != "reports" || d.GetTimeout().AsDuration().Minutes() != 10 || d.GetVersion() != 2 ||
		d.GetUnique().GetBy() != jobkitv1.UniqueBy_UNIQUE_BY_ARGS || len(d.GetLabels()) != 1 || !d.GetConvertArguments() {
		t.Fatalf("updated definition: %v", d)
	}
	var dl jobkitv1.ListDefinitionsResponse
	s.okJSON(t, &dl, "definitions", "list")
	if len(dl.GetDefinitions()) != 1 {
		t.Fatalf("definitions: %v", dl.GetDefinitions())
	}
	s.ok(t, "definitions", "delete", "report")
	if r := s.jobctl(t, "definitions", "get", "report"); r.code != exitNotFound {
		t.Fatalf("definition after delete: exit %d", r.code)
	}

	// Triggers: schedule --interval creates one; pause, resume, run,
	// update, delete.
	var ct jobkitv1.CreateTriggerResponse
	s.okJSON(t, &ct, "schedule", "sum", "--args", "[5,5]", "--interval", "1h", "--name", "hourly")
	if ct.GetTrigger().GetInterval().AsDuration().Hours() != 1 || ct.GetTrigger().GetKind() != "sum" {
		t.Fatalf("trigger: %v", ct.GetTrigger())
	}
	var pt jobkitv1.PauseTriggerResponse
	s.okJSON(t, &pt, "triggers", "pause", "hourly")
	if !pt.GetTrigger().GetPaused() {
		t.Fatalf("paused trigger: %v", pt.GetTrigger())
	}
	s.ok(t, "triggers", "resume", "hourly")
	var run jobkitv1.RunTriggerResponse
	s.okJSON(t, &run, "triggers", "run", "hourly")
	if run.GetInstance().GetKind() != "sum" || run.GetInstance().GetArgsJson() != "[5,5]" {
		t.Fatalf("run trigger: %v", run.GetInstance())
	}
	var ut jobkitv1.UpdateTriggerResponse
	s.okJSON(t, &ut, "triggers", "update", "hourly", "--cron", "0 3 * * *", "--overlap", "forbid")
	if ut.GetTrigger().GetCron() != "0 3 * * *" || ut.GetTrigger().GetInterval() != nil || ut.GetTrigger().GetArgsJson() != "[5,5]" || ut.GetTrigger().GetOverlap() != jobkitv1.OverlapPolicy_OVERLAP_POLICY_FORBID {
		t.Fatalf("updated trigger: %v", ut.GetTrigger())
	}
	var gt jobkitv1.GetTriggerResponse
	s.okJSON(t, &gt, "triggers", "get", "hourly", "--next", "3")
	if len(gt.GetTrigger().GetNextFireTimes()) != 3 {
		t.Fatalf("next fire times: %v", gt.GetTrigger().GetNextFireTimes())
	}
	s.ok(t, "triggers", "delete", "hourly")
	if r := s.jobctl(t, "triggers", "get", "hourly"); r.code != exitNotFound {
		t.Fatalf("trigger after delete: exit %d", r.code)
	}
}

// TestScheduleBatch reads JSON Lines from stdin; one bad item fails alone
// and sets the exit code.
func TestScheduleBatch(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	in := `{"kind":"sum","argsJson":"[1,2]"}
# a comment
{"kind":"sum","argsJson":"[3,4]","queue":"batch"}
`
	r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, in, "schedule-batch", "-f", "-", "-o", "json")
	var br jobkitv1.ScheduleBatchResponse
	if r.code != 0 || protojson.Unmarshal([]byte(r.stdout), &br) != nil || len(br.GetResults()) != 2 || br.GetResults()[1].GetInstance().GetQueue() != "batch" {
		t.Fatalf("batch: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, `{"kind":"sum","argsJson":"[1,2]"}`+"\n"+`{"kind":"nosuchkind"}`+"\n", "schedule-batch", "-f", "-")
	if r.code != exitNotFound || !strings.Contains(r.stdout, "not_found") || strings.Count(r.stdout, "\n") != 3 {
		t.Fatalf("batch with an unknown kind: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = jobctlEnv(t, map[string]string{"JOBCTL_ADDR": s.url}, `{"kind":"sum","bogus":1}`, "schedule-batch", "-f", "-")
	if r.code != exitUsage || !strings.Contains(r.stderr, "line 1") {
		t.Fatalf("batch with an unknown field: exit %d %s", r.code, r.stderr)
	}
}

// TestWatchPrintsChanges runs jobctl watch until its context ends while
// an instance runs, and reads the JSON lines it printed.
func TestWatchPrintsChanges(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, false)
	ctx, cancel := contextWithCancel(t)
	var out syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"watch", "--kind", "sum", "-o", "json"}, &env{
			stdin: strings.NewReader(""), stdout: &out, stderr: &out,
			getenv: func(k string) string { return map[string]string{"JOBCTL_ADDR": s.url}[k] },
		})
	}()
	// Schedule until the watch (which starts "now") has seen a completion.
	var id string
	waitFor(t, "watch to print a completed event", func() bool {
		if id == "" || strings.Count(out.String(), "\n") == 0 {
			var sr jobkitv1.ScheduleResponse
			s.okJSON(t, &sr, "schedule", "sum", "--args", "[1,2]")
			id = sr.GetInstance().GetId()
		}
		return strings.Contains(out.String(), "STATE_COMPLETED")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("watch exit %d\n%s", code, out.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var wr jobkitv1.WatchResponse
		if err := protojson.Unmarshal([]byte(line), &wr); err != nil || wr.GetEvent().GetKind() != "sum" || wr.GetEvent().GetCursor() == "" {
			t.Fatalf("watch line %q: %v", line, err)
		}
		var generic map[string]any
		if json.Unmarshal([]byte(line), &generic) != nil {
			t.Fatalf("watch line is not one JSON object: %q", line)
		}
	}
}
