package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// The executor definitions pages (issue 22): a list of the definitions
// that name a built-in executor type (webhook, command, wasm) with each
// one's last run, a form per type to create and edit them, checked by the
// server (DefinitionService's validate_only, the path a save takes) before
// saving, and a test run that schedules one instance and shows its
// outcome live.

// executorTypes are the built-in executor types, in the order shown.
var executorTypes = []string{"webhook", "command", "wasm"}

// maxModuleUpload bounds a Wasm module uploaded through the form (jobd
// has its own, usually lower, limit: --wasm-max-module-mb).
const maxModuleUpload = 64 << 20

// logTail is how many of a test run's last log lines the page shows.
const logTail = 20

// executorRoutes registers the executor definitions pages.
func (c *Console) executorRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /executors", c.executorsPage)
	m.HandleFunc("GET /executors/new", c.newExecutorPage)
	m.HandleFunc("POST /executors/new", c.saveExecutor)
	m.HandleFunc("GET /executors/{kind}", c.executorPage)
	m.HandleFunc("POST /executors/{kind}", c.saveExecutor)
	m.HandleFunc("POST /executors/{kind}/test", c.testExecutor)
}

// The pages and template helpers of this file, added to pages.go's.
func init() {
	pageNames = append(pageNames, "executors", "executor")
	funcs["formField"] = formField
	funcs["methods"] = func() []string { return []string{"POST", "GET", "PUT", "PATCH", "DELETE", "HEAD"} }
}

// fieldView is one input of the executor form.
type fieldView struct {
	Name, Label, Value, Placeholder, Error string
}

// formField returns the view of form field name of page p.
func formField(p execPage, name, label, value, placeholder string) fieldView {
	return fieldView{Name: name, Label: label, Value: value, Placeholder: placeholder, Error: p.Errors[name]}
}

// execForm is an executor definition form as typed: every field a string
// (or a checkbox), so a refused form is shown again as it was sent.
type execForm struct {
	Type    string
	Version int64
	// The definition's policy.
	Kind, Queue, Labels, Retries, Timeout, Description string
	// webhook
	Method, URL, Headers, Body, XTimeout, SecretRef, MaxResponse string
	Unsigned                                                     bool
	// command
	Argv, Env, EnvSecrets, Dir, Grace, ExitCodes string
	Shell, AppendArgs                            bool
	// wasm (XTimeout, Env too)
	Module, MemoryMB, Args string
	// base is the stored config: its fields the form does not show (a
	// wasm definition's mounts, say) are kept.
	base map[string]json.RawMessage
}

// formOf fills a form from a stored definition.
func formOf(d *pb.Definition) execForm {
	f := execForm{
		Type: d.GetExecutor().GetType(), Version: d.GetVersion(), Kind: d.GetKind(), Queue: d.GetQueue(),
		Labels: strings.Join(d.GetLabels(), ", "), Retries: strconv.Itoa(int(d.GetMaxRetries())),
		Timeout: durText(d.GetTimeout()), Description: d.GetDescription(), base: map[string]json.RawMessage{},
	}
	_ = json.Unmarshal([]byte(d.GetExecutor().GetConfigJson()), &f.base)
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(f.base[k], &s)
		return s
	}
	flag := func(k string) bool {
		var b bool
		_ = json.Unmarshal(f.base[k], &b)
		return b
	}
	num := func(k string) string {
		if v, ok := f.base[k]; ok {
			return string(v)
		}
		return ""
	}
	lines := func(k string) string {
		var l []string
		_ = json.Unmarshal(f.base[k], &l)
		return strings.Join(l, "\n")
	}
	pairs := func(k, sep string) string {
		var m map[string]string
		_ = json.Unmarshal(f.base[k], &m)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k + sep + m[k] + "\n")
		}
		return b.String()
	}
	switch f.Type {
	case "webhook":
		f.Method, f.URL, f.Body, f.XTimeout, f.SecretRef = str("method"), str("url"), str("body"), str("timeout"), str("secret_ref")
		f.Headers, f.Unsigned, f.MaxResponse = pairs("headers", ": "), flag("unsigned"), num("max_response_bytes")
	case "command":
		f.Argv, f.Env, f.EnvSecrets, f.Dir, f.Grace = lines("argv"), pairs("env", "="), pairs("env_secrets", "="), str("dir"), str("grace")
		f.Shell, f.AppendArgs = flag("shell"), flag("append_args")
		var codes []int
		_ = json.Unmarshal(f.base["permanent_exit_codes"], &codes)
		parts := make([]string, len(codes))
		for i, c := range codes {
			parts[i] = strconv.Itoa(c)
		}
		f.ExitCodes = strings.Join(parts, ", ")
	case "wasm":
		f.Module, f.MemoryMB, f.XTimeout, f.Args, f.Env = str("module"), num("memory_mb"), str("timeout"), lines("args"), pairs("env", "=")
	}
	return f
}

