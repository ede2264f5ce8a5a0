package command_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/internal/xtest"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/store"
)

const dbPass = "db-pass-value-5e1d"

func newType() *command.Type {
	return command.New(command.Options{
		Allow:   []string{"/bin/echo", "/bin/sh"},
		Secrets: secrets.Map(map[string]string{"db-pass": dbPass}),
	})
}

func TestCommandWritesOutput(t *testing.T) {
	t.Parallel()
	m := xtest.Manager(t, newType())
	xtest.Define(t, m, "echo", store.ExecutorCommand, map[string]any{
		"argv": []string{"/bin/echo", "hello", "{{index .Args 0}}"}, "append_args": true,
	}, 0, 0)
	inst := xtest.Run(t, m, "echo", "world", 42)
	var res command.Result
	if inst.State != job.Completed || inst.ResultsInto(&res) != nil || res.ExitCode != 0 || res.Output != "hello world world 42\n" {
		t.Fatalf("state %v error %v result %+v", inst.State, inst.Error, res)
	}
	if logs := xtest.Logs(t, m, inst.ID); !strings.Contains(logs, "hello world world 42") {
		t.Fatalf("logs %q", logs)
	}
	// stderr is logged too; env comes from the config and secrets only.
	xtest.Define(t, m, "env", store.ExecutorCommand, map[string]any{
		"argv": []string{`echo "kind=$JOBKIT_KIND lang=$LANG home=$HOME"; echo to-stderr >&2; test "$PGPASSWORD" = "` + dbPass + `"`}, "shell": true,
		"env": map[string]string{"LANG": "C"}, "env_secrets": map[string]string{"PGPASSWORD": "db-pass"},
	}, 0, 0)
	inst = xtest.Run(t, m, "env")
	logs := xtest.Logs(t, m, inst.ID)
	if inst.State != job.Completed || !strings.Contains(logs, "kind=env lang=C home=\n") && !strings.Contains(logs, "kind=env lang=C home=") || !strings.Contains(logs, "to-stderr") {
		t.Fatalf("state %v error %v logs %q", inst.State, inst.Error, logs)
	}
	if all := xtest.Everything(t, m, inst.ID); strings.Contains(all, dbPass) {
		t.Fatalf("the secret reached the records: %s", all)
	}
}

// groupAlive reports whether a process of group pgid is still running
// (zombies waiting for a reaper do not count).
func groupAlive(pgid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // state ppid pgrp ...
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", file)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCommandTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := xtest.Manager(t, newType())
	// The script and its child ignore SIGTERM (ignored signals survive
	// exec), so only the SIGKILL after the grace period ends them.
	xtest.Define(t, m, "stubborn", store.ExecutorCommand, map[string]any{
		"argv":  []string{`trap "" TERM; read -r _ _ _ _ pg _ < /proc/$$/stat; echo $pg > "$1"; sleep 300 & sleep 300; wait`, filepath.Join(dir, "pid")},
		"shell": true, "grace": "300ms",
	}, 0, 2*time.Second)
	start := time.Now()
	inst := xtest.Run(t, m, "stubborn")
	pgid := readPid(t, filepath.Join(dir, "pid"))
	if inst.State != job.TimedOut {
		t.Fatalf("state %v error %v; want TimedOut", inst.State, inst.Error)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live processes after the timeout", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if logs := xtest.Logs(t, m, inst.ID); !strings.Contains(logs, "SIGKILL") {
		t.Fatalf("logs %q, want the SIGKILL noted", logs)
	}
}

func TestCommandCanceledMidRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := xtest.Manager(t, newType())
	xtest.Define(t, m, "long", store.ExecutorCommand, map[string]any{
		"argv":  []string{`read -r _ _ _ _ pg _ < /proc/$$/stat; echo $pg > "$1"; echo started; sleep 300 & sleep 300`, filepath.Join(dir, "pid")},
		"shell": true,
	}, 3, 0)
	a, err := m.ScheduleJob(context.Background(), "long")
	if err != nil {
		t.Fatal(err)
	}
	pgid := readPid(t, filepath.Join(dir, "pid"))
	if _, err := m.CancelInstance(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	inst := xtest.Wait(t, m, a.ID, job.Canceled, job.Completed, job.Terminated)
	if inst.State != job.Canceled || inst.Attempt != 1 {
		t.Fatalf("state %v attempt %d error %v; want Canceled", inst.State, inst.Attempt, inst.Error)
	}
	deadline := time.Now().Add(5 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d outlived the cancel", pgid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCommandNotAllowed(t *testing.T) {
	t.Parallel()
	m := xtest.Manager(t, newType())
	xtest.Define(t, m, "id", store.ExecutorCommand, map[string]any{"argv": []string{"/usr/bin/id"}}, 3, 0)
	inst := xtest.Run(t, m, "id")
	if inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "not on this node's allowlist") {
		t.Fatalf("state %v attempt %d error %v", inst.State, inst.Attempt, inst.Error)
	}
	// A node with an empty allowlist runs nothing, a shell included.
	none := xtest.Manager(t, command.New(command.Options{}))
	xtest.Define(t, none, "sh", store.ExecutorCommand, map[string]any{"argv": []string{"true"}, "shell": true}, 0, 0)
	if inst := xtest.Run(t, none, "sh"); inst.State != job.Terminated || !strings.Contains(inst.Error, "/bin/sh is not on") {
		t.Fatalf("empty allowlist: state %v error %v", inst.State, inst.Error)
	}
	// Configs that can work nowhere are refused when stored.
	for name, cfg := range map[string]map[string]any{
		"relative program":  {"argv": []string{"echo"}},
		"templated program": {"argv": []string{"{{index .Args 0}}"}},
		"no argv":           {},
		"unknown field":     {"argv": []string{"/bin/echo"}, "password": "x"},
		"bad exit code":     {"argv": []string{"/bin/echo"}, "permanent_exit_codes": []int{0}},
		"relative dir":      {"argv": []string{"/bin/echo"}, "dir": "tmp"},
		"reserved env":      {"argv": []string{"/bin/echo"}, "env": map[string]string{"JOBKIT_KIND": "x"}},
	} {
		if err := xtest.TryDefine(m, "bad", store.ExecutorCommand, cfg, 0, 0); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("%s: %v, want the config refused", name, err)
		}
	}
}

