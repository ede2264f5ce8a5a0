// Package command is the command executor type: each attempt runs a
// program from the node's allowlist, in a process group of its own.
//
// A definition's config (store.ExecutorSpec.Config):
//
//	{
//	  "argv": ["/usr/bin/pg_dump", "--dbname", "{{index .Args 0}}"],
//	  "append_args": false,          // append each instance argument to argv
//	  "shell": false,                // argv[0] is a /bin/sh script; see below
//	  "env": {"LANG": "C"},
//	  "env_secrets": {"PGPASSWORD": "db-pass"},   // variable → secret name
//	  "dir": "/var/backups",
//	  "grace": "5s",                 // SIGTERM → SIGKILL; default 5s
//	  "permanent_exit_codes": [2, 64]
//	}
//
// Every argv entry is a text/template over the instance ({{.ID}},
// {{.Kind}}, {{.Attempt}}, {{index .Args 0}}, {{json .Args}}) and becomes
// exactly one argument: no shell sees it, so metacharacters in arguments
// are data. argv[0] must be an absolute path on the node's allowlist.
// Only with "shell": true does a shell run, and then explicitly:
// argv[0] is the script (not a template), run as /bin/sh -c script with
// the other entries as its positional parameters ("$1", ...), and
// /bin/sh must be on the allowlist.
//
// The program gets no environment from the node: PATH, the config's env,
// the secrets named by env_secrets, and JOBKIT_INSTANCE, JOBKIT_KIND,
// JOBKIT_ATTEMPT and JOBKIT_ARGS (the arguments as a JSON array). Its
// stdout and stderr are written to the instance's log line by line
// (info and warn), except the progress lines of stdout (ParseProgress):
// "::progress 40/100 copying" or "::progress 40% copying" reports the
// attempt's progress (job.Instance.SetProgress) instead. Exit status 0 completes the instance with
// {"exit_code": 0, "output": the last 4 KiB of stdout}; an exit code in
// permanent_exit_codes ends it (job.Permanent); any other fails the
// attempt, retried per the job's policy. When the attempt's context ends
// (timeout, cancel, shutdown) the whole process group gets SIGTERM, then
// SIGKILL after the grace period; and when the program exits, whatever it
// left running in its group is killed, so nothing outlives an attempt
// (a process that moves itself to a group or session of its own escapes
// this, as from any supervisor without cgroups).
//
// The group also dies with the node, however the node dies (SIGKILL, the
// OOM killer, a panic), so a rescued attempt never runs beside the
// first: a supervisor leads each group — this executable run again with
// argv[0] "jobkit-command-supervisor", which this package's init turns
// into the supervisor before main runs — and SIGKILLs the whole group
// when its pipe from the node closes. The package initializers of the
// node's binary run in the supervisor too (those this package depends on
// come first), so keep them free of side effects. See doc/executors.md.
//
// The type is disabled unless a node enables it, with an allowlist: jobd
// --command-allow. The node must also have the labels the definition
// requires (the engine's label matching).
package command

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/internal/tmpl"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/store"
)

