package alert_test

import "testing"

func dump(t *testing.T, b *bundle) {
	b.docs.mu.Lock()
	defer b.docs.mu.Unlock()
	for col, m := range b.docs.docs {
		for n, d := range m {
			t.Logf("%s/%s v%d: %s", col, n, d.Version, d.Data)
		}
	}
}
