package main_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/api/client"
)

// TestErrorsForTheReader (issue 33 item 6): the errors a jobctl user
// meets against a real jobd, each word for word: what it is about once,
// and the one fix that fits jobctl (its flags and commands), or the API
// (for a Go program using api/client).
func TestErrorsForTheReader(t *testing.T) {
	t.Parallel()
	admin := newToken("admin", "admin", "*")
	secrets := t.TempDir()
	p := startJobd(t, jobdBin(), nil, "--workers", "1", "--tokens-file", writeTokens(t, admin),
		"--command-allow", "/bin/echo", "--secrets-dir", secrets)
	env := []string{"JOBCTL_ADDR=" + p.api, "JOBCTL_TOKEN=" + admin.secret}
	run := func(args ...string) (int, string) {
		t.Helper()
		return jobctl(t, env, args...)
	}
	expect := func(what string, wantCode int, want string, args ...string) {
		t.Helper()
		code, out := run(args...)
		if code != wantCode || out != want {
			t.Errorf("%s: jobctl %s: exit %d\n got %q\nwant %q", what, strings.Join(args, " "), code, out, want)
		}
	}

	// No token: jobctl's flags and variable, not the HTTP header.
	code, out := jobctl(t, []string{"JOBCTL_ADDR=" + p.api, "JOBCTL_TOKEN="}, "nodes")
	if want := "jobctl: jobkit: list nodes: unauthenticated: no token: give one with --token or --token-file, or set JOBCTL_TOKEN\n"; code != 5 || out != want {
		t.Errorf("no token: exit %d\n got %q\nwant %q", code, out, want)
	}

	// An unknown kind: jobctl's command, not Manager.RegisterJob; a Go
	// program reading the API gets the API's call, and the ErrorFix.
	expect("unknown kind", 3, `jobctl: jobkit: schedule: not_found: unknown kind "nosuch": the store holds no definition of it and this node does not register it (it registers none); define it with 'jobctl definitions create nosuch' (a job made of data), or start a worker that registers it`+"\n",
		"schedule", "nosuch")
	c, err := client.New(p.api, client.WithToken(admin.secret))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ScheduleJob(t.Context(), "nosuch")
	var ce *client.Error
	if want := `jobkit: schedule: not_found: unknown kind "nosuch": the store holds no definition of it and this node does not register it (it registers none); create its definition (DefinitionService.CreateDefinition), or start a worker that registers it`; !errors.As(err, &ce) || err.Error() != want {
		t.Errorf("unknown kind through api/client:\n got %v\nwant %s", err, want)
	} else if f := ce.Fix(); f.GetReason() != client.FixUnknownKind || f.GetSubject() != "nosuch" || !strings.HasSuffix(ce.Message(), f.GetFix()) {
		t.Errorf("unknown kind: ErrorFix %v", f)
	}

	if code, out := run("definitions", "create", "echo", "--executor", "command", "--config", `{"argv":["/bin/echo","hi"]}`); code != 0 {
		t.Fatalf("definitions create: exit %d: %s", code, out)
	}

	// A held unique key: the user's key, the holder once, the fix once.
	code, out = run("schedule", "echo", "--unique-key", "k1", "--unique-ttl", "2h", "--in", "1h", "-o", "json")
	var sr struct {
		Instance struct {
			ID          string    `json:"id"`
			UniqueUntil time.Time `json:"uniqueUntil"`
		} `json:"instance"`
	}
	if err := json.Unmarshal([]byte(out), &sr); code != 0 || err != nil {
		t.Fatalf("schedule with a unique key: exit %d (%v): %s", code, err, out)
	}
	id := sr.Instance.ID
	expect("held unique key", 4, `jobctl: jobkit: schedule "echo": already_exists: unique key "k1" is held by instance `+id+` until `+sr.Instance.UniqueUntil.UTC().Format(time.RFC3339)+`; use another unique key, or wait until it is released`+"\n",
		"schedule", "echo", "--unique-key", "k1")

	// Retry and cancel: the instance ID once, the state, the fix once.
	expect("retry of a scheduled instance", 4, "jobctl: jobkit: retry "+id+": failed_precondition: the instance is scheduled, not finished; cancel it first, or wait for it to finish\n",
		"instance", "retry", id)
	if code, out := run("instance", "cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d: %s", code, out)
	}
	expect("cancel of a canceled instance", 4, "jobctl: jobkit: cancel "+id+": failed_precondition: the instance is canceled already: there is nothing to cancel\n",
		"instance", "cancel", id)
	const nope = "0194c6a0-0000-7000-8000-000000000000"
	expect("retry of no instance", 3, "jobctl: jobkit: retry "+nope+": not_found: no such instance (check the name or ID: list them to see what exists)\n",
		"instance", "retry", nope)

	// A paused queue: jobctl's command in jobctl, the API's call in JSON.
	if code, out := run("queues", "pause", "default"); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, out)
	}
	code, out = run("schedule", "echo", "-o", "json")
	if err := json.Unmarshal([]byte(out), &sr); code != 0 || err != nil {
		t.Fatalf("schedule: exit %d (%v): %s", code, err, out)
	}
	code, out = run("instance", "get", sr.Instance.ID)
	if want := `waiting           queue_paused: queue "default" is paused; resume it with 'jobctl queues resume default' to run its instances`; code != 0 || !strings.Contains(out, want+"\n") {
		t.Errorf("instance get in a paused queue: exit %d, want the line %q in\n%s", code, want, out)
	}
	code, out = run("instance", "get", sr.Instance.ID, "-o", "json")
	var gr struct {
		Waiting struct{ Reason, Message string } `json:"waiting"`
	}
	if err := json.Unmarshal([]byte(out), &gr); code != 0 || err != nil || gr.Waiting.Message != `queue "default" is paused; resume it (QueueService.ResumeQueue) to run its instances` {
		t.Errorf("instance get -o json in a paused queue: exit %d (%v), waiting %+v", code, err, gr.Waiting)
	}
	if code, out := run("queues", "resume", "default"); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, out)
	}

	// An alert channel on a loopback address: jobd's flag.
	expect("loopback channel", 2, `jobctl: jobkit: create channel: invalid_argument: alert: invalid: channel "hook": webhook: destination forbidden: 127.0.0.1 resolves to loopback address 127.0.0.1; to reach it, add 127.0.0.1 to jobd's --alert-allow`+"\n",
		"alert", "channels", "create", "hook", "--type", "webhook", "--url", "http://127.0.0.1:9/x")
	expect("loopback channel by name", 2, `jobctl: jobkit: create channel: invalid_argument: alert: invalid: channel "hook": webhook: destination forbidden: localhost resolves to loopback address 127.0.0.1; to reach it, add localhost (or 127.0.0.1) to jobd's --alert-allow`+"\n",
		"alert", "channels", "create", "hook", "--type", "webhook", "--url", "http://localhost:9/x")

	// A missing secret: its file in --secrets-dir and its variable.
	if code, out := run("definitions", "create", "sec", "--executor", "command", "--config", `{"argv":["/bin/echo","hi"],"env_secrets":{"PW":"db-pass"}}`); code != 0 {
		t.Fatalf("definitions create sec: exit %d: %s", code, out)
	}
	code, out = run("definitions", "test", "sec")
	if want := `error    env_secrets PW: secrets: no such secret: "db-pass"; create the file ` + filepath.Join(secrets, "db-pass") + `, or set the environment variable JOBD_SECRET_DB_PASS`; code != 1 || !strings.Contains(out, want+"\n") {
		t.Errorf("missing secret: exit %d, want the line %q in\n%s", code, want, out)
	}
}

