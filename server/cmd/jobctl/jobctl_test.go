package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// result is what one jobctl run printed and its exit code.
type result struct {
	stdout, stderr string
	code           int
}

// jobctl runs jobctl's root command in-process with args, the given
// environment and stdin, capturing its output and exit code.
func jobctlEnv(t *testing.T, envs map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, &env{
		stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		getenv: func(k string) string { return envs[k] },
	})
	return result{out.String(), errb.String(), code}
}

func jobctl(t *testing.T, args ...string) result { return jobctlEnv(t, nil, "", args...) }

// deadAddr returns the address of a loopback port nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestUsageErrorsExitTwoAndSendNothing runs command lines that are wrong
// against an address nothing listens on: each must exit 2 with a message
// naming the fix, before any call (a call would exit 6, unavailable).
func TestUsageErrorsExitTwoAndSendNothing(t *testing.T) {
	t.Parallel()
	addr := deadAddr(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"instances", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"instances", "list", "--page-size", "x"}, "invalid argument"},
		{[]string{"instance", "get"}, "wants 1 argument(s): [ID]"},
		{[]string{"instance", "get", "a", "b"}, "wants 1 argument(s)"},
		{[]string{"kinds", "extra"}, "takes no arguments"},
		{[]string{"-o", "xml", "kinds"}, `-o "xml": want table, json or yaml`},
		{[]string{"instances", "list", "--state", "sleeping"}, `--state "sleeping"`},
		{[]string{"instances", "list", "--since", "yesterday"}, `--since "yesterday": want an RFC 3339 time`},
		{[]string{"instances", "list", "--page-token", "x", "--all-pages"}, "none of the others can be"},
		{[]string{"instances", "cancel", "--yes"}, "narrow it (--state, --kind, ...) or say --all"},
		{[]string{"instances", "delete", "--state", "failed"}, "add --yes"},
		{[]string{"schedule", "sum", "--args", "{"}, "not a JSON array"},
		{[]string{"schedule", "sum", "--at", "tomorrow"}, `--at "tomorrow"`},
		{[]string{"schedule", "sum", "--at", "2030-01-01T00:00:00Z", "--in", "5m"}, "one of --at and --in"},
		{[]string{"schedule", "sum", "--retries", "-2"}, "max retries -2"},
		{[]string{"schedule", "sum", "--cron", "@hourly", "--retries", "3"}, "--retries does not apply to a trigger"},
		{[]string{"schedule", "sum", "--unique-ttl", "1h"}, "--unique-ttl goes with --unique-key"},
		{[]string{"schedule", "sum", "--meta", "novalue"}, `--meta "novalue": want key=value`},
		{[]string{"schedule-batch"}, `required flag(s) "file" not set`},
		{[]string{"schedule-batch", "-f", "/does/not/exist"}, "no such file"},
		{[]string{"instance", "logs", "x", "--level", "loud"}, `--level "loud"`},
		{[]string{"triggers", "create", "t"}, "needs --kind"},
		{[]string{"triggers", "create", "t", "--kind", "k", "--overlap", "sometimes"}, `--overlap "sometimes"`},
		{[]string{"--protocol", "soap", "kinds"}, `unknown protocol "soap"`},
		{[]string{"--token-file", "/does/not/exist", "kinds"}, "--token-file"},
		{[]string{"--addr", "http://" + addr, "--insecure-skip-verify", "kinds"}, "need an https:// address"},
	} {
		r := jobctl(t, append([]string{"--addr", addr}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("jobctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// TestUnreachableServerExitsSix: a server that does not listen is exit 6,
// for every kind of call (unary and streaming).
func TestUnreachableServerExitsSix(t *testing.T) {
	t.Parallel()
	addr := deadAddr(t)
	for _, args := range [][]string{
		{"kinds"}, {"instance", "get", "x"}, {"watch"}, {"instance", "logs", "x", "--follow"},
		{"schedule", "sum", "--args", "[1,2]"},
	} {
		r := jobctlEnv(t, map[string]string{"JOBCTL_ADDR": addr}, "", args...)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "unavailable") {
			t.Errorf("jobctl %v: exit %d, stderr %q; want 6, unavailable", args, r.code, r.stderr)
		}
	}
}

func TestExitCodesOfAPICodes(t *testing.T) {
	t.Parallel()
	// Every code a script may branch on, as the package comment lists it.
	for code, want := range map[string]int{
		"invalid_argument": 2, "not_found": 3, "already_exists": 4, "failed_precondition": 4, "aborted": 4,
		"unauthenticated": 5, "permission_denied": 5, "unavailable": 6, "deadline_exceeded": 6,
		"internal": 1, "unknown": 1, "unimplemented": 1, "resource_exhausted": 1,
	} {
		var c jobkitv1ItemCode
		if err := c.UnmarshalText([]byte(code)); err != nil {
			t.Fatal(err)
		}
		if got := codeExit(c.Code); got != want {
			t.Errorf("%s: exit %d, want %d", code, got, want)
		}
	}
}

// TestYAMLOutputKeepsFieldsAndTypes checks the YAML form of a message: the
// fields in protojson's order, and strings that look like numbers (64-bit
// integers, which protojson writes as strings) kept strings.
func TestYAMLOutputKeepsFieldsAndTypes(t *testing.T) {
	t.Parallel()
	msg := &jobkitv1.GetInstanceResponse{Instance: &jobkitv1.Instance{
		Id: "0194", Kind: "sum", State: jobkitv1.State_STATE_COMPLETED, ArgsJson: "[1,2]", Seq: 42,
		CreatedAt: timestamppb.New(timestamppb.Now().AsTime()), Error: "yes",
	}}
	var out bytes.Buffer
	p := &printer{w: &out, format: "yaml"}
	if err := p.message(msg, false); err != nil {
		t.Fatal(err)
	}
	var back map[string]map[string]any
	if err := yaml.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	in := back["instance"]
	for k, want := range map[string]any{"id": "0194", "seq": "42", "argsJson": "[1,2]", "state": "STATE_COMPLETED", "error": "yes"} {
		if in[k] != want {
			t.Errorf("%s: %#v (%T), want %#v\n%s", k, in[k], in[k], want, out.String())
		}
	}
	if strings.Contains(out.String(), "{") {
		t.Errorf("not block style:\n%s", out.String())
	}
	// And back to the message, as a script would.
	j, err := yamlToJSONForTest(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got := &jobkitv1.GetInstanceResponse{}
	if err := protojson.Unmarshal(j, got); err != nil || got.GetInstance().GetSeq() != 42 {
		t.Fatalf("round trip: %v %v", got, err)
	}
}

// TestBinary builds jobctl and runs it, so main's wiring (exit status,
// environment, streams) is what the in-process tests assume.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(buildJobctl(t), "jobctl")
	cmd := exec.Command(bin, "kinds")
	cmd.Env = append(os.Environ(), "JOBCTL_ADDR="+deadAddr(t))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUnavailable {
		t.Fatalf("jobctl kinds with nothing listening: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "--bogus").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitUsage {
		t.Fatalf("jobctl --bogus: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "completion", "bash").Output()
	if err != nil || !strings.Contains(string(out), "__start_jobctl") {
		t.Fatalf("completion bash: %v\n%.200s", err, out)
	}
}

// TestHelpNeverPrintsTheToken: the token from JOBCTL_TOKEN must not show in
// any help text (a flag's default is printed there), on the root or a
// subcommand, nor in the completion script.
func TestHelpNeverPrintsTheToken(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-token-from-env"
	envs := map[string]string{"JOBCTL_TOKEN": secret}
	for _, args := range [][]string{
		{"--help"},
		{"schedule", "--help"},
		{"instance", "logs", "--help"},
		{"watch", "-h"},
		{"completion", "bash"},
	} {
		r := jobctlEnv(t, envs, "", args...)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("jobctl %s printed the token from JOBCTL_TOKEN:\n%s%s", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
}
