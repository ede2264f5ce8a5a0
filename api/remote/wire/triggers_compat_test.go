package wire_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jobkit/job/api/remote/wire"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// A remote store of a release before triggers were documents sends
// PutTrigger, GetTrigger, ListTriggers and DeleteTrigger: jobd applies
// them to the documents of store.TriggerCollection, where the upgraded
// engine reads its triggers.
func TestOldRemoteTriggerCalls(t *testing.T) {
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	call := func(name string, params any) any {
		t.Helper()
		b, err := json.Marshal(params)
		if err != nil {
			t.Fatal(err)
		}
		p, err := wire.Decode(name, b)
		if err != nil {
			t.Fatalf("Decode %s: %v", name, err)
		}
		r, err := wire.Apply(ctx, st, name, p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	put := call("PutTrigger", &store.PutTriggerParams{Trigger: &store.Trigger{Name: "nightly", Kind: "report", Cron: "0 3 * * *"}, Now: now}).(*store.Trigger)
	doc, err := st.GetDocument(ctx, store.TriggerCollection, "nightly")
	if err != nil {
		t.Fatalf("the old PutTrigger call stored no document: %v", err)
	}
	if doc.Version != put.Version || !doc.CreatedAt.Equal(now) {
		t.Errorf("document version %d created %v; want %d and %v", doc.Version, doc.CreatedAt, put.Version, now)
	}
	if got := call("GetTrigger", "nightly").(*store.Trigger); got.Kind != "report" || got.Cron != "0 3 * * *" {
		t.Errorf("GetTrigger: %+v", got)
	}
	if page := call("ListTriggers", &store.ListTriggersParams{}).(*store.TriggerPage); len(page.Triggers) != 1 || page.Triggers[0].Name != "nightly" {
		t.Errorf("ListTriggers: %+v", page)
	}
	call("DeleteTrigger", &store.DeleteTriggerParams{Name: "nightly"})
	if _, err := store.TriggersIn(st).GetTrigger(ctx, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after the old DeleteTrigger call: %v, want ErrNotFound", err)
	}
}
