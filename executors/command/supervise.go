package command

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// Every attempt's program runs under a supervisor: this binary executed
// again (see selfExe) with supervisorArg0 as its argv[0], which init
// turns into a call of supervise before main runs. The supervisor leads
// the attempt's process group and runs the program in it; it holds the
// read end of a control pipe whose only writer is the node. However the
// node ends (SIGKILL, the OOM killer, a panic, a clean exit), the kernel
// closes its end of the pipe, the supervisor reads EOF and sends SIGKILL
// to the whole group, itself included: the program, its children and
// theirs, whether or not they ignore SIGTERM. A parent-death signal
// alone would not do: it reaches only the direct child (not the
// grandchildren in its group), and Go delivers it when the OS thread
// that started the child exits, not the process.
//
// The supervisor reports the program's end on a status pipe ("exit N",
// "signal N" or "start <error>", one line) and then waits for the
// control pipe to close: the node sends SIGKILL to the group once it has
// the status, so whatever the program left running goes too, and if the
// node dies first the supervisor does it.
//
// The supervisor ignores SIGTERM (the node's SIGTERM to the group at a
// timeout or cancel is for the program), and sets a parent-death SIGKILL
// on the program in case the supervisor itself is killed alone.
const supervisorArg0 = "jobkit-command-supervisor"

// Descriptors of the supervisor's pipes (cmd.ExtraFiles 0 and 1).
const (
	ctlFD    = 3
	statusFD = 4
)

func init() {
	if len(os.Args) >= 2 && os.Args[0] == supervisorArg0 {
		os.Exit(supervise(os.Args[1:]))
	}
}

// supervise runs argv (program first) as described at supervisorArg0.
// It returns only when the control pipe cannot be read.
func supervise(argv []string) int {
	// The program's parent-death signal fires when this thread exits:
	// keep it for the supervisor's whole life.
	runtime.LockOSThread()
	syscall.CloseOnExec(ctlFD)
	syscall.CloseOnExec(statusFD)
	ctl := os.NewFile(ctlFD, "control")
	status := os.NewFile(statusFD, "status")
	if ctl == nil || status == nil {
		fmt.Fprintln(os.Stderr, "jobkit command supervisor: started without its pipes")
		return 2
	}
	// A handler, not SIG_IGN: the program gets SIGTERM's default action.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(status, "start %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		go func() {
			_ = cmd.Wait()
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if ws.Signaled() {
				fmt.Fprintf(status, "signal %d\n", int(ws.Signal()))
			} else {
				fmt.Fprintf(status, "exit %d\n", ws.ExitStatus())
			}
		}()
	}
	_, _ = io.Copy(io.Discard, ctl)
	_ = syscall.Kill(0, syscall.SIGKILL)
	return 1
}

// superStatus is how the program ended, as its supervisor saw it.
type superStatus struct {
	exited   bool // with code
	code     int
	signal   syscall.Signal // killed by signal when not 0
	startErr string         // the program could not start
	lost     bool           // the supervisor ended without a status
}

// readStatus reads the supervisor's status line.
func readStatus(r io.Reader) superStatus {
	line, err := bufio.NewReaderSize(r, 4096).ReadString('\n')
	if err != nil {
		return superStatus{lost: true}
	}
	word, rest, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	switch word {
	case "exit", "signal":
		n, err := strconv.Atoi(rest)
		if err != nil {
			return superStatus{lost: true}
		}
		if word == "exit" {
			return superStatus{exited: true, code: n}
		}
		return superStatus{signal: syscall.Signal(n)}
	case "start":
		return superStatus{startErr: rest}
	}
	return superStatus{lost: true}
}