// TestScheduleBatchNumbersFromOne (issue 33 item 7): the table and the
// error name the failed item by the same number, counted from 1.
func TestScheduleBatchNumbersFromOne(t *testing.T) {
	t.Parallel()
	p := startJobd(t, jobdBin(), nil, "--workers", "1", "--command-allow", "/bin/echo")
	env := []string{"JOBCTL_ADDR=" + p.api}
	if code, out := jobctl(t, env, "definitions", "create", "echo", "--executor", "command", "--config", `{"argv":["/bin/echo","hi"]}`); code != 0 {
		t.Fatalf("definitions create: exit %d: %s", code, out)
	}
	in := filepath.Join(t.TempDir(), "batch.jsonl")
	if err := os.WriteFile(in, []byte(`{"kind":"echo"}`+"\n"+`{"kind":"nosuch"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := jobctl(t, env, "schedule-batch", "-f", in)
	var row, msg string
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "2 ") {
			row = line
		}
		if strings.HasPrefix(line, "jobctl: ") {
			msg = line
		}
	}
	// Both name jobctl's fix too, as a call of its own would, and the
	// kind once (the row's KIND column; the message's unknown kind).
	const why = `not_found: unknown kind "nosuch": the store holds no definition of it and this node does not register it (it registers echo); define it with 'jobctl definitions create nosuch' (a job made of data), or start a worker that registers it` + "\n"
	if code != 3 || !strings.HasSuffix(row, "  nosuch  -        -          "+why) || msg != `jobctl: jobkit: schedule batch: item 2 of 2: `+why {
		t.Errorf("schedule-batch: exit %d; want row 2 and the error naming item 2 of 2 and jobctl's fix:\n%s", code, out)
	}
}
