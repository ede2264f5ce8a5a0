package executors_test

import (
	"bufio"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/internal/xtest"
	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/store"
)

// docConfigs returns the JSON configs doc/executors.md marks with
// <!-- executor: TYPE -->, by type.
func docConfigs(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../doc/executors.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	var typ, block string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- executor: "):
			typ = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- executor: "), " -->")
		case typ != "" && line == "```json":
			in, block = true, ""
		case in && line == "```":
			out[typ], typ, in = block, "", false
		case in:
			block += line + "\n"
		}
	}
	return out
}

// TestDocExamples: every config doc/executors.md shows is accepted by its
// type, and the command example runs.
func TestDocExamples(t *testing.T) {
	cfgs := docConfigs(t)
	for _, typ := range store.ExecutorTypes {
		if cfgs[typ] == "" {
			t.Fatalf("doc/executors.md has no <!-- executor: %s --> config", typ)
		}
	}
	mods, err := wasm.NewDirModules(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := wasm.New(wasm.Options{Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	cmd := command.New(command.Options{Allow: []string{"/bin/echo"}})
	for typ, et := range map[string]job.ExecutorType{store.ExecutorWebhook: webhook.New(webhook.Options{}), store.ExecutorCommand: cmd, store.ExecutorWasm: wt} {
		d := &job.Definition{Kind: "doc", Executor: &store.ExecutorSpec{Type: typ, Config: json.RawMessage(cfgs[typ])}}
		if _, err := et.New(d); err != nil {
			t.Errorf("the %s config of doc/executors.md: %v", typ, err)
		}
	}
	m := xtest.Manager(t, cmd)
	var c map[string]any
	if err := json.Unmarshal([]byte(cfgs[store.ExecutorCommand]), &c); err != nil {
		t.Fatal(err)
	}
	xtest.Define(t, m, "backup", store.ExecutorCommand, c, 0, 0)
	inst := xtest.Run(t, m, "backup", "orders")
	var res command.Result
	if inst.State != job.Completed || inst.ResultsInto(&res) != nil || res.Output != "backing up orders\n" {
		t.Fatalf("the command example: state %v error %v result %+v", inst.State, inst.Error, res)
	}
}