func TestCommandMetacharactersAreData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	evil := "; touch " + marker + " && echo $(touch " + marker + ") `touch " + marker + "` | cat > " + marker
	m := xtest.Manager(t, newType())
	xtest.Define(t, m, "echo", store.ExecutorCommand, map[string]any{"argv": []string{"/bin/echo", "{{index .Args 0}}"}}, 0, 0)
	inst := xtest.Run(t, m, "echo", evil)
	var res command.Result
	if inst.State != job.Completed || inst.ResultsInto(&res) != nil || res.Output != evil+"\n" {
		t.Fatalf("state %v error %v output %q", inst.State, inst.Error, res.Output)
	}
	// Through an explicit shell, arguments are positional parameters.
	xtest.Define(t, m, "sh", store.ExecutorCommand, map[string]any{"argv": []string{`printf '%s\n' "$1"`, "{{index .Args 0}}"}, "shell": true}, 0, 0)
	inst = xtest.Run(t, m, "sh", evil)
	if inst.State != job.Completed || inst.ResultsInto(&res) != nil || res.Output != evil+"\n" {
		t.Fatalf("shell: state %v error %v output %q", inst.State, inst.Error, res.Output)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("an argument was interpreted: %s exists", marker)
	}
}

func TestCommandExitCodes(t *testing.T) {
	t.Parallel()
	m := xtest.Manager(t, newType())
	xtest.Define(t, m, "exit", store.ExecutorCommand, map[string]any{"argv": []string{`exit "$1"`, "{{index .Args 0}}"}, "shell": true, "permanent_exit_codes": []int{3}}, 2, 0)
	if inst := xtest.Run(t, m, "exit", 3); inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Error, "exit status 3") {
		t.Fatalf("permanent code: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Error)
	}
	if inst := xtest.Run(t, m, "exit", 4); inst.State != job.Terminated || inst.Attempt != 3 || !strings.Contains(inst.Error, "exit status 4") {
		t.Fatalf("retried code: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Error)
	}
}

// TestCommandEnds: how a program ends reaches the instance through its
// supervisor: killed by a signal (retried), or not started at all
// (permanent).
func TestCommandEnds(t *testing.T) {
	t.Parallel()
	m := xtest.Manager(t, command.New(command.Options{Allow: []string{"/bin/sh", "/nonexistent/prog"}}))
	xtest.Define(t, m, "selfkill", store.ExecutorCommand, map[string]any{"argv": []string{`kill -KILL $$`}, "shell": true}, 1, 0)
	if inst := xtest.Run(t, m, "selfkill"); inst.State != job.Terminated || inst.Attempt != 2 || !strings.Contains(inst.Err().Error(), "killed by signal 9") {
		t.Fatalf("killed by a signal: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Err())
	}
	xtest.Define(t, m, "nodir", store.ExecutorCommand, map[string]any{"argv": []string{"true"}, "shell": true, "dir": "/nonexistent/dir"}, 3, 0)
	if inst := xtest.Run(t, m, "nodir"); inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Err().Error(), "dir /nonexistent/dir") {
		t.Fatalf("no such dir: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Err())
	}
	xtest.Define(t, m, "missing", store.ExecutorCommand, map[string]any{"argv": []string{"/nonexistent/prog"}}, 3, 0)
	if inst := xtest.Run(t, m, "missing"); inst.State != job.Terminated || inst.Attempt != 1 || !strings.Contains(inst.Err().Error(), "start: fork/exec /nonexistent/prog") {
		t.Fatalf("not started: state %v attempt %d error %v", inst.State, inst.Attempt, inst.Err())
	}
}
