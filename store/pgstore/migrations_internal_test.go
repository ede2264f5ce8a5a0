package pgstore

import "testing"

// TestMigrationVersionsAreConsecutive: the embedded migrations are numbered
// 1, 2, 3, … with no gap and no two of one version. Two files of one
// version (two branches that each added "0002_…") would leave a database
// migrated by one of them without the other's change, as Migrate applies
// only versions above the stored one.
func TestMigrationVersionsAreConsecutive(t *testing.T) {
	for i, m := range migrations() {
		if m.version != i+1 {
			t.Fatalf("migration %s has version %d; want %d (number the migrations 1, 2, 3, … without gaps or repeats)", m.name, m.version, i+1)
		}
	}
}
