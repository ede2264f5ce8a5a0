package faulttest_test

import (
	"testing"

	"github.com/jobkit/job/internal/faulttest"
)

// TestWorkflowKilledBeforeRelease: a worker process SIGKILLed between a
// workflow task's stored end and its dependents' release; the workflow
// completes on another worker, the dependent run exactly once, on each
// store.
func TestWorkflowKilledBeforeRelease(t *testing.T) {
	for _, name := range []string{"redis", "valkey", "etcd", "pg"} {
		t.Run(name, func(t *testing.T) {
			faulttest.WorkflowKilledBeforeRelease(t, specs[name](t))
		})
	}
}
