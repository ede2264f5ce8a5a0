package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// triggerTests are the checks of store.Triggers on the plugin's
// Documents (store.TriggersIn); Run runs each as its own
// parallel sub-test.
var triggerTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"TriggerCRUD", testTriggerCRUD},
	{"TriggerCompareAndSet", testTriggerCAS},
	{"TriggerInvalid", testTriggerInvalid},
	{"TriggerPaging", testTriggerPaging},
	{"TriggerTwoHandles", testTriggerTwoHandles},
	{"TriggerNamespaces", testTriggerNamespaces},
}

// runTriggers runs the trigger checks as sub-tests of t.
func runTriggers(t *testing.T, h Harness) {
	for _, tc := range triggerTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

// trig returns a valid trigger with every user field set.
func trig(name string) *store.Trigger {
	return &store.Trigger{
		Name:          name,
		Kind:          "kind-a",
		Args:          []byte(`[1,"two"]`),
		Cron:          "*/5 * * * *",
		TimeZone:      "Europe/Paris",
		Overlap:       store.OverlapForbid,
		Missed:        store.MissedCatchUpOnce,
		CatchUpWithin: 90 * time.Second,
	}
}

// sameTrigger fails t unless got equals want in every field but the
// store-assigned Version and times, which it checks apart.
func sameTrigger(t *testing.T, what string, got, want *store.Trigger) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s: nil trigger", what)
	}
	g, w := got.Clone(), want.Clone()
	g.Version, w.Version = 0, 0
	g.CreatedAt, w.CreatedAt, g.UpdatedAt, w.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if !g.LastTick.Equal(w.LastTick) || !g.LastSkipped.Equal(w.LastSkipped) {
		t.Fatalf("%s: tick state %v/%v, want %v/%v", what, g.LastTick, g.LastSkipped, w.LastTick, w.LastSkipped)
	}
	g.LastTick, w.LastTick, g.LastSkipped, w.LastSkipped = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if len(g.Args) == 0 {
		g.Args = nil
	}
	if len(w.Args) == 0 {
		w.Args = nil
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, g, w)
	}
}

