package storetest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testDefinitionsExecutor: a definition's executor spec (issue 22) is
// kept byte for byte, in the canonical form Validate gives it, through
// create, read, update, list and a second store handle; an invalid spec
// stores nothing.
func testDefinitionsExecutor(t *testing.T, h Harness) {
	e := setup(t, h)
	d := def("hook")
	// Whitespace, keys out of order, and <, > and & in strings: the
	// canonical form is compact, keys sorted, those escaped.
	d.Executor = &store.ExecutorSpec{Type: store.ExecutorWebhook, Config: json.RawMessage(`{ "url": "https://hooks.example.com/x?a=1&b=<2>",
		"method": "POST", "secret_ref": "hook-key", "headers": {"X-A": "ü"}, "n": 3 }`)}
	canon := `{"headers":{"X-A":"ü"},"method":"POST","n":3,"secret_ref":"hook-key","url":"https://hooks.example.com/x?a=1\u0026b=\u003c2\u003e"}`
	got := e.putDef(e.s, d, 0, at(time.Second))
	want := def("hook")
	want.Executor = &store.ExecutorSpec{Type: store.ExecutorWebhook, Config: json.RawMessage(canon)}
	want = stored(want, 1, at(time.Second), at(time.Second))
	checkRecord(t, "created definition with an executor", want, got)
	checkRecord(t, "read definition with an executor", want, e.getDef(e.s, "hook"))
	if c := string(e.getDef(e.s, "hook").Executor.Config); c != canon {
		t.Fatalf("stored executor config\n%s\nwant byte for byte\n%s", c, canon)
	}
	// The returned record is a copy.
	got.Executor.Config[0], got.Executor.Type = ' ', "changed"
	checkRecord(t, "definition after changing a returned copy", want, e.getDef(e.s, "hook"))

	// Another handle on the same namespace reads it, and lists it.
	other := e.open()
	checkRecord(t, "definition read through another handle", want, e.getDef(other, "hook"))
	if l := e.listDefs(other, "", 0); len(l) != 1 || l[0].Executor == nil || string(l[0].Executor.Config) != canon {
		t.Fatalf("ListDefinitions through another handle: %+v, want the definition with its executor", l)
	}

	// Update to another type, without config; then drop the executor.
	upd := def("hook")
	upd.Executor = &store.ExecutorSpec{Type: store.ExecutorCommand}
	got = e.putDef(e.s, upd, 1, at(2*time.Second))
	checkRecord(t, "definition updated to a command executor", stored(upd, 2, at(time.Second), at(2*time.Second)), got)
	got = e.putDef(e.s, def("hook"), 2, at(3*time.Second))
	if got.Executor != nil || e.getDef(e.s, "hook").Executor != nil {
		t.Fatalf("executor kept after an update without one: %+v", got.Executor)
	}

	bad := []struct {
		name string
		x    *store.ExecutorSpec
	}{
		{"unknown executor type", &store.ExecutorSpec{Type: "shell"}},
		{"empty executor type", &store.ExecutorSpec{Config: json.RawMessage(`{}`)}},
		{"config not JSON", &store.ExecutorSpec{Type: store.ExecutorWasm, Config: json.RawMessage(`{"a":`)}},
		{"config not an object", &store.ExecutorSpec{Type: store.ExecutorWasm, Config: json.RawMessage(`["a"]`)}},
		{"config over the limit", &store.ExecutorSpec{Type: store.ExecutorWasm, Config: json.RawMessage(`{"a":"` + strings.Repeat("x", store.MaxExecutorConfigBytes) + `"}`)}},
	}
	for _, tc := range bad {
		b := def("bad-exec")
		b.Executor = tc.x
		_, err := e.s.PutDefinition(e.ctx, &store.PutDefinitionParams{Definition: b, IfVersion: store.AnyVersion, Now: at(4 * time.Second)})
		wantErr(t, tc.name, err, store.ErrInvalid)
	}
	e.noDef(e.s, "bad-exec")
}