// formFrom reads a posted form; base is the stored config (nil: none).
func formFrom(r *http.Request, base map[string]json.RawMessage) execForm {
	v := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	raw := func(k string) string { return strings.ReplaceAll(r.PostFormValue(k), "\r\n", "\n") }
	on := func(k string) bool { return r.PostFormValue(k) != "" }
	f := execForm{
		Type: v("type"), Kind: v("kind"), Queue: v("queue"), Labels: v("labels"), Retries: v("retries"), Timeout: v("timeout"),
		Description: v("description"),
		Method:      v("method"), URL: v("url"), Headers: raw("headers"), Body: raw("body"), XTimeout: v("xtimeout"),
		SecretRef: v("secret_ref"), MaxResponse: v("max_response_bytes"), Unsigned: on("unsigned"),
		Argv: raw("argv"), Env: raw("env"), EnvSecrets: raw("env_secrets"), Dir: v("dir"), Grace: v("grace"),
		ExitCodes: v("permanent_exit_codes"), Shell: on("shell"), AppendArgs: on("append_args"),
		Module: v("module"), MemoryMB: v("memory_mb"), Args: raw("args"), base: base,
	}
	f.Version, _ = strconv.ParseInt(v("version"), 10, 64)
	return f
}

// fieldErrors are a form's errors by field name ("" for the form).
type fieldErrors map[string]string

// add keeps the first error of a field.
func (e fieldErrors) add(field, msg string) {
	if _, ok := e[field]; !ok {
		e[field] = msg
	}
}

// definition builds the definition the form describes, or returns the
// errors found reading it (text the server would not understand).
func (f execForm) definition() (*pb.Definition, fieldErrors) {
	errs := fieldErrors{}
	d := &pb.Definition{Kind: f.Kind, Queue: f.Queue, Description: f.Description}
	for l := range strings.SplitSeq(f.Labels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			d.Labels = append(d.Labels, l)
		}
	}
	if f.Retries != "" {
		n, err := strconv.ParseInt(f.Retries, 10, 32)
		if err != nil {
			errs.add("retries", fmt.Sprintf("%q is not a whole number: give 0 or more, or -1 to retry forever", f.Retries))
		}
		d.MaxRetries = int32(n)
	}
	var err error
	if d.Timeout, err = parseDelay("timeout", f.Timeout); err != nil {
		errs.add("timeout", err.Error())
	}
	c := configForm{cfg: map[string]json.RawMessage{}, errs: errs}
	for k, v := range f.base {
		c.cfg[k] = v
	}
	switch f.Type {
	case "webhook":
		f.webhookConfig(&c)
	case "command":
		f.commandConfig(&c)
	case "wasm":
		f.wasmConfig(&c)
	default:
		errs.add("", fmt.Sprintf("executor type %q; choose webhook, command or wasm", f.Type))
	}
	cfg := c.cfg
	b, _ := json.Marshal(cfg)
	d.Executor = &pb.ExecutorSpec{Type: f.Type, ConfigJson: string(b)}
	if len(errs) > 0 {
		return d, errs
	}
	return d, nil
}

// configForm builds an executor's JSON config from a form's fields onto
// the config stored before (base): a field left empty removes its key.
type configForm struct {
	cfg  map[string]json.RawMessage
	errs fieldErrors
}

func (c *configForm) set(k string, v any, empty bool) {
	if empty {
		delete(c.cfg, k)
		return
	}
	c.cfg[k], _ = json.Marshal(v)
}

func (c *configForm) str(k, v string)       { c.set(k, v, v == "") }
func (c *configForm) flag(k string, v bool) { c.set(k, v, !v) }

