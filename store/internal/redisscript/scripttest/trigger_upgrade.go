package scripttest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
)

// testTriggerUpgrade: triggers stored by the releases that kept them in
// the trig HASH (before they were documents of store.TriggerCollection)
// are read and fire after an upgrade (jobtest.TriggerUpgrade).
func testTriggerUpgrade(t *testing.T, h Harness) {
	e := layout(t, h)
	jobtest.TriggerUpgrade(t, e.s, func(t *testing.T, old []*store.Trigger) {
		for _, tr := range old {
			// The earlier layout: trig maps a name to "<version> <created
			// ns> <json>", the JSON without the Version and CreatedAt;
			// trign is the ZSET of the names.
			body := tr.Clone()
			body.Version, body.CreatedAt = 0, time.Time{}
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			v := fmt.Sprintf("%d %d %s", tr.Version, tr.CreatedAt.UnixNano(), b)
			if err := e.rc.HSet(t.Context(), e.key("trig"), tr.Name, v).Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.rc.ZAdd(t.Context(), e.key("trign"), redis.Z{Member: tr.Name}).Err(); err != nil {
				t.Fatal(err)
			}
		}
	})
	if n, err := e.rc.Exists(t.Context(), e.key("trig"), e.key("trign")).Result(); err != nil || n != 0 {
		t.Errorf("after the upgrade %d of trig and trign are left (%v); want none", n, err)
	}
}