// Config is a definition's command config; see the package documentation.
type Config struct {
	Argv               []string          `json:"argv"`
	AppendArgs         bool              `json:"append_args,omitempty"`
	Shell              bool              `json:"shell,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	EnvSecrets         map[string]string `json:"env_secrets,omitempty"`
	Dir                string            `json:"dir,omitempty"`
	Grace              string            `json:"grace,omitempty"`
	PermanentExitCodes []int             `json:"permanent_exit_codes,omitempty"`
}

// Defaults and bounds.
const (
	DefaultGrace = 5 * time.Second
	// Shell is the program a "shell": true definition runs.
	Shell        = "/bin/sh"
	maxArgBytes  = 128 << 10
	maxLineBytes = 4 << 10
	maxLogLines  = 10000
	outputTail   = 4 << 10
)

// ErrConfig is the error of a config that can work nowhere.
var ErrConfig = errors.New("command executor: invalid config")

// ErrNotAllowed is the error of a program not on the node's allowlist.
var ErrNotAllowed = errors.New("command executor: program not allowed")

// Options configure the type on a node.
type Options struct {
	// Allow lists the programs definitions may run, as absolute paths
	// (compared after filepath.Clean, so no symlink resolution). Empty:
	// every attempt fails with ErrNotAllowed.
	Allow []string
	// Secrets resolves env_secrets. Nil: none resolve.
	Secrets secrets.Resolver
	// Path is the PATH programs get. Defaults to
	// /usr/local/bin:/usr/bin:/bin.
	Path string
}

// Type is the command executor type; create it with New.
type Type struct {
	opts  Options
	allow map[string]bool
}

// New returns the command executor type configured by opts.
func New(opts Options) *Type {
	if opts.Path == "" {
		opts.Path = "/usr/local/bin:/usr/bin:/bin"
	}
	t := &Type{opts: opts, allow: map[string]bool{}}
	for _, p := range opts.Allow {
		t.allow[filepath.Clean(p)] = true
	}
	return t
}

// Type returns store.ExecutorCommand.
func (*Type) Type() string { return store.ExecutorCommand }

type compiled struct {
	cfg   Config
	argv  []*tmpl.Template // argv[1:] (argv[0] too unless shell)
	grace time.Duration
}

// ParseConfig decodes and checks a command config; a config that can
// work nowhere is an error wrapping ErrConfig.
func ParseConfig(raw []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v (fields: argv, append_args, shell, env, env_secrets, dir, grace, permanent_exit_codes)", ErrConfig, err)
	}
	if _, err := compile(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

func compile(c *Config) (*compiled, error) {
	x := &compiled{cfg: *c, grace: DefaultGrace}
	if len(c.Argv) == 0 {
		return nil, fmt.Errorf("%w: no argv; set \"argv\" to the program's absolute path and its arguments", ErrConfig)
	}
	if !c.Shell && (!filepath.IsAbs(c.Argv[0]) || strings.Contains(c.Argv[0], "{{")) {
		return nil, fmt.Errorf("%w: argv[0] %q; want the program's absolute path (no template)", ErrConfig, c.Argv[0])
	}
	for i, a := range c.Argv {
		if i == 0 {
			continue
		}
		t, err := tmpl.Parse(fmt.Sprintf("argv[%d]", i), a, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		x.argv = append(x.argv, t)
	}
	for k, v := range c.Env {
		if err := checkEnv(k, v); err != nil {
			return nil, err
		}
	}
	for k, name := range c.EnvSecrets {
		if err := checkEnv(k, ""); err != nil {
			return nil, err
		}
		if err := secrets.CheckName(name); err != nil {
			return nil, fmt.Errorf("%w: env_secrets %s: %v", ErrConfig, k, err)
		}
	}
	if c.Dir != "" && !filepath.IsAbs(c.Dir) {
		return nil, fmt.Errorf("%w: dir %q; want an absolute path", ErrConfig, c.Dir)
	}
	if c.Grace != "" {
		d, err := time.ParseDuration(c.Grace)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%w: grace %q; want a Go duration such as \"5s\"", ErrConfig, c.Grace)
		}
		x.grace = d
	}
	for _, code := range c.PermanentExitCodes {
		if code < 1 || code > 255 {
			return nil, fmt.Errorf("%w: permanent exit code %d; want 1 to 255", ErrConfig, code)
		}
	}
	return x, nil
}

func checkEnv(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") || strings.HasPrefix(k, "JOBKIT_") {
		return fmt.Errorf("%w: environment variable name %q (no '=', NUL or JOBKIT_ prefix)", ErrConfig, k)
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("%w: environment variable %s holds a NUL byte", ErrConfig, k)
	}
	return nil
}

// New builds the executor of a definition; a config that can work
// nowhere is an error wrapping ErrConfig. A program this node does not
// allow fails each attempt (ErrNotAllowed, permanently), since another
// node may allow it.
func (t *Type) New(d *job.Definition) (job.DataExecutor, error) {
	c, err := ParseConfig(d.Executor.Config)
	if err != nil {
		return nil, err
	}
	x, _ := compile(c)
	return func(ctx context.Context, inst job.Instance, args []json.RawMessage) (any, error) {
		return t.run(ctx, x, inst, args)
	}, nil
}

// Result is what a completed command attempt keeps as its result.
type Result struct {
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output,omitempty"`
}