// formLines are the lines of v that hold more than blanks, trailing
// blanks cut.
func formLines(v string) []string {
	var out []string
	for l := range strings.SplitSeq(v, "\n") {
		if l = strings.TrimRight(l, " \t"); strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// pairs reads the lines of v as key sep value, one a line; a line that is
// not is an error of field, which names what to write (want).
func (c *configForm) pairs(field, v, sep, want string) map[string]string {
	m := map[string]string{}
	for i, l := range formLines(v) {
		k, val, ok := strings.Cut(l, sep)
		if !ok || strings.TrimSpace(k) == "" {
			c.errs.add(field, fmt.Sprintf("line %d (%q): write %s, one a line", i+1, l, want))
			continue
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m
}

// setPairs sets key k to the pairs of v (see pairs), or removes it when
// there are none.
func (c *configForm) setPairs(k, v, sep, want string) {
	m := c.pairs(k, v, sep, want)
	c.set(k, m, len(m) == 0)
}

// setLines sets key k to the lines of v, or removes it when there are none.
func (c *configForm) setLines(k, v string) {
	l := formLines(v)
	c.set(k, l, len(l) == 0)
}

func (c *configForm) number(field, k, v string) {
	if v == "" {
		delete(c.cfg, k)
		return
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		c.errs.add(field, fmt.Sprintf("%q is not a whole number", v))
		return
	}
	c.cfg[k], _ = json.Marshal(n)
}

func (f execForm) webhookConfig(c *configForm) {
	c.str("method", strings.ToUpper(f.Method))
	c.str("url", f.URL)
	c.setPairs("headers", f.Headers, ":", "Name: value")
	c.set("body", f.Body, strings.TrimSpace(f.Body) == "")
	c.str("timeout", f.XTimeout)
	c.str("secret_ref", f.SecretRef)
	c.flag("unsigned", f.Unsigned)
	c.number("max_response_bytes", "max_response_bytes", f.MaxResponse)
}

func (f execForm) commandConfig(c *configForm) {
	c.setLines("argv", f.Argv)
	c.setPairs("env", f.Env, "=", "NAME=value")
	c.setPairs("env_secrets", f.EnvSecrets, "=", "NAME=secret-name")
	c.str("dir", f.Dir)
	c.str("grace", f.Grace)
	c.flag("shell", f.Shell)
	c.flag("append_args", f.AppendArgs)
	var codes []int
	for p := range strings.SplitSeq(f.ExitCodes, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			c.errs.add("permanent_exit_codes", fmt.Sprintf("%q is not an exit code: list whole numbers from 1 to 255, such as 2, 64", p))
			continue
		}
		codes = append(codes, n)
	}
	c.set("permanent_exit_codes", codes, len(codes) == 0)
}

func (f execForm) wasmConfig(c *configForm) {
	c.str("module", f.Module)
	c.number("memory_mb", "memory_mb", f.MemoryMB)
	c.str("timeout", f.XTimeout)
	c.setLines("args", f.Args)
	c.setPairs("env", f.Env, "=", "NAME=value")
}

// fieldPrefixes name the form field a server message is about: after
// "invalid config: ", the executor's messages start with the config field
// they are about (executors/webhook, command, wasm).
var fieldPrefixes = map[string][][2]string{
	"webhook": {{"template url", "url"}, {"no url", "url"}, {"url", "url"}, {"method", "method"},
		{"template header", "headers"}, {"header", "headers"}, {"template body", "body"}, {"body", "body"},
		{"timeout", "xtimeout"}, {"max_response_bytes", "max_response_bytes"}, {"secret_ref", "secret_ref"}},
	"command": {{"no argv", "argv"}, {"argv", "argv"}, {"template argv", "argv"}, {"env_secrets", "env_secrets"},
		{"environment variable", "env"}, {"dir", "dir"}, {"grace", "grace"}, {"permanent exit code", "permanent_exit_codes"}},
	"wasm": {{"module", "module"}, {"memory_mb", "memory_mb"}, {"timeout", "xtimeout"}, {"env", "env"}, {"args", "args"}},
}

// policyPhrases name the policy field a definition's own error is about.
var policyPhrases = [][2]string{{"max retries", "retries"}, {"label", "labels"}, {"no queue", "queue"}, {"queue", "queue"},
	{"negative timeout", "timeout"}, {"description", "description"}, {"kind", "kind"}}

// fieldOf returns the form field a server's refusal of a definition of
// type typ is about, "" when it names none.
func fieldOf(typ, msg string) string {
	if _, rest, ok := strings.Cut(msg, "invalid config: "); ok {
		for _, p := range fieldPrefixes[typ] {
			if strings.HasPrefix(rest, p[0]) {
				return p[1]
			}
		}
		return ""
	}
	if strings.Contains(msg, "wasm_module") || strings.Contains(msg, "invalid module") {
		return "module"
	}
	low := strings.ToLower(msg)
	for _, p := range policyPhrases {
		if strings.Contains(low, p[0]) {
			return p[1]
		}
	}
	return ""
}

// refusal turns an API error about a definition into form errors; ok is
// false for errors that are not about the form (permissions, an
// unreachable server), which fail the page instead.
func refusal(typ string, err error) (fieldErrors, bool) {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodeFailedPrecondition, connect.CodeNotFound:
	default:
		return nil, false
	}
	msg := apiMessage(err)
	errs := fieldErrors{"": msg}
	if f := fieldOf(typ, msg); f != "" {
		// At the field, only what the executor says of it.
		short := msg
		if _, rest, ok := strings.Cut(msg, "invalid config: "); ok {
			short = rest
		}
		errs[f] = short
	}
	return errs, true
}

// runView is a test run (or the last run) of a definition as the page
// shows it.
type runView struct {
	I        *pb.Instance
	Final    bool
	Outcome  string // one line: "200 OK", "exit code 0", "terminated: …"
	Status   int    // webhook
	Headers  [][2]string
	Body     string
	Trunc    bool
	ExitCode *int   // command
	Output   string // command stdout tail, wasm result
	Result   string // the result JSON, pretty, when not shown otherwise
	Logs     []*pb.LogRecord
	MoreLogs bool
}

// outcome reads instance in's result for an executor of type typ.
func outcome(typ string, in *pb.Instance) *runView {
	v := &runView{I: in, Final: in.GetState() >= pb.State_STATE_COMPLETED}
	var results []json.RawMessage
	first := json.RawMessage(in.GetResultJson())
	if json.Unmarshal(first, &results) == nil && len(results) > 0 {
		first = results[0]
	}
	switch {
	case in.GetState() == pb.State_STATE_COMPLETED && typ == "webhook":
		var r struct {
			Status    int               `json:"status"`
			Headers   map[string]string `json:"headers"`
			Body      string            `json:"body"`
			Truncated bool              `json:"truncated"`
		}
		if json.Unmarshal(first, &r) == nil && r.Status != 0 {
			v.Status, v.Body, v.Trunc = r.Status, r.Body, r.Truncated
			for k, val := range r.Headers {
				v.Headers = append(v.Headers, [2]string{k, val})
			}
			slices.SortFunc(v.Headers, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
			v.Outcome = fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status))
		}
	case in.GetState() == pb.State_STATE_COMPLETED && typ == "command":
		var r struct {
			ExitCode int    `json:"exit_code"`
			Output   string `json:"output"`
		}
		if json.Unmarshal(first, &r) == nil {
			v.ExitCode, v.Output = &r.ExitCode, r.Output
			v.Outcome = fmt.Sprintf("exit code %d", r.ExitCode)
		}
	case in.GetState() == pb.State_STATE_COMPLETED:
		v.Output = pretty(string(first))
		v.Outcome = "completed"
	}
	if v.Outcome == "" {
		v.Outcome = stateName(in.GetState())
		if e := in.GetError(); e != "" {
			line, _, _ := strings.Cut(e, "\n")
			if len(line) > 160 {
				line = line[:160] + "…"
			}
			v.Outcome += ": " + line
		}
	}
	if v.Status == 0 && v.ExitCode == nil && v.Output == "" && in.GetResultJson() != "" {
		v.Result = pretty(in.GetResultJson())
	}
	return v
}

// executorRow is a line of the executors list.
type executorRow struct {
	D    *pb.Definition
	Last *runView
}

// executorDefinitions returns the stored definitions that name an
// executor type.
func executorDefinitions(r *http.Request, s *session) ([]*pb.Definition, error) {
	var out []*pb.Definition
	token := ""
	for range 10 {
		res, err := s.api.defs.ListDefinitions(r.Context(), connect.NewRequest(&pb.ListDefinitionsRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, err
		}
		for _, d := range res.Msg.GetDefinitions() {
			if d.GetExecutor() != nil {
				out = append(out, d)
			}
		}
		if token = res.Msg.GetNextPageToken(); token == "" {
			break
		}
	}
	return out, nil
}

// lastRun returns the newest instance of kind, nil when none.
func lastRun(r *http.Request, s *session, kind string) (*pb.Instance, error) {
	res, err := s.api.jobs.ListInstances(r.Context(), connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{Kind: kind}, PageSize: 1}))
	if err != nil {
		return nil, err
	}
	if ins := res.Msg.GetInstances(); len(ins) > 0 {
		return ins[0], nil
	}
	return nil, nil
}

