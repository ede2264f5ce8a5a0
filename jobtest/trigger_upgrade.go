package jobtest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// TriggerUpgrade checks a plugin's store.TriggerUpgrader against a real
// Manager: writeOld stores the triggers it is given in the plugin's
// earlier trigger layout, in the namespace of s, as the earlier release
// wrote them (their Version, CreatedAt and UpdatedAt set). After an
// upgrade, a Manager with the scheduler role on s must read every one
// of them with its fields and times, fire the one that is due, move one
// an older node writes while it runs, keep a trigger already stored as a
// document over an earlier one of the same name, and leave the earlier
// layout empty.
func TriggerUpgrade(t *testing.T, s store.Store, writeOld func(t *testing.T, old []*store.Trigger)) {
	t.Helper()
	up, ok := s.(store.TriggerUpgrader)
	if !ok {
		t.Fatalf("%T does not implement store.TriggerUpgrader", s)
	}
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	old := func(name string) *store.Trigger {
		return &store.Trigger{Name: name, Kind: "upgraded", Args: []byte(`["x"]`), Interval: job.MinInterval,
			Version: 7, CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-time.Hour)}
	}
	firing := old("old-firing")
	paused := old("old-paused")
	paused.Interval, paused.Cron, paused.TimeZone, paused.Paused = 0, "0 3 * * *", "Europe/Paris", true
	paused.Overlap, paused.Skipped, paused.LastSkipped = store.OverlapForbid, 3, now.Add(-90*time.Minute)
	paused.LastTick, paused.LastInstanceID = now.Add(-80*time.Minute), "inst-1"
	both := old("both")
	both.Paused = true
	if _, err := store.TriggersIn(s).PutTrigger(ctx, &store.PutTriggerParams{Trigger: &store.Trigger{Name: "both", Kind: "new-kind", Cron: "@daily", Paused: true}, Now: now}); err != nil {
		t.Fatalf("PutTrigger of the new layout: %v", err)
	}
	writeOld(t, []*store.Trigger{firing, paused, both})

	var ran atomic.Int64
	j, err := job.NewJob(job.WithKind("upgraded"), job.WithExecutor(func(string) { ran.Add(1) }))
	if err != nil {
		t.Fatalf("NewJob: %v", err)
	}
	m, err := job.NewManager(job.WithStore(s), job.WithLogger(testLogger(t)), job.WithTriggerReload(200*time.Millisecond), job.WithPollInterval(200*time.Millisecond))
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	if err := m.RegisterJob(j); err != nil {
		t.Fatalf("RegisterJob: %v", err)
	}
	start(t, m)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil && !errors.Is(err, job.ErrNotRunning) {
			t.Errorf("Stop: %v", err)
		}
	})
	waitFor(t, deadline, "a tick of the upgraded trigger to run", func() bool { return ran.Load() > 0 })

	checkUpgraded(t, m, paused)

	// An older node writes a trigger while the upgraded one runs.
	late := old("old-late")
	late.Paused = true
	writeOld(t, []*store.Trigger{late})
	waitFor(t, deadline, "a trigger written in the earlier layout after the start to be moved", func() bool {
		_, err := m.Admin().GetTrigger(ctx, "old-late")
		return err == nil
	})
	if n, err := up.UpgradeTriggers(ctx); err != nil || n != 0 {
		t.Errorf("UpgradeTriggers after the upgrade: %d moved, %v; want 0 (the earlier layout empty)", n, err)
	}
	page, err := store.TriggersIn(s).ListTriggers(ctx, nil)
	if err != nil || len(page.Triggers) != 4 {
		t.Fatalf("ListTriggers after the upgrade: %d triggers, %v; want 4", len(page.Triggers), err)
	}
}

// checkUpgraded checks, after an upgrade, the fields and times of paused
// as m reads it, that old-firing recorded its tick, and that the
// document named both won over the earlier trigger of that name.
func checkUpgraded(t *testing.T, m *job.Manager, paused *store.Trigger) {
	t.Helper()
	ctx := t.Context()
	got, err := m.Admin().GetTrigger(ctx, "old-paused")
	if err != nil {
		t.Fatalf("GetTrigger of an upgraded trigger: %v", err)
	}
	if got.Cron != paused.Cron || got.TimeZone != paused.TimeZone || !got.Paused || got.Overlap != paused.Overlap ||
		got.Skipped != 3 || !got.LastSkipped.Equal(paused.LastSkipped) || !got.LastTick.Equal(paused.LastTick) || got.LastInstanceID != "inst-1" {
		t.Errorf("upgraded trigger %+v; want the fields of %+v", got, paused)
	}
	if !got.CreatedAt.Equal(paused.CreatedAt) || !got.UpdatedAt.Equal(paused.UpdatedAt) {
		t.Errorf("upgraded trigger created %v, updated %v; want %v and %v as stored before", got.CreatedAt, got.UpdatedAt, paused.CreatedAt, paused.UpdatedAt)
	}
	if got, err := m.Admin().GetTrigger(ctx, "old-firing"); err != nil || got.LastTick.IsZero() || got.LastInstanceID == "" {
		t.Errorf("the fired upgraded trigger reads %+v, %v; want its last tick recorded", got, err)
	}
	if got, err := m.Admin().GetTrigger(ctx, "both"); err != nil || got.Kind != "new-kind" {
		t.Errorf("a trigger stored in both layouts reads %+v, %v; want the document's (kind new-kind)", got, err)
	}
}