func testTriggerCRUD(t *testing.T, h Harness) {
	e := setup(t, h)
	s := store.TriggersIn(e.s)
	if _, err := s.GetTrigger(e.ctx, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTrigger of a missing trigger: %v, want ErrNotFound", err)
	}
	want := trig("nightly")
	put, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: want, Now: at(0)})
	if err != nil {
		t.Fatalf("PutTrigger: %v", err)
	}
	if put.Version == 0 || !put.CreatedAt.Equal(at(0)) || !put.UpdatedAt.Equal(at(0)) {
		t.Fatalf("stored trigger: version %d, created %v, updated %v; want a version and both at %v", put.Version, put.CreatedAt, put.UpdatedAt, at(0))
	}
	sameTrigger(t, "PutTrigger's result", put, want)
	got, err := s.GetTrigger(e.ctx, "nightly")
	if err != nil {
		t.Fatalf("GetTrigger: %v", err)
	}
	sameTrigger(t, "GetTrigger", got, want)
	if got.Version != put.Version || !got.CreatedAt.Equal(at(0)) {
		t.Fatalf("GetTrigger: version %d created %v, want %d and %v", got.Version, got.CreatedAt, put.Version, at(0))
	}
	// The result is a copy.
	got.Args[0] = 'X'
	if again, _ := s.GetTrigger(e.ctx, "nightly"); string(again.Args) != `[1,"two"]` {
		t.Fatalf("changing a returned trigger changed the stored one: args %s", again.Args)
	}

	// A trigger of a workflow template keeps its template and parameters.
	wt := trig("nightly-pipeline")
	wt.Kind, wt.Args = "", nil
	wt.Workflow, wt.Params = "images", []byte(`{"url":"https://example.org/a.png","width":64}`)
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: wt, Now: at(0)}); err != nil {
		t.Fatalf("PutTrigger of a workflow template's trigger: %v", err)
	}
	gotWT, err := s.GetTrigger(e.ctx, "nightly-pipeline")
	if err != nil {
		t.Fatalf("GetTrigger of a workflow template's trigger: %v", err)
	}
	sameTrigger(t, "GetTrigger of a workflow template's trigger", gotWT, wt)
	if err := s.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "nightly-pipeline"}); err != nil {
		t.Fatalf("DeleteTrigger: %v", err)
	}

	// Update: engine state and a pause, kept with their precision.
	upd := got.Clone()
	upd.Args = []byte(`[1,"two"]`)
	upd.Paused = true
	upd.LastTick = at(5 * time.Minute)
	upd.LastInstanceID = "0190a2b3-c4d5-7e6f-8a9b-0c1d2e3f4a5b"
	upd.Skipped, upd.LastSkipped = 3, at(10*time.Minute)
	put2, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: upd, IfVersion: got.Version, Now: at(time.Hour)})
	if err != nil {
		t.Fatalf("PutTrigger update: %v", err)
	}
	if put2.Version <= put.Version {
		t.Fatalf("update gave version %d, want more than %d", put2.Version, put.Version)
	}
	if !put2.CreatedAt.Equal(at(0)) || !put2.UpdatedAt.Equal(at(time.Hour)) {
		t.Fatalf("update: created %v updated %v, want %v and %v", put2.CreatedAt, put2.UpdatedAt, at(0), at(time.Hour))
	}
	got2, err := s.GetTrigger(e.ctx, "nightly")
	if err != nil {
		t.Fatalf("GetTrigger after update: %v", err)
	}
	sameTrigger(t, "GetTrigger after update", got2, upd)

	// An interval trigger without arguments round-trips too.
	iv := &store.Trigger{Name: "every-minute", Kind: "kind-b", Interval: time.Minute}
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: iv, Now: at(0)}); err != nil {
		t.Fatalf("PutTrigger interval: %v", err)
	}
	gotIv, err := s.GetTrigger(e.ctx, "every-minute")
	if err != nil {
		t.Fatalf("GetTrigger interval: %v", err)
	}
	sameTrigger(t, "interval trigger", gotIv, iv)

	if err := s.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "nightly"}); err != nil {
		t.Fatalf("DeleteTrigger: %v", err)
	}
	if _, err := s.GetTrigger(e.ctx, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTrigger after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "nightly"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteTrigger twice: %v, want ErrNotFound", err)
	}
	page, err := s.ListTriggers(e.ctx, nil)
	if err != nil {
		t.Fatalf("ListTriggers: %v", err)
	}
	if len(page.Triggers) != 1 || page.Triggers[0].Name != "every-minute" || page.Next != "" {
		t.Fatalf("ListTriggers after delete: %d triggers, next %q; want every-minute alone", len(page.Triggers), page.Next)
	}
}

func testTriggerCAS(t *testing.T, h Harness) {
	e := setup(t, h)
	s := store.TriggersIn(e.s)
	v1, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("t"), Now: at(0)})
	if err != nil {
		t.Fatalf("PutTrigger: %v", err)
	}
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("t"), Now: at(1)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("creating a trigger that exists: %v, want ErrConflict", err)
	}
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("missing"), IfVersion: v1.Version, Now: at(1)}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replacing a missing trigger: %v, want ErrNotFound", err)
	}
	p := trig("t")
	p.Paused = true
	v2, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: p, IfVersion: v1.Version, Now: at(time.Second)})
	if err != nil {
		t.Fatalf("PutTrigger with the current version: %v", err)
	}
	stale := trig("t")
	stale.Overlap = store.OverlapReplace
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: stale, IfVersion: v1.Version, Now: at(2 * time.Second)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("PutTrigger with a stale version: %v, want ErrConflict", err)
	}
	if got, _ := s.GetTrigger(e.ctx, "t"); got == nil || !got.Paused || got.Overlap != store.OverlapForbid || got.Version != v2.Version {
		t.Fatalf("after a refused write: %+v, want the paused version %d unchanged", got, v2.Version)
	}
	if err := s.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "t", IfVersion: v1.Version}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DeleteTrigger with a stale version: %v, want ErrConflict", err)
	}
	if err := s.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "t", IfVersion: v2.Version}); err != nil {
		t.Fatalf("DeleteTrigger with the current version: %v", err)
	}
	// A trigger created again under the same name never takes an old
	// version back, so a writer holding one cannot overwrite the new trigger.
	v3, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("t"), Now: at(3 * time.Second)})
	if err != nil {
		t.Fatalf("PutTrigger after delete: %v", err)
	}
	if v3.Version == v1.Version || v3.Version == v2.Version {
		t.Fatalf("recreated trigger has version %d, one of the deleted one's (%d, %d)", v3.Version, v1.Version, v2.Version)
	}

	// AnyVersion creates, then replaces whatever is stored, keeping the
	// creation time.
	up := trig("upsert")
	a1, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: up, IfVersion: store.AnyVersion, Now: at(time.Second)})
	if err != nil {
		t.Fatalf("PutTrigger AnyVersion of a new trigger: %v", err)
	}
	up.Paused = true
	a2, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: up, IfVersion: store.AnyVersion, Now: at(2 * time.Second)})
	if err != nil {
		t.Fatalf("PutTrigger AnyVersion over a stored trigger: %v", err)
	}
	if a2.Version <= a1.Version || !a2.CreatedAt.Equal(at(time.Second)) || !a2.Paused {
		t.Fatalf("AnyVersion replace: version %d after %d, created %v, paused %v; want a newer version, created %v, paused", a2.Version, a1.Version, a2.CreatedAt, a2.Paused, at(time.Second))
	}
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: up, IfVersion: store.AnyVersion - 1, Now: at(3 * time.Second)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("PutTrigger with IfVersion %d: %v, want ErrInvalid", store.AnyVersion-1, err)
	}
	if err := s.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "upsert", IfVersion: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("DeleteTrigger with IfVersion -1: %v, want ErrInvalid", err)
	}

	// Concurrent writers with the same version: exactly one wins.
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			w := trig("t")
			w.Skipped = int64(i + 1)
			_, errs[i] = s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: w, IfVersion: v3.Version, Now: at(4 * time.Second)})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("writer %d: %v, want nil or ErrConflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent writers with one version won, want 1", won, writers)
	}
}

func testTriggerInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	s := store.TriggersIn(e.s)
	cases := map[string]func(*store.Trigger){
		"no name":              func(t *store.Trigger) { t.Name = "" },
		"control in name":      func(t *store.Trigger) { t.Name = "a\nb" },
		"no kind":              func(t *store.Trigger) { t.Kind = "" },
		"args not an array":    func(t *store.Trigger) { t.Args = []byte(`{"a":1}`) },
		"args not JSON":        func(t *store.Trigger) { t.Args = []byte(`[1,`) },
		"bad cron":             func(t *store.Trigger) { t.Cron = "61 * * * *" },
		"cron never fires":     func(t *store.Trigger) { t.Cron = "0 0 30 2 *" },
		"cron with tz prefix":  func(t *store.Trigger) { t.Cron = "CRON_TZ=UTC 0 9 * * *" },
		"cron @every":          func(t *store.Trigger) { t.Cron = "@every 1m" },
		"unknown zone":         func(t *store.Trigger) { t.TimeZone = "Mars/Olympus" },
		"both schedules":       func(t *store.Trigger) { t.Interval = time.Minute },
		"no schedule":          func(t *store.Trigger) { t.Cron = "" },
		"interval too short":   func(t *store.Trigger) { t.Cron, t.TimeZone, t.Interval = "", "", 500*time.Millisecond },
		"unknown overlap":      func(t *store.Trigger) { t.Overlap = "sometimes" },
		"unknown missed":       func(t *store.Trigger) { t.Missed = "all" },
		"catch-up no deadline": func(t *store.Trigger) { t.CatchUpWithin = 0 },
	}
	for name, change := range cases {
		tr := trig("bad")
		change(tr)
		if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: tr, Now: at(0)}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: PutTrigger: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("no-time")}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutTrigger without Now: %v, want ErrInvalid", err)
	}
	if _, err := s.PutTrigger(e.ctx, nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("PutTrigger(nil): %v, want ErrInvalid", err)
	}
	if _, err := s.ListTriggers(e.ctx, &store.ListTriggersParams{Limit: -1}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ListTriggers with a negative limit: %v, want ErrInvalid", err)
	}
	page, err := s.ListTriggers(e.ctx, nil)
	if err != nil {
		t.Fatalf("ListTriggers: %v", err)
	}
	if len(page.Triggers) != 0 {
		t.Fatalf("invalid triggers were stored: %d listed", len(page.Triggers))
	}
}

