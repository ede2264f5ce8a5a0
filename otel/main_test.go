package jobotel_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine outlives the tests. The tests
// that trace across managers on Redis are in internal/redistest, a module
// of its own (see its package comment).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