// executorsPage lists the executor definitions with each one's last run.
func (c *Console) executorsPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	defs, err := executorDefinitions(r, s)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	rows := make([]executorRow, len(defs))
	for i, d := range defs {
		rows[i].D = d
		in, err := lastRun(r, s, d.GetKind())
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		if in != nil {
			rows[i].Last = outcome(d.GetExecutor().GetType(), in)
		}
	}
	c.render(w, r, s, "executors", http.StatusOK, map[string]any{"Rows": rows, "Types": executorTypes})
}

// execPage is what the form page shows.
type execPage struct {
	New    bool
	F      execForm
	D      *pb.Definition // the stored one (nil: new)
	Errors fieldErrors
	// Checked is the config as the server would store it, after a check
	// that passed.
	Checked string
	Run     *runView
	Types   []string
}

// newExecutorPage shows the create form of a type (?type=webhook).
func (c *Console) newExecutorPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	typ := r.URL.Query().Get("type")
	if !slices.Contains(executorTypes, typ) {
		typ = "webhook"
	}
	f := execForm{Type: typ, Queue: "default", Retries: "0"}
	if typ == "webhook" {
		f.Method = "POST"
	}
	c.render(w, r, s, "executor", http.StatusOK, execPage{New: true, F: f, Types: executorTypes})
}