func testTriggerPaging(t *testing.T, h Harness) {
	e := setup(t, h)
	s := store.TriggersIn(e.s)
	const n = 25
	for i := range n {
		tr := trig(fmt.Sprintf("t-%03d", i))
		if _, err := s.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: tr, Now: at(0)}); err != nil {
			t.Fatalf("PutTrigger %d: %v", i, err)
		}
	}
	var names []string
	after, pages := "", 0
	for {
		page, err := s.ListTriggers(e.ctx, &store.ListTriggersParams{After: after, Limit: 10})
		if err != nil {
			t.Fatalf("ListTriggers after %q: %v", after, err)
		}
		pages++
		if len(page.Triggers) > 10 {
			t.Fatalf("page of %d, limit 10", len(page.Triggers))
		}
		for _, tr := range page.Triggers {
			names = append(names, tr.Name)
			sameTrigger(t, "listed trigger", tr, trig(tr.Name))
		}
		if page.Next == "" {
			break
		}
		after = page.Next
		if pages > n {
			t.Fatal("ListTriggers never ends")
		}
	}
	if len(names) != n {
		t.Fatalf("paged through %d triggers, want %d: %v", len(names), n, names)
	}
	for i, name := range names {
		if want := fmt.Sprintf("t-%03d", i); name != want {
			t.Fatalf("trigger %d is %q, want %q (name order)", i, name, want)
		}
	}
	// A default page holds them all; a page starting after the last is empty.
	page, err := s.ListTriggers(e.ctx, &store.ListTriggersParams{})
	if err != nil || len(page.Triggers) != n || page.Next != "" {
		t.Fatalf("default page: %d triggers, next %q, err %v; want %d and no next", len(page.Triggers), page.Next, err, n)
	}
	page, err = s.ListTriggers(e.ctx, &store.ListTriggersParams{After: names[n-1]})
	if err != nil || len(page.Triggers) != 0 {
		t.Fatalf("page after the last: %d triggers, err %v", len(page.Triggers), err)
	}
}

func testTriggerTwoHandles(t *testing.T, h Harness) {
	e := setup(t, h)
	a, b := store.TriggersIn(e.s), store.TriggersIn(e.open())
	put, err := a.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("shared"), Now: at(0)})
	if err != nil {
		t.Fatalf("PutTrigger on a: %v", err)
	}
	got, err := b.GetTrigger(e.ctx, "shared")
	if err != nil {
		t.Fatalf("GetTrigger on b: %v", err)
	}
	if got.Version != put.Version {
		t.Fatalf("b sees version %d, a stored %d", got.Version, put.Version)
	}
	got.Paused = true
	if _, err := b.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: got, IfVersion: got.Version, Now: at(time.Second)}); err != nil {
		t.Fatalf("PutTrigger on b: %v", err)
	}
	if _, err := a.PutTrigger(e.ctx, &store.PutTriggerParams{Trigger: trig("shared"), IfVersion: put.Version, Now: at(2 * time.Second)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a writes over b's change with its old version: %v, want ErrConflict", err)
	}
	if got, err := a.GetTrigger(e.ctx, "shared"); err != nil || !got.Paused {
		t.Fatalf("a reads %+v, %v; want b's paused trigger", got, err)
	}
	if err := b.DeleteTrigger(e.ctx, &store.DeleteTriggerParams{Name: "shared"}); err != nil {
		t.Fatalf("DeleteTrigger on b: %v", err)
	}
	if _, err := a.GetTrigger(e.ctx, "shared"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a after b deleted: %v, want ErrNotFound", err)
	}
}

func testTriggerNamespaces(t *testing.T, h Harness) {
	a, b := setup(t, h), setup(t, h)
	if _, err := store.TriggersIn(a.s).PutTrigger(a.ctx, &store.PutTriggerParams{Trigger: trig("same-name"), Now: at(0)}); err != nil {
		t.Fatalf("PutTrigger in a: %v", err)
	}
	if _, err := store.TriggersIn(b.s).GetTrigger(b.ctx, "same-name"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b sees a's trigger: %v, want ErrNotFound", err)
	}
	other := trig("same-name")
	other.Kind = "kind-b"
	if _, err := store.TriggersIn(b.s).PutTrigger(b.ctx, &store.PutTriggerParams{Trigger: other, Now: at(0)}); err != nil {
		t.Fatalf("PutTrigger of the same name in b: %v", err)
	}
	if got, err := store.TriggersIn(a.s).GetTrigger(a.ctx, "same-name"); err != nil || got.Kind != "kind-a" {
		t.Fatalf("a's trigger after b wrote its own: %+v, %v", got, err)
	}
	if page, err := store.TriggersIn(b.s).ListTriggers(b.ctx, nil); err != nil || len(page.Triggers) != 1 || page.Triggers[0].Kind != "kind-b" {
		t.Fatalf("b lists %+v, %v; want its own trigger alone", page, err)
	}
}