func (t *Type) run(ctx context.Context, x *compiled, inst job.Instance, args []json.RawMessage) (any, error) {
	prog := filepath.Clean(x.cfg.Argv[0])
	if x.cfg.Shell {
		prog = Shell
	}
	if !t.allow[prog] {
		return nil, job.Permanent(fmt.Errorf("%w: %s is not on this node's allowlist (jobd --command-allow)", ErrNotAllowed, prog))
	}
	data, err := tmpl.NewData(inst, args)
	if err != nil {
		return nil, job.Permanent(err)
	}
	argv, err := buildArgv(x, data)
	if err != nil {
		return nil, err
	}
	env, err := t.buildEnv(x, data, args)
	if err != nil {
		return nil, err
	}
	if err := checkDir(prog, x.cfg.Dir); err != nil {
		return nil, err
	}
	p, err := startSupervised(prog, argv, env, x.cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer p.ctlW.Close()
	defer p.stR.Close()
	inst.Infof("command %s started (process group %d, %d arguments)", prog, p.pgid, len(argv))

	var wg sync.WaitGroup
	var tail tailBuffer
	var lines lineBudget
	wg.Add(2)
	go func() { defer wg.Done(); stream(p.outR, &lines, inst.Infof, &tail, inst.SetProgress) }()
	go func() { defer wg.Done(); stream(p.errR, &lines, inst.Warnf, nil, nil) }()

	st, stopped := p.await(ctx, x.grace, inst, prog)
	p.reap(&wg)

	if stopped {
		cause := context.Cause(ctx)
		inst.Warnf("command %s stopped: %v", prog, cause)
		return nil, fmt.Errorf("command %s stopped: %w", prog, cause)
	}
	return outcome(x, prog, st, p.cmd.ProcessState, &tail)
}

// buildArgv renders the program's arguments: the shell's own first
// ("-c", the script, "jobkit") with "shell", then each argv template, then
// the instance's arguments with "append_args". An argument holding a NUL
// byte fails the attempt permanently.
func buildArgv(x *compiled, data *tmpl.Data) ([]string, error) {
	var argv []string
	if x.cfg.Shell {
		argv = []string{"-c", x.cfg.Argv[0], "jobkit"}
	}
	for _, a := range x.argv {
		s, err := tmpl.Render(a, data, maxArgBytes)
		if err != nil {
			return nil, job.Permanent(err)
		}
		argv = append(argv, s)
	}
	if x.cfg.AppendArgs {
		for _, a := range data.Args {
			if s, ok := a.(string); ok {
				argv = append(argv, s)
			} else {
				b, _ := json.Marshal(a)
				argv = append(argv, string(b))
			}
		}
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return nil, job.Permanent(fmt.Errorf("%w: an argument holds a NUL byte", job.ErrInvalidArguments))
		}
	}
	return argv, nil
}

// buildEnv is the program's whole environment, sorted: PATH, the JOBKIT_
// variables, the config's env and the secrets env_secrets names. A secret
// this node cannot read fails the attempt permanently.
func (t *Type) buildEnv(x *compiled, data *tmpl.Data, args []json.RawMessage) ([]string, error) {
	rawArgs, _ := json.Marshal(args)
	env := []string{"PATH=" + t.opts.Path, "JOBKIT_INSTANCE=" + data.ID, "JOBKIT_KIND=" + data.Kind,
		fmt.Sprintf("JOBKIT_ATTEMPT=%d", data.Attempt), "JOBKIT_ARGS=" + string(rawArgs)}
	for k, v := range x.cfg.Env {
		env = append(env, k+"="+v)
	}
	for k, name := range x.cfg.EnvSecrets {
		if t.opts.Secrets == nil {
			return nil, job.Permanent(fmt.Errorf("env_secrets %s: %w: %q; this node has no secrets configured", k, secrets.ErrNotFound, name))
		}
		v, err := t.opts.Secrets(name)
		if err != nil {
			return nil, job.Permanent(fmt.Errorf("env_secrets %s: %w", k, err))
		}
		env = append(env, k+"="+string(v))
	}
	slices.Sort(env)
	return env, nil
}

