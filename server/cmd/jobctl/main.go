// Command jobctl operates a jobkit server (jobd) from the command line:
// it schedules jobs, lists and operates instances, queues, definitions
// and triggers, follows logs and watches state changes, over the jobkit.v1
// API.
//
// Every command prints a table by default, and with -o json or -o yaml
// the API's response message (protojson; streams print one document per
// message). The server's address, token and namespace come from flags or
// from JOBCTL_ADDR, JOBCTL_TOKEN and JOBCTL_NAMESPACE.
//
// Exit codes, for scripts:
//
//	0  success
//	1  any other error
//	2  usage error: unknown command or flag, bad flag value, wrong
//	   arguments, or the server answered InvalidArgument
//	3  not found (NotFound)
//	4  already exists or conflict (AlreadyExists, FailedPrecondition, Aborted)
//	5  not authenticated or not allowed (Unauthenticated, PermissionDenied)
//	6  server unavailable (Unavailable, DeadlineExceeded): not reachable,
//	   or shutting down (a TLS certificate the client does not trust is
//	   1: retrying does not help)
//
// Shell completion: jobctl completion bash|zsh|fish|powershell.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv})
	stop()
	os.Exit(code)
}
