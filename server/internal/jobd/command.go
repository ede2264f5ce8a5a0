// Package jobd is the jobd process: flags, environment and configuration
// file, the stores, one Manager per namespace, the API, the health
// endpoints and the drain. cmd/jobd is its main; a test binary that links
// executors into jobd calls Main with WithJobs.
package jobd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/jobkit/job"
	"github.com/jobkit/job/server"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses of Main.
const (
	ExitOK = 0
	// ExitFailure: jobd could not start, failed while serving, or drained
	// with losses (attempts left running or calls cut at the drain
	// timeout).
	ExitFailure = 1
	// ExitUsage: a bad flag, environment variable or configuration key, or
	// a configuration jobd refuses (such as a non-loopback --listen
	// without TLS and tokens).
	ExitUsage = 2
)

// Option changes what Main builds; for programs that embed jobd.
type Option func(*options)

type options struct {
	jobs        func(namespace string) ([]*job.Job, error)
	managerOpts []job.ManagerOption
	getenv      func(string) string
	signals     []os.Signal
}

// WithJobs links executors into jobd: jobs returns the jobs to register on
// the manager of each namespace (new ones per call). jobd itself has none.
func WithJobs(jobs func(namespace string) ([]*job.Job, error)) Option {
	return func(o *options) { o.jobs = jobs }
}

// WithManagerOptions adds options to every namespace's manager, after
// those the flags give.
func WithManagerOptions(opts ...job.ManagerOption) Option {
	return func(o *options) { o.managerOpts = append(o.managerOpts, opts...) }
}

// Main runs jobd with args (without the program name) and returns its
// exit status. SIGTERM or SIGINT starts the drain; a second one ends jobd
// at once with ExitFailure.
func Main(args []string, stdout, stderr io.Writer, opts ...Option) int {
	o := &options{getenv: os.Getenv, signals: []os.Signal{syscall.SIGTERM, syscall.SIGINT}}
	for _, opt := range opts {
		opt(o)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, o.signals...)
	defer signal.Stop(sig)
	go func() {
		s, ok := <-sig
		if !ok {
			return
		}
		cancel(fmt.Errorf("signal %v", s))
		if s, ok := <-sig; ok {
			_, _ = fmt.Fprintf(stderr, "jobd: second signal (%v) during the drain; exiting now\n", s)
			os.Exit(ExitFailure)
		}
	}()
	root := newRoot(ctx, o, &Config{}, stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		_, _ = fmt.Fprintln(stderr, message(err))
		_, _ = fmt.Fprintln(stderr, "Run 'jobd --help' for the flags.")
		return ExitUsage
	default:
		_, _ = fmt.Fprintln(stderr, message(err))
		return ExitFailure
	}
}

// message is what jobd prints of err: "jobd: " and the message, without
// the "usage: " of a usage error.
func message(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, ErrUsage.Error()+": ")
	s = strings.TrimPrefix(s, "jobd: ")
	return "jobd: " + s
}

// newRoot builds the commands: jobd (serve), jobd migrate, jobd version.
func newRoot(ctx context.Context, o *options, c *Config, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "jobd",
		Short: "jobd serves the jobkit API (gRPC, gRPC-Web, Connect/JSON) on a shared store",
		Long: `jobd serves the jobkit.v1 API (gRPC, gRPC-Web and Connect/JSON on one port,
HTTP/1.1 and h2c), /healthz, /readyz and /metrics, on a store shared with
the services that run the jobs. Several jobd on one store serve the same
data with no leader. SIGTERM or SIGINT drains it.

Every flag can also be set with an environment variable JOBD_<FLAG>
(--redis-addr is JOBD_REDIS_ADDR; lists comma-separated) or a key of the
YAML file given by --config (the flag's name; lists as YAML lists). A flag
wins over the environment, which wins over the file.`,
		Args:          noArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.prepare(cmd, o, stderr)
			if err != nil {
				return err
			}
			return serve(ctx, c, log, o)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })
	root.CompletionOptions.DisableDefaultCmd = true
	bindGlobal(root.PersistentFlags(), c)
	bindServe(root.Flags(), c)

	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "bring the store's schema up to date (stores that have one: postgres)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.prepare(cmd, o, stderr)
			if err != nil {
				return err
			}
			msg, err := migrate(ctx, c)
			if err != nil {
				return err
			}
			log.Info(msg)
			return nil
		},
	}
	versionCmd := &cobra.Command{
		Use:   "version",
		Short: "print jobd's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "jobd %s (engine %s, %s %s/%s)\n", server.Version(), job.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
	root.AddCommand(migrateCmd, versionCmd)
	return root
}

// noArgs refuses arguments: jobd takes flags and subcommands only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// prepare completes the configuration of cmd from the environment and the
// configuration file, checks it, and returns the logger it asks for.
func (c *Config) prepare(cmd *cobra.Command, o *options, stderr io.Writer) (*slog.Logger, error) {
	known := map[string]bool{}
	root := cmd.Root()
	for _, fs := range []*pflag.FlagSet{root.PersistentFlags(), root.Flags()} {
		fs.VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
	}
	if err := applyEnvAndFile(cmd.Flags(), known, o.getenv); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return newLogger(c, stderr), nil
}

// newLogger returns the logger --log-level and --log-format ask for.
func newLogger(c *Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.LogLevel))
	ho := &slog.HandlerOptions{Level: lvl}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}
