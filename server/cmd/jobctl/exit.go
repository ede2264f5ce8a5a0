package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// The exit codes jobctl documents (see the package comment).
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitConflict    = 4
	exitAuth        = 5
	exitUnavailable = 6
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// notFoundError is something jobctl itself found missing: exit code 3.
type notFoundError struct{ err error }

func (e *notFoundError) Error() string { return e.err.Error() }
func (e *notFoundError) Unwrap() error { return e.err }

// notFoundf returns a notFoundError with a formatted message.
func notFoundf(format string, args ...any) error {
	return &notFoundError{fmt.Errorf(format, args...)}
}

// exitCode returns the exit code of a command's error.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	var nf *notFoundError
	if errors.As(err, &nf) {
		return exitNotFound
	}
	// A certificate the client does not trust is no outage: retrying
	// does not help, so it is not exit 6.
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		return exitError
	}
	var ce *client.Error
	if !errors.As(err, &ce) {
		switch {
		case errors.Is(err, context.Canceled):
			return exitError
		case errors.Is(err, context.DeadlineExceeded):
			return exitUnavailable
		}
		return exitError
	}
	return codeExit(ce.Code())
}

// codeExit maps an API status code to an exit code.
func codeExit(c client.Code) int {
	switch c {
	case client.CodeInvalidArgument:
		return exitUsage
	case client.CodeNotFound:
		return exitNotFound
	case client.CodeAlreadyExists, client.CodeFailedPrecondition, client.CodeAborted:
		return exitConflict
	case client.CodeUnauthenticated, client.CodePermissionDenied:
		return exitAuth
	case client.CodeUnavailable, client.CodeDeadlineExceeded:
		return exitUnavailable
	}
	return exitError
}

// jobctlFixes are the fixes jobctl names, by ErrorFix reason, in the
// place of those the server's messages name for an API caller.
var jobctlFixes = map[string]func(subject string) string{
	client.FixUnknownKind: func(kind string) string {
		return fmt.Sprintf("define it with 'jobctl definitions create %s' (a job made of data), or start a worker that registers it", kind)
	},
	client.FixNoToken: func(string) string {
		return "give one with --token or --token-file, or set JOBCTL_TOKEN"
	},
}

// message is err's message for a jobctl user: a fix the server named for
// an API caller becomes jobctl's own.
func message(err error) string {
	msg := err.Error()
	var ce *client.Error
	if !errors.As(err, &ce) {
		return msg
	}
	return withJobctlFix(msg, ce.Fix())
}

// withJobctlFix is msg with jobctl's fix in the place of the one f says
// msg names for an API caller.
func withJobctlFix(msg string, f *jobkitv1.ErrorFix) string {
	if f.GetFix() == "" {
		return msg
	}
	if fix, ok := jobctlFixes[f.GetReason()]; ok {
		msg = strings.Replace(msg, f.GetFix(), fix(f.GetSubject()), 1)
	}
	return msg
}

// report prints err for a user and returns its exit code.
func report(w io.Writer, err error) int {
	code := exitCode(err)
	if code != exitOK {
		fmt.Fprintf(w, "jobctl: %s\n", message(err))
		if code == exitUsage {
			var ue *usageError
			if errors.As(err, &ue) {
				fmt.Fprintln(w, "Run 'jobctl --help' or 'jobctl COMMAND --help' for usage.")
			}
		}
	}
	return code
}
