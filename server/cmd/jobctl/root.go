package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/jobkit/job/api/client"
)

// env is what a jobctl run reads and writes, so tests run it in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// globals are the flags every command has.
type globals struct {
	env        *env
	output     string
	addr       string
	token      string
	tokenFile  string
	namespace  string
	tlsCA      string
	insecure   bool
	protocol   string
	callTimout time.Duration
	ranCommand bool
}

// run runs jobctl with args and returns its exit code.
func run(ctx context.Context, args []string, e *env) int {
	g := &globals{env: e}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	err := root.ExecuteContext(ctx)
	if err != nil && !g.ranCommand {
		// Cobra's own errors (unknown command, bad arguments) come before
		// the command runs.
		var ue *usageError
		if !errors.As(err, &ue) {
			err = &usageError{err}
		}
	}
	return report(e.stderr, err)
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "jobctl",
		Short: "Operate a jobkit server: schedule jobs, inspect and operate instances, queues, definitions and triggers",
		Long: `jobctl operates a jobkit server (jobd) over the jobkit.v1 API.

The address, token and namespace come from --addr, --token (or --token-file)
and --namespace, or from JOBCTL_ADDR, JOBCTL_TOKEN and JOBCTL_NAMESPACE.

Exit codes: 0 ok, 1 other error, 2 usage error (or InvalidArgument),
3 not found, 4 already exists or conflict, 5 unauthenticated or permission
denied, 6 server unavailable.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch g.output {
			case "table", "json", "yaml":
			default:
				return usagef("-o %q: want table, json or yaml", g.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err} })
	f := root.PersistentFlags()
	f.StringVarP(&g.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&g.addr, "addr", envOr(g.env, "JOBCTL_ADDR", "http://127.0.0.1:8080"), "server address, http(s)://host:port (env JOBCTL_ADDR)")
	// The token's default is not JOBCTL_TOKEN's value: help prints a
	// flag's default, and the token must never be printed. client()
	// reads the variable.
	f.StringVar(&g.token, "token", "", "bearer token (default: env JOBCTL_TOKEN; prefer --token-file or the env to keep it out of ps)")
	f.StringVar(&g.tokenFile, "token-file", "", "read the bearer token from this file")
	f.StringVarP(&g.namespace, "namespace", "n", g.env.getenv("JOBCTL_NAMESPACE"), "namespace (env JOBCTL_NAMESPACE; default: the server's)")
	f.StringVar(&g.tlsCA, "tls-ca", "", "PEM file of the CA that signed the server's certificate")
	f.BoolVar(&g.insecure, "insecure-skip-verify", false, "do not verify the server's TLS certificate (testing only)")
	f.StringVar(&g.protocol, "protocol", "connect", "wire protocol: connect, grpc or grpcweb")
	f.DurationVar(&g.callTimout, "call-timeout", 30*time.Second, "bound on each call (not on --follow and watch); 0: none")
	_ = root.RegisterFlagCompletionFunc("output", fixedCompletion("table", "json", "yaml"))
	_ = root.RegisterFlagCompletionFunc("protocol", fixedCompletion("connect", "grpc", "grpcweb"))

	root.AddCommand(
		newScheduleCmd(g), newScheduleBatchCmd(g),
		newInstancesCmd(g), newInstanceCmd(g),
		newQueuesCmd(g), newKindsCmd(g), newNodesCmd(g),
		newDefinitionsCmd(g), newExecutorsCmd(g), newTriggersCmd(g), newWatchCmd(g),
		newCalendarsCmd(g), newWorkflowsCmd(g), newLimitsCmd(g),
		newAlertCmd(g),
		newVersionCmd(g),
	)
	markRun(root, g)
	return root
}

// markRun makes every command note when its RunE starts, so that errors
// from before (cobra's checks of arguments and flags) count as usage
// errors and those from after by what they say.
func markRun(c *cobra.Command, g *globals) {
	if fn := c.RunE; fn != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			g.ranCommand = true
			return fn(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markRun(sub, g)
	}
}

func envOr(e *env, key, def string) string {
	if v := e.getenv(key); v != "" {
		return v
	}
	return def
}

func fixedCompletion(words ...string) func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return words, cobra.ShellCompDirectiveNoFileComp
	}
}

// client returns a client of the server the flags name.
func (g *globals) client() (*client.Client, error) {
	addr := g.addr
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
		if g.tlsCA != "" || g.insecure {
			addr = "https://" + g.addr
		}
	}
	if strings.HasPrefix(addr, "http://") && (g.tlsCA != "" || g.insecure) {
		return nil, usagef("--tls-ca and --insecure-skip-verify need an https:// address; --addr is %s", g.addr)
	}
	proto, err := client.ParseProtocol(g.protocol)
	if err != nil {
		return nil, &usageError{err}
	}
	token := g.token
	if token == "" {
		token = g.env.getenv("JOBCTL_TOKEN")
	}
	if g.tokenFile != "" {
		b, err := os.ReadFile(g.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	opts := []client.Option{client.WithProtocol(proto)}
	if token != "" {
		opts = append(opts, client.WithToken(token))
	}
	if g.namespace != "" {
		opts = append(opts, client.WithNamespace(g.namespace))
	}
	if g.tlsCA != "" || g.insecure {
		tc := &tls.Config{InsecureSkipVerify: g.insecure} //nolint:gosec // asked for by --insecure-skip-verify
		if g.tlsCA != "" {
			pem, err := os.ReadFile(g.tlsCA)
			if err != nil {
				return nil, usagef("--tls-ca: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, usagef("--tls-ca %s: no PEM certificate in it", g.tlsCA)
			}
			tc.RootCAs = pool
		}
		opts = append(opts, client.WithTLSConfig(tc))
	}
	c, err := client.New(addr, opts...)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--addr: %w", err)}
	}
	return c, nil
}

// callCtx bounds one unary call by --timeout.
func (g *globals) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.callTimout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, g.callTimout)
}

// call runs f with a client built from the global flags and a context
// bounded by --call-timeout: the frame of every command that makes calls.
func (g *globals) call(cmd *cobra.Command, f func(ctx context.Context, c *client.Client) error) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	ctx, cancel := g.callCtx(cmd.Context())
	defer cancel()
	return f(ctx, c)
}
