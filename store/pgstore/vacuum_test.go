package pgstore_test

import (
	"slices"
	"testing"
)

// TestInstancesVacuumBounded: the instances table is vacuumed after a
// fixed number of dead rows, not a fifth of the table (PostgreSQL's
// default), and its indexes are vacuumed every time. Every claim leaves
// the Scheduled version of its rows dead at the head of instances_ready;
// until a VACUUM removes those index entries, each claim walks past them,
// so with the default a queue of 1M let ~200k of them pile up and a
// claim of 64 cost several times what it cost after a VACUUM
// (doc/benchmarks-appendix.md, "Claim cost at 1M queued").
func TestInstancesVacuumBounded(t *testing.T) {
	p := testPool(t)
	var opts []string
	if err := p.QueryRow(t.Context(), `SELECT coalesce(c.reloptions, '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'instances'`, testSchema).Scan(&opts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=20000", "vacuum_index_cleanup=on"} {
		if !slices.Contains(opts, want) {
			t.Errorf("instances reloptions %q lack %q", opts, want)
		}
	}
}