// checkDir checks the config's working directory on this node. Checked
// before the start: a failed chdir would look like the supervisor's own
// failure to start, which is retried.
func checkDir(prog, dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		err = errors.New("not a directory")
	}
	if err != nil {
		return job.Permanent(fmt.Errorf("command %s: dir %s on this node: %w", prog, dir, err))
	}
	return nil
}

// supervised is a started supervisor and the ends of its pipes this
// process keeps.
type supervised struct {
	cmd        *exec.Cmd
	pgid       int
	outR, errR *os.File // the program's stdout and stderr
	ctlW       *os.File // closed (by the kernel, if need be) to kill the group
	stR        *os.File // how the program ended (readStatus)
}

// startSupervised starts the supervisor (see supervisorArg0), which leads
// the process group and runs the program in it; it kills the group when
// ctlW closes, which the kernel does when this process dies, however it
// dies.
func startSupervised(prog string, argv, env []string, dir string) (*supervised, error) {
	self, err := selfExe()
	if err != nil {
		return nil, fmt.Errorf("command: the supervisor (this executable): %w", err)
	}
	cmd := exec.Command(self, append([]string{prog}, argv...)...)
	cmd.Args[0] = supervisorArg0
	cmd.Env, cmd.Dir = env, dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File) {
		if err != nil {
			return nil, nil
		}
		if r, w, err = os.Pipe(); err == nil {
			files = append(files, r, w)
		}
		return r, w
	}
	outR, outW := pipe()
	errR, errW := pipe()
	ctlR, ctlW := pipe()
	stR, stW := pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("command: pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{ctlR, stW} // ctlFD, statusFD
	startErr := cmd.Start()
	outW.Close()
	errW.Close()
	ctlR.Close()
	stW.Close()
	if startErr != nil {
		closeAll()
		return nil, fmt.Errorf("command %s: start its supervisor: %w", prog, startErr)
	}
	return &supervised{cmd: cmd, pgid: cmd.Process.Pid, outR: outR, errR: errR, ctlW: ctlW, stR: stR}, nil
}

// await waits for the program to end. When ctx ends first, the group gets
// SIGTERM, then SIGKILL after grace, and stopped is true.
func (p *supervised) await(ctx context.Context, grace time.Duration, inst job.Instance, prog string) (st superStatus, stopped bool) {
	statusCh := make(chan superStatus, 1)
	go func() { statusCh <- readStatus(p.stR) }()
	select {
	case st = <-statusCh:
		return st, false
	case <-ctx.Done():
	}
	_ = syscall.Kill(-p.pgid, syscall.SIGTERM)
	timer := time.NewTimer(grace)
	select {
	case st = <-statusCh:
		timer.Stop()
	case <-timer.C:
		inst.Warnf("command %s: still running %v after SIGTERM; SIGKILL to its process group", prog, grace)
		_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
		st = <-statusCh
	}
	return st, true
}

// reap kills whatever the program left in its group (the supervisor
// too), so the pipes' last writers are gone and the readers (wg) end;
// a process that left the group and holds a pipe gets 2 seconds before
// the pipes are closed under it.
func (p *supervised) reap(wg *sync.WaitGroup) {
	_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
	_ = p.cmd.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second): // a process that left the group holds a pipe
		p.outR.Close()
		p.errR.Close()
		<-done
	}
	p.outR.Close()
	p.errR.Close()
}

