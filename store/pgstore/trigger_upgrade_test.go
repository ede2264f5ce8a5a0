package pgstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
)

// Triggers stored by the releases that kept them in the triggers table
// (before they were documents) are read and fire after an upgrade.
func TestTriggerUpgrade(t *testing.T) {
	ns := "trigger-upgrade-" + time.Now().Format("150405.000000")
	s := open(t, ns)
	pool := testPool(t)
	jobtest.TriggerUpgrade(t, s, func(t *testing.T, old []*store.Trigger) {
		for _, tr := range old {
			// The earlier layout: a row with the trigger's JSON (without
			// its Version and times) and its version and times beside it.
			body := tr.Clone()
			body.Version, body.CreatedAt, body.UpdatedAt = 0, time.Time{}, time.Time{}
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(t.Context(), `INSERT INTO `+testSchema+`.triggers (ns, name, body, version, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6)`,
				ns, tr.Name, b, tr.Version, tr.CreatedAt.UnixNano(), tr.UpdatedAt.UnixNano()); err != nil {
				t.Fatal(err)
			}
		}
	})
	var left int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+testSchema+`.triggers WHERE ns = $1`, ns).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("after the upgrade %d rows are left in the triggers table; want none", left)
	}
}