// executorPage shows a definition's form (admins), its test-run form
// (operators) and its last run (or the run ?run= names), live.
func (c *Console) executorPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	got, err := s.api.defs.GetDefinition(r.Context(), connect.NewRequest(&pb.GetDefinitionRequest{Kind: r.PathValue("kind")}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	d := got.Msg.GetDefinition()
	if d.GetExecutor() == nil {
		// A Go kind's policy: its own form.
		http.Redirect(w, r, c.path("/definitions/"+url.PathEscape(d.GetKind())+"/edit"), http.StatusSeeOther)
		return
	}
	p := execPage{F: formOf(d), D: d, Types: executorTypes}
	if p.Run, err = c.runOf(r, s, d); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, s, "executor", http.StatusOK, p)
}

// runOf returns the run the page shows: ?run=ID, or the kind's newest.
func (c *Console) runOf(r *http.Request, s *session, d *pb.Definition) (*runView, error) {
	var in *pb.Instance
	if id := r.URL.Query().Get("run"); id != "" {
		got, err := s.api.jobs.GetInstance(r.Context(), connect.NewRequest(&pb.GetInstanceRequest{Id: id}))
		if err != nil {
			return nil, err
		}
		in = got.Msg.GetInstance()
		if in.GetKind() != d.GetKind() {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("instance %s is of kind %s, not %s", id, in.GetKind(), d.GetKind()))
		}
	} else {
		var err error
		if in, err = lastRun(r, s, d.GetKind()); err != nil || in == nil {
			return nil, err
		}
	}
	v := outcome(d.GetExecutor().GetType(), in)
	logs, err := s.api.jobs.ListLogs(r.Context(), connect.NewRequest(&pb.ListLogsRequest{InstanceId: in.GetId(), PageSize: 1000}))
	if err != nil {
		return nil, err
	}
	v.Logs = logs.Msg.GetRecords()
	if len(v.Logs) > logTail {
		v.Logs, v.MoreLogs = v.Logs[len(v.Logs)-logTail:], true
	}
	return v, nil
}