// outcome turns how the program ended into the attempt's result or
// error.
func outcome(x *compiled, prog string, st superStatus, ps *os.ProcessState, tail *tailBuffer) (any, error) {
	switch {
	case st.startErr != "":
		return nil, job.Permanent(fmt.Errorf("command %s: start: %s", prog, st.startErr))
	case st.lost:
		return nil, fmt.Errorf("command %s: its supervisor ended without saying how the program ended (%v)", prog, ps)
	case !st.exited:
		return nil, fmt.Errorf("command %s: killed by signal %d (%v)", prog, int(st.signal), st.signal)
	case st.code == 0:
		return &Result{ExitCode: 0, Output: tail.String()}, nil
	}
	code := st.code
	err := fmt.Errorf("command %s: exit status %d", prog, code)
	if slices.Contains(x.cfg.PermanentExitCodes, code) {
		return nil, job.Permanent(fmt.Errorf("%w (a permanent failure per the definition)", err))
	}
	return nil, err
}

// lineBudget bounds how many lines an attempt writes to its log.
type lineBudget struct {
	mu     sync.Mutex
	n      int
	warned bool
}

func (b *lineBudget) take() (ok, first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	if b.n <= maxLogLines {
		return true, false
	}
	if !b.warned {
		b.warned = true
		return false, true
	}
	return false, false
}

// stream writes r's lines to logf (each cut to maxLineBytes) and keeps
// the end of it in tail when not nil. With progress set, a whole line
// that ParseProgress reads is reported there instead, neither logged nor
// kept in tail.
func stream(r io.Reader, budget *lineBudget, logf func(string, ...any), tail *tailBuffer, progress func(float64, string)) {
	br := bufio.NewReaderSize(r, maxLineBytes)
	whole := true // line starts a line (not the rest of one cut at maxLineBytes)
	for {
		line, err := br.ReadSlice('\n')
		start := whole
		whole = err != bufio.ErrBufferFull
		if progress != nil && start && whole && len(line) > 0 {
			if f, msg, ok := ParseProgress(string(line)); ok {
				progress(f, msg)
				line = nil
			}
		}
		if len(line) > 0 {
			if tail != nil {
				tail.Write(line)
			}
			if ok, first := budget.take(); ok {
				logf("%s", strings.TrimRight(string(line), "\r\n"))
			} else if first {
				logf("output beyond %d lines is not logged", maxLogLines)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return
		}
	}
}

// progressPrefix starts a progress line on a command's stdout.
const progressPrefix = "::progress "

// ParseProgress reads a progress line of a command's stdout: the prefix
// "::progress ", then either DONE/TOTAL (two non-negative integers,
// TOTAL > 0) or PERCENT% (a number from 0 to 100), then optionally a space
// and a message (cut to store.MaxProgressMessage bytes when stored):
//
//	::progress 40/100
//	::progress 3/7 copying files
//	::progress 62.5% compressing
//
// It returns the fraction done (clamped to [0, 1]) and the message, and
// ok false for any other line, which the executor logs as usual. The
// trailing newline (and a carriage return) is ignored.
func ParseProgress(line string) (fraction float64, message string, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimRight(line, "\r\n"), progressPrefix)
	if !found {
		return 0, "", false
	}
	rest = strings.TrimLeft(rest, " ")
	figure, message, _ := strings.Cut(rest, " ")
	message = strings.TrimSpace(message)
	if pct, isPct := strings.CutSuffix(figure, "%"); isPct {
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil || v < 0 || v > 100 || v != v {
			return 0, "", false
		}
		return v / 100, message, true
	}
	done, total, isRatio := strings.Cut(figure, "/")
	if !isRatio {
		return 0, "", false
	}
	d, err1 := strconv.ParseUint(done, 10, 63)
	n, err2 := strconv.ParseUint(total, 10, 63)
	if err1 != nil || err2 != nil || n == 0 {
		return 0, "", false
	}
	return min(float64(d)/float64(n), 1), message, true
}

// tailBuffer keeps the last outputTail bytes written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > outputTail {
		t.b = append(t.b[:0], t.b[len(t.b)-outputTail:]...)
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(string(t.b), "\uFFFD")
}
