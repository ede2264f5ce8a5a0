package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	_ "github.com/jobkit/job/api/gen/jobkit/v1" // registers the services' descriptors
)

// docExample is one ```sh block of doc/api.md.
type docExample struct {
	line    int    // where it starts
	section string // the "### " heading it is under
	service string // the "## " heading
	cmd     string
	capture string // the variable its output's first UUID sets, from <!-- capture: NAME -->
}

func (e docExample) curl() bool { return strings.Contains(e.cmd, "curl ") }

// readDocExamples returns the sh blocks of doc/api.md in order.
func readDocExamples(t *testing.T) []docExample {
	t.Helper()
	f, err := os.Open("../../../doc/api.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out              []docExample
		section, service string
		capture          string
		inBlock          bool
		cur              docExample
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case inBlock && line == "```":
			inBlock = false
			cur.cmd = strings.TrimSpace(cur.cmd)
			out = append(out, cur)
		case inBlock:
			cur.cmd += line + "\n"
		case line == "```sh":
			inBlock = true
			cur = docExample{line: n, section: section, service: service, capture: capture}
			capture = ""
		case strings.HasPrefix(line, "<!-- capture: "):
			capture = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- capture: "), " -->")
		case strings.HasPrefix(line, "### "):
			section = strings.TrimPrefix(line, "### ")
		case strings.HasPrefix(line, "## "):
			service, section = strings.TrimPrefix(line, "## "), ""
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestDocExamples runs every curl and jobctl example of doc/api.md, in
// order: the curl lines with /usr/bin/curl through sh against one real
// server, the jobctl lines with the jobctl binary (built here, on PATH)
// through sh against another, so each sequence builds its own state. Each
// must exit 0 (curl --fail-with-body, so an error status fails it; 28 for
// a curl whose --max-time ends a stream). It also checks that every call
// of the API has a curl example, every section a curl and a jobctl one,
// and every jobctl command an example.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	eachStore(t, testDocExamples)
}

func testDocExamples(t *testing.T, sk storeKind) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl is needed to run doc/api.md's examples: %v (apt-get install curl)", err)
	}
	examples := readDocExamples(t)
	if len(examples) < 60 {
		t.Fatalf("doc/api.md has %d sh examples; the parser lost some", len(examples))
	}
	bin := buildJobctl(t)
	curlSrv, ctlSrv := newTestServerOn(t, false, sk), newTestServerOn(t, false, sk)
	vars := map[*testServer]map[string]string{curlSrv: {}, ctlSrv: {}}
	for _, ex := range examples {
		srv, cmdText := ctlSrv, ex.cmd
		if ex.curl() {
			srv = curlSrv
			cmdText = strings.ReplaceAll(cmdText, "curl ", "curl --fail-with-body ")
		}
		// The server's address, also where alert channels post to.
		cmdText = strings.ReplaceAll(cmdText, "http://127.0.0.1:8080", srv.url)
		env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "JOBCTL_ADDR="+srv.url)
		for k, v := range vars[srv] {
			env = append(env, k+"="+v)
		}
		longRunning := strings.HasPrefix(ex.cmd, "jobctl watch")
		if longRunning {
			cmdText = "exec " + cmdText // so the ^C reaches jobctl, not sh
		}
		out, code := runShell(t, cmdText, env, longRunning)
		want := 0
		if strings.Contains(ex.cmd, "--max-time") {
			want = 28 // curl ended the stream
		}
		if code != want {
			t.Errorf("doc/api.md:%d (%s): exit %d, want %d\n%s\n%s", ex.line, ex.section, code, want, cmdText, out)
			continue
		}
		if ex.curl() && strings.Contains(out, `"code":"`) {
			t.Errorf("doc/api.md:%d (%s): an error in the answer:\n%s", ex.line, ex.section, out)
		}
		if ex.capture != "" {
			id := uuidRE.FindString(out)
			if id == "" {
				t.Fatalf("doc/api.md:%d: no instance ID in the output to set $%s:\n%s", ex.line, ex.capture, out)
			}
			vars[srv][ex.capture] = id
			if ex.capture == "ID" {
				waitFinal(t, srv, id) // the examples after it read its logs and results
			}
		}
		if ex.section == "FollowLogs" && !strings.Contains(out, "adding 1 and 2") {
			t.Errorf("doc/api.md:%d: FollowLogs printed no log record:\n%s", ex.line, out)
		}
	}

	// Every call has a curl example, and there is a GET.
	curled := map[string]bool{}
	procRE := regexp.MustCompile(`/(jobkit\.v1\.[A-Za-z]+/[A-Za-z]+)`)
	gets := 0
	for _, ex := range examples {
		if ex.curl() {
			for _, m := range procRE.FindAllStringSubmatch(ex.cmd, -1) {
				curled[m[1]] = true
			}
			if strings.Contains(ex.cmd, "curl -sS -G ") {
				gets++
			}
		}
	}
	calls := 0
	protoregistry.GlobalFiles.RangeFilesByPackage("jobkit.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			if sd.FullName() == "jobkit.v1.ExecutorService" {
				// The remote executors' protocol (a bidirectional
				// stream and a worker-only envelope): api/remote speaks
				// it, server/internal/remotetest tests it, and
				// doc/api.md says not to call it by hand.
				continue
			}
			for j := range sd.Methods().Len() {
				calls++
				if p := string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name()); !curled[p] {
					t.Errorf("doc/api.md has no curl example of %s", p)
				}
			}
		}
		return true
	})
	if calls < 30 || gets < 3 {
		t.Errorf("%d calls in the API, %d GET examples", calls, gets)
	}
	// Every call section has both kinds of example.
	type counts struct{ curl, ctl int }
	per := map[string]*counts{}
	for _, ex := range examples {
		if !strings.HasSuffix(ex.service, "Service") || ex.section == "" {
			continue
		}
		c := per[ex.section]
		if c == nil {
			c = &counts{}
			per[ex.section] = c
		}
		if ex.curl() {
			c.curl++
		} else {
			c.ctl++
		}
	}
	for s, c := range per {
		if c.curl == 0 || c.ctl == 0 {
			t.Errorf("doc/api.md section %q: %d curl and %d jobctl examples; want both", s, c.curl, c.ctl)
		}
	}
	// Every jobctl command has an example.
	var leaves []string
	var walk func(c *cobra.Command, path string)
	walk = func(c *cobra.Command, path string) {
		if c.Runnable() && len(c.Commands()) == 0 {
			leaves = append(leaves, path)
		}
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub, strings.TrimSpace(path+" "+sub.Name()))
			}
		}
	}
	walk(newRoot(&globals{env: &env{getenv: func(string) string { return "" }}}), "jobctl")
	for _, leaf := range leaves {
		found := false
		for _, ex := range examples {
			if !ex.curl() && strings.Contains(ex.cmd, leaf+" ") || strings.HasSuffix(ex.cmd, leaf) {
				found = true
			}
		}
		if !found {
			t.Errorf("doc/api.md has no example of %q", leaf)
		}
	}
}

// runShell runs text with sh in its own process group and returns its
// combined output and exit code. A long-running command gets SIGINT (as
// from a terminal's ^C) after 2 s.
func runShell(t *testing.T, text string, env []string, longRunning bool) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", text)
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if longRunning {
		timer := time.AfterFunc(2*time.Second, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) })
		defer timer.Stop()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("sh -c %q: %v", text, err)
	return "", -1
}

// waitFinal waits until instance id on s has finished.
func waitFinal(t *testing.T, s *testServer, id string) {
	t.Helper()
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "instance "+id+" to finish", func() bool {
		in, err := c.GetInstance(t.Context(), id)
		return err == nil && in.State().Final() && in.State() != job.State(0)
	})
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// buildJobctl builds the jobctl binary once per test binary and returns
// the directory holding it (TestMain removes it).
func buildJobctl(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "jobctl-bin-")
		if buildErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, "jobctl"), ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}
