package storetest

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// testMetadata pins Instance.Metadata: what Enqueue is given comes back,
// equal and as the store's own copy, from Lookup, from every Claim (a
// retry's too), from Rescue and after the instance finished, on every
// handle; an instance without metadata comes back without; metadata past
// the limits is ErrInvalid.
func testMetadata(t *testing.T, h Harness) {
	e := setup(t, h)
	md := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
		"empty":       "",
		"ключ":        "значение ✓",
		"with\x00nul": "a\x00b",
	}
	full := inst("md-full", "q-md")
	full.Metadata = maps.Clone(md)
	labeled := inst("md-labeled", "q-md-labeled")
	labeled.Labels = []string{"region=eu"}
	labeled.Metadata = map[string]string{"k": "v"}
	none := inst("md-none", "q-md")
	empty := inst("md-empty", "q-md")
	empty.Metadata = map[string]string{}
	// At the limits exactly: accepted.
	most := inst("md-most", "q-md-most")
	most.Metadata = map[string]string{}
	for i := range store.MaxMetadataPairs - 1 {
		most.Metadata[fmt.Sprintf("k%02d", i)] = "v"
	}
	used := (store.MaxMetadataPairs - 1) * 4
	most.Metadata["big"] = strings.Repeat("x", store.MaxMetadataBytes-used-len("big"))

	want := map[string]map[string]string{
		full.ID: md, labeled.ID: {"k": "v"}, none.ID: nil, empty.ID: nil, most.ID: maps.Clone(most.Metadata),
	}
	check := func(what string, in *store.Instance) {
		t.Helper()
		w, ok := want[in.ID]
		if !ok {
			t.Fatalf("%s: unexpected instance %s", what, in.ID)
		}
		if len(w) == 0 {
			if len(in.Metadata) != 0 {
				t.Fatalf("%s: instance %s has Metadata %q, want none", what, in.ID, in.Metadata)
			}
			return
		}
		if !maps.Equal(in.Metadata, w) {
			t.Fatalf("%s: instance %s has Metadata %q, want %q", what, in.ID, in.Metadata, w)
		}
	}
	e.enqueue(e.s, base, full, labeled, none, empty, most)
	// The store keeps its own copy: the caller's map may change.
	full.Metadata["traceparent"] = "changed"
	delete(full.Metadata, "tracestate")

	other := e.open()
	for _, id := range []string{full.ID, labeled.ID, none.ID, empty.ID, most.ID} {
		check("Lookup", e.get(e.s, id))
		check("Lookup on a second handle", e.get(other, id))
	}

	// Claim on another handle returns it; so does the next attempt's.
	c := e.claim(other, "q-md", "w1", 10, base)
	if len(c.Instances) != 3 {
		t.Fatalf("Claim returned %v, want md-full, md-none, md-empty", ids(c.Instances))
	}
	for _, in := range c.Instances {
		check("Claim", in)
		if in.ID == full.ID {
			in.Metadata["x"] = "changed by the caller"
		}
	}
	check("Lookup after a caller changed a claimed copy", e.get(e.s, full.ID))
	res, err := e.s.Claim(e.ctx, &store.ClaimParams{Queue: "q-md-labeled", Owner: "w2", Labels: []string{"region=eu"}, Limit: 1, Now: base, LeaseUntil: at(lease)})
	if err != nil || len(res.Instances) != 1 {
		t.Fatalf("Claim with the label: %v, %v; want md-labeled", res, err)
	}
	check("Claim with labels", res.Instances[0])
	e.finishOK(other, "w1", at(time.Second), store.Outcome{ID: full.ID, Attempt: 1, State: store.Scheduled, RunAt: at(2 * time.Second), Error: "retry"})
	check("Claim of the second attempt", e.claimOne(e.s, "q-md", "w3", at(2*time.Second), full.ID))

	// Rescue returns it, and the third attempt has it too.
	rescued := e.rescue(e.s, at(2*time.Second+lease+time.Second), 10)
	found := false
	for _, in := range rescued {
		if in.ID == full.ID {
			found = true
		}
		check("Rescue", in)
	}
	if !found {
		t.Fatalf("Rescue returned %v, want md-full among them", ids(rescued))
	}
	now := at(2*time.Second + lease + 2*time.Second)
	var in *store.Instance
	for _, c := range e.claim(e.s, "q-md", "w4", 10, now).Instances {
		check("Claim after rescue", c)
		if c.ID == full.ID {
			in = c
		}
	}
	if in == nil {
		t.Fatalf("Claim after rescue did not return md-full")
	}
	e.finishOK(e.s, "w4", now, store.Outcome{ID: full.ID, Attempt: in.Attempt, State: store.Completed})
	check("Lookup after completion", e.get(other, full.ID))
	c = e.claim(e.s, "q-md-most", "w5", 1, now)
	if len(c.Instances) != 1 {
		t.Fatalf("Claim of md-most returned %v", ids(c.Instances))
	}
	check("Claim at the limits", c.Instances[0])

	// Past the limits: the batch is refused.
	tooMany := map[string]string{}
	for i := range store.MaxMetadataPairs + 1 {
		tooMany[fmt.Sprintf("k%02d", i)] = ""
	}
	for name, bad := range map[string]map[string]string{
		"too many pairs": tooMany,
		"too many bytes": {"big": strings.Repeat("x", store.MaxMetadataBytes-len("big")+1)},
		"an empty key":   {"": "v"},
		"invalid UTF-8":  {"k": "\xff"},
	} {
		b := inst("md-bad", "q-md-bad")
		b.Metadata = bad
		good := inst("md-good", "q-md-bad")
		_, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{good, b}, Now: base})
		wantErr(t, "Enqueue of metadata with "+name, err, store.ErrInvalid)
		e.absent(e.s, "md-good")
	}
}
