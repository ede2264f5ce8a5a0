package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCommandDiesWithJobd (issue 33): a jobd SIGKILLed while a command job
// runs takes the command's whole process group with it, children
// included, even when they ignore SIGTERM; otherwise the job would run
// twice at once when another node rescues it.
func TestCommandDiesWithJobd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startJobd(t, jobdBin(), nil, "--workers", "2", "--namespace", uniqueNS(t), "--command-allow", "/bin/sh")
	env := []string{"JOBCTL_ADDR=" + p.api}
	run := func(args ...string) string {
		t.Helper()
		code, out := jobctl(t, env, args...)
		if code != 0 {
			t.Fatalf("jobctl %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	pgFile := filepath.Join(dir, "pgid")
	// The shell ignores SIGTERM, and so do the children it starts: two
	// sleeps and a subshell loop that keeps starting more.
	script := `trap '' TERM; sleep 300 & sleep 300 & (while :; do sleep 1; done) & read -r _ _ _ _ pg _ < /proc/$$/stat; echo $pg > "$1.tmp"; mv "$1.tmp" "$1"; wait`
	cfg, _ := json.Marshal(map[string]any{"argv": []string{script, pgFile}, "shell": true})
	run("definitions", "create", "orphan", "--executor", "command", "--config", string(cfg))
	run("schedule", "orphan")
	var pgid int
	waitFor(t, 30*time.Second, "the command to write its process group", func() (bool, string) {
		b, err := os.ReadFile(pgFile)
		if err != nil {
			return false, err.Error()
		}
		pgid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pgid > 1, string(b)
	})
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // when the test fails
	waitFor(t, 10*time.Second, "four processes in the command's group", func() (bool, string) {
		n := len(groupMembers(pgid))
		return n >= 4, strconv.Itoa(n)
	})

	p.signal(syscall.SIGKILL)
	p.exitCode(10 * time.Second)
	waitFor(t, 5*time.Second, "every process of the command's group to be gone after jobd's SIGKILL", func() (bool, string) {
		m := groupMembers(pgid)
		return len(m) == 0, strings.Join(m, "; ")
	})
}

// groupMembers describes the live (not zombie) processes of group pgid.
func groupMembers(pgid int) []string {
	var out []string
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
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:strings.LastIndexByte(s, ')')]+" "+f[0])
		}
	}
	return out
}