// saveExecutor checks (action "check") or saves (action "save") the
// create form (POST /executors/new) or the edit form of a definition
// (POST /executors/{kind}). Either way the server checks the definition
// first, with validate_only; its refusal is shown at the field it names.
func (c *Console) saveExecutor(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxModuleUpload+1<<20)
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	ctx, kind := r.Context(), r.PathValue("kind")
	var stored *pb.Definition
	var base map[string]json.RawMessage
	if kind != "" {
		got, err := s.api.defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: kind}))
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		stored = got.Msg.GetDefinition()
		base = formOf(stored).base
	}
	f := formFrom(r, base)
	if stored != nil {
		// The kind and type of a stored definition are not the form's to
		// change.
		f.Kind, f.Type = stored.GetKind(), stored.GetExecutor().GetType()
	}
	p := execPage{New: stored == nil, F: f, D: stored, Types: executorTypes}
	d, errs := f.definition()
	module, err := formModule(r)
	if err != nil {
		if errs == nil {
			errs = fieldErrors{}
		}
		errs.add("module", err.Error())
	}
	if errs == nil && module != nil && f.Type != "wasm" {
		errs = fieldErrors{"module": "a module goes with the wasm type only"}
	}
	if errs != nil {
		errs.add("", "The form has errors: fix the fields marked below.")
		p.Errors = errs
		c.render(w, r, s, "executor", http.StatusBadRequest, p)
		return
	}
	// refused shows err at the field it is about, or fails the page.
	refused := func(err error) {
		errs, ok := refusal(f.Type, err)
		if !ok {
			c.fail(w, r, s, err)
			return
		}
		p.Errors = errs
		c.render(w, r, s, "executor", http.StatusBadRequest, p)
	}
	// Checked first, by the server, the way the save will be.
	var checked *pb.Definition
	if stored == nil {
		res, err := s.api.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: d, WasmModule: module, ValidateOnly: true}))
		if err != nil {
			refused(err)
			return
		}
		checked = res.Msg.GetDefinition()
	} else {
		res, err := s.api.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: d, WasmModule: module, ValidateOnly: true}))
		if err != nil {
			refused(err)
			return
		}
		checked = res.Msg.GetDefinition()
	}
	if r.PostFormValue("action") != "save" {
		p.Checked = pretty(checked.GetExecutor().GetConfigJson())
		c.render(w, r, s, "executor", http.StatusOK, p)
		return
	}
	if stored == nil {
		_, err = s.api.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: d, WasmModule: module}))
	} else {
		_, err = s.api.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: d, WasmModule: module, IfVersion: f.Version}))
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			err = connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("definition %s was %w (version %d is no longer the stored one): open it again to see the change, then edit", kind, errChanged, f.Version))
		}
	}
	if err != nil {
		refused(err)
		return
	}
	c.bus.publish(s.ns)
	c.back(w, r, "/executors/"+d.GetKind(), "Definition "+d.GetKind()+" saved.")
}

// formModule returns the module file of a multipart form, nil when none.
func formModule(r *http.Request) ([]byte, error) {
	if r.MultipartForm == nil {
		return nil, nil
	}
	file, hdr, err := r.FormFile("module_file")
	if errors.Is(err, http.ErrMissingFile) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the uploaded module: %v", err)
	}
	defer file.Close()
	if hdr.Size == 0 {
		return nil, nil
	}
	if hdr.Size > maxModuleUpload {
		return nil, fmt.Errorf("the module has %d bytes; the console takes at most %d MiB (and jobd its --wasm-max-module-mb)", hdr.Size, maxModuleUpload>>20)
	}
	return io.ReadAll(io.LimitReader(file, maxModuleUpload))
}

// testExecutor schedules one instance of a definition with the form's
// JSON arguments and shows it on the definition's page as it runs.
func (c *Console) testExecutor(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	kind, args := r.PathValue("kind"), strings.TrimSpace(r.PostFormValue("args"))
	if err := checkArgs(args); err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	res, err := s.api.jobs.Schedule(r.Context(), connect.NewRequest(&pb.ScheduleRequest{Kind: kind, ArgsJson: args}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	id := res.Msg.GetInstance().GetId()
	c.back(w, r, "/executors/"+kind+"?run="+id+"#run", "Test run "+id+" scheduled.")
}
