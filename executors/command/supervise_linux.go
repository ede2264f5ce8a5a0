package command

import "syscall"

// selfExe is this process's own executable, to run as the supervisor; on
// Linux the kernel's link, which works even when the file was replaced
// or deleted since the node started.
func selfExe() (string, error) { return "/proc/self/exe", nil }

// setDeathSignal makes the kernel SIGKILL the program when the thread
// that started it (the supervisor's locked main thread) exits.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
