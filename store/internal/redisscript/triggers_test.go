package redisscript

import "testing"

func TestTriggerKeysShareOneHashTag(t *testing.T) {
	k, err := NewKeys("tenant-7")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range k.triggerKeys() {
		if got := hashTag(key); got != "tenant-7" {
			t.Errorf("trigger key %q hashes on %q, want the namespace tag", key, got)
		}
	}
}
