package etcdstore_test

import (
	"encoding/json"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/jobtest"
	"github.com/jobkit/job/store"
)

// Triggers stored by the releases that kept them under P tr/<name>
// (before they were documents) are read and fire after an upgrade.
func TestTriggerUpgrade(t *testing.T) {
	ns := namespace(t)
	cleanup(t, ns)
	s := open(t, ns)
	cli := newClient(t, testserver.Etcd(t))
	jobtest.TriggerUpgrade(t, s, func(t *testing.T, old []*store.Trigger) {
		for _, tr := range old {
			// The earlier layout: the trigger's JSON with its times and
			// without a Version (the key's ModRevision was the Version).
			body := tr.Clone()
			body.Version = 0
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Put(t.Context(), keyPrefix(ns)+"tr/"+tr.Name, string(b)); err != nil {
				t.Fatal(err)
			}
		}
	})
	resp, err := cli.Get(t.Context(), keyPrefix(ns)+"tr/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Errorf("after the upgrade %d keys are left under tr/; want none", resp.Count)
	}
}
