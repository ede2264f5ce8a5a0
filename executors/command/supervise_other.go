//go:build !linux

package command

import (
	"os"
	"syscall"
)

// selfExe is this process's own executable, to run as the supervisor.
func selfExe() (string, error) { return os.Executable() }

// setDeathSignal does nothing where the kernel has no parent-death
// signal; the supervisor's control pipe still ends the group.
func setDeathSignal(*syscall.SysProcAttr) {}
