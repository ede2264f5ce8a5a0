package jobd

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// ErrUsage marks an error in how jobd was called: a bad flag, environment
// variable or configuration key. jobd exits with status 2 on it.
var ErrUsage = errors.New("jobd: usage")

// usagef returns an error wrapping ErrUsage.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
}

// Stores jobd can keep its data in (--store).
const (
	StoreMemdb    = "memdb"
	StoreRedis    = "redis"
	StoreValkey   = "valkey"
	StoreEtcd     = "etcd"
	StorePostgres = "postgres"
)

// storeNames lists the values of --store.
var storeNames = []string{StoreMemdb, StoreRedis, StoreValkey, StoreEtcd, StorePostgres}

// EnvPrefix starts the name of every environment variable jobd reads: a
// flag --redis-addr is JOBD_REDIS_ADDR.
const EnvPrefix = "JOBD_"

// Config is jobd's configuration, from flags, JOBD_* environment variables
// and a configuration file, in that order of precedence.
type Config struct {
	// ConfigFile is the YAML file read for settings that neither a flag
	// nor an environment variable gives (--config, JOBD_CONFIG).
	ConfigFile string

	// Listen is the address of the API (and, without MetricsListen, of
	// /metrics, /healthz and /readyz).
	Listen string
	// MetricsListen, when set, serves /metrics, /healthz and /readyz on an
	// address of their own instead.
	MetricsListen string

	// Store names the store: memdb, redis, valkey, etcd or postgres.
	Store         string
	RedisAddr     string
	ValkeyAddr    string
	EtcdEndpoints []string
	PGURL         string
	// StoreTimeout bounds how long jobd waits at start for its store to
	// answer; past it jobd exits 1.
	StoreTimeout time.Duration

	// Namespaces are served by one Manager each; the first is the default
	// of requests that name none.
	Namespaces []string
	Workers    int
	Queues     []string
	NodeID     string
	Labels     []string
	// Scheduler runs the stored triggers.
	Scheduler bool

	TLSCert, TLSKey string
	TokensFile      string
	Insecure        bool

	// MetricsNaming names the metrics: jobkit (jobkit_...) or go-job
	// (go-job's own names, for its dashboards).
	MetricsNaming string

	// DrainTimeout bounds the drain on SIGTERM or SIGINT.
	DrainTimeout time.Duration

	LogLevel  string
	LogFormat string

	// >>> issue 22: executors as data — the built-in executor types this
	// node enables, with their allowlists (executors.go).
	Executors ExecutorsConfig
	// <<< issue 22
	// Alerting (issue 23): Alerts runs the evaluator and the deliverer of
	// each namespace; AlertInterval paces them; AlertConsoleURL is the
	// console's address in notifications' links; AlertAllow names the
	// webhook and chat destinations allowed beyond the public internet.
	Alerts          bool
	AlertInterval   time.Duration
	AlertConsoleURL string
	AlertAllow      []string
}

// bindGlobal defines the flags every command takes: the configuration
// file, the store and the logging.
func bindGlobal(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.ConfigFile, "config", "", "YAML configuration file; its keys are the flag names (env JOBD_CONFIG)")
	fs.StringVar(&c.Store, "store", StoreMemdb, "store: "+strings.Join(storeNames, ", ")+" (memdb keeps everything in this process and loses it on exit)")
	fs.StringVar(&c.RedisAddr, "redis-addr", "127.0.0.1:6379", "redis-server address (--store redis)")
	fs.StringVar(&c.ValkeyAddr, "valkey-addr", "127.0.0.1:6379", "valkey-server address (--store valkey)")
	fs.StringSliceVar(&c.EtcdEndpoints, "etcd-endpoints", []string{"127.0.0.1:2379"}, "etcd endpoints, comma-separated or repeated (--store etcd)")
	fs.StringVar(&c.PGURL, "pg-url", "", "PostgreSQL connection URL (--store postgres)")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", 5*time.Second, "how long to wait at start for the store to answer; past it jobd exits 1 (an outage after the start is logged and waited out)")
	fs.StringSliceVar(&c.Namespaces, "namespace", []string{"default"}, "namespace to serve, repeatable; the first is the default of requests that name none")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "log format: text or json")
}

// bindServe defines the flags of the server itself.
func bindServe(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:8080", "API address (gRPC, gRPC-Web, Connect on HTTP/1.1 and h2c)")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "", "address of /metrics, /healthz and /readyz (default: the API's)")
	fs.StringVar(&c.MetricsNaming, "metrics-naming", "jobkit", "metric names: jobkit (jobkit_...) or go-job (go_job_..., as go-job names them, for its dashboards)")
	fs.IntVar(&c.Workers, "workers", 0, "instances run at once by each namespace's manager: the definitions of the executor types enabled (--webhook, --command-allow, --wasm) run in them; 0 schedules only")
	fs.StringSliceVar(&c.Queues, "queues", []string{"default"}, "queues the managers claim from, comma-separated or repeated")
	fs.StringVar(&c.NodeID, "node-id", "", "node ID in leases, history and the node registry; unique in a cluster (default: host, PID and a random suffix)")
	fs.StringSliceVar(&c.Labels, "labels", nil, "the node's labels (\"region=eu\", \"gpu\"), comma-separated or repeated")
	fs.BoolVar(&c.Scheduler, "scheduler", true, "run the stored triggers (--scheduler=false to leave them to other nodes)")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key")
	fs.StringVar(&c.TLSKey, "tls-key", "", "TLS private key file (PEM); with --tls-cert")
	fs.StringVar(&c.TokensFile, "tokens-file", "", "YAML list of accepted tokens ({name, sha256, role, namespaces}); turns authentication on")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow a non-loopback --listen without TLS or tokens")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 30*time.Second, "how long SIGTERM waits for running attempts and calls in flight")
	bindExecutors(fs, &c.Executors) // issue 22
	// Alerting (issue 23).
	fs.BoolVar(&c.Alerts, "alerts", true, "evaluate the stored alert rules and deliver their notifications (each incident is notified once however many jobd run)")
	fs.DurationVar(&c.AlertInterval, "alert-interval", time.Second, "how often alert rules are evaluated and notifications delivered")
	fs.StringVar(&c.AlertConsoleURL, "alert-console-url", "", "the console's address as operators reach it (\"https://jobs.example.com/console\"), for the links in notifications (default: none)")
	fs.StringSliceVar(&c.AlertAllow, "alert-allow", nil, "webhook and chat destinations allowed besides public addresses: hosts, *.domains, IPs, CIDRs (loopback, private and link-local ones are refused otherwise)")
}

// envName is the environment variable of a flag.
func envName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnvAndFile gives every flag of fs that the command line did not set
// its value from the environment (JOBD_<FLAG>) or, failing that, from the
// configuration file. known holds every flag name of jobd, so that a file
// shared by several commands may set flags another command takes.
func applyEnvAndFile(fs *pflag.FlagSet, known map[string]bool, getenv func(string) string) error {
	path := ""
	if f := fs.Lookup("config"); f != nil {
		path = f.Value.String()
		if !f.Changed {
			if v := getenv(envName("config")); v != "" {
				path = v
				if err := fs.Set("config", v); err != nil {
					return usagef("%s: %v", envName("config"), err)
				}
			}
		}
	}
	file, err := readConfigFile(path, known)
	if err != nil {
		return err
	}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v, ok := lookupEnv(getenv, envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, usagef("%s=%q: %v", envName(f.Name), v, err))
			}
			return
		}
		v, ok := file[f.Name]
		if !ok {
			return
		}
		if err := setFromFile(fs, f, v); err != nil {
			errs = append(errs, usagef("%s: key %q: %v", path, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

// lookupEnv reads a variable through getenv; an empty value counts as
// unset, so JOBD_X= in a unit file leaves the default.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// readConfigFile reads the YAML file at path (none when empty): a mapping
// from flag names to values. A key that names no flag is an error, so a
// typo does not go unnoticed.
func readConfigFile(path string, known map[string]bool) (map[string]any, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("config file: %v", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, usagef("config file %s: %v", path, err)
	}
	var unknown []string
	for k := range m {
		if !known[k] || k == "config" {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		keys := make([]string, 0, len(known))
		for k := range known {
			if k != "config" && k != "help" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		return nil, usagef("config file %s: unknown keys %s; the keys are the flag names: %s", path, strings.Join(unknown, ", "), strings.Join(keys, ", "))
	}
	return m, nil
}

// setFromFile sets flag f from a value of the configuration file: a
// scalar, or a list for a flag that takes several values.
func setFromFile(fs *pflag.FlagSet, f *pflag.Flag, v any) error {
	if list, ok := v.([]any); ok {
		if !strings.HasSuffix(f.Value.Type(), "Slice") {
			return fmt.Errorf("a list, but --%s takes one value", f.Name)
		}
		if len(list) == 0 {
			return f.Value.(pflag.SliceValue).Replace(nil)
		}
		for _, item := range list {
			s, err := scalar(item)
			if err != nil {
				return err
			}
			if err := fs.Set(f.Name, s); err != nil {
				return err
			}
		}
		return nil
	}
	s, err := scalar(v)
	if err != nil {
		return err
	}
	return fs.Set(f.Name, s)
}

// scalar renders a YAML scalar as a flag would be given it.
func scalar(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(v), nil
	case nil:
		return "", nil
	default:
		return "", fmt.Errorf("want a string, number or boolean, not %T", v)
	}
}

// validate checks what flags cannot check on their own.
func (c *Config) validate() error {
	if !slices.Contains(storeNames, c.Store) {
		return usagef("--store %q: want one of %s", c.Store, strings.Join(storeNames, ", "))
	}
	if len(c.Namespaces) == 0 {
		return usagef("--namespace: give at least one namespace")
	}
	seen := map[string]bool{}
	for _, ns := range c.Namespaces {
		if ns == "" || strings.ContainsAny(ns, "{}/ \t") {
			return usagef("--namespace %q: want a non-empty name without braces, slashes or spaces", ns)
		}
		if seen[ns] {
			return usagef("--namespace %q given twice", ns)
		}
		seen[ns] = true
	}
	if c.Store == StoreEtcd && len(c.EtcdEndpoints) == 0 {
		return usagef("--store etcd needs --etcd-endpoints")
	}
	if c.Store == StorePostgres && c.PGURL == "" {
		return usagef("--store postgres needs --pg-url")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return usagef("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.StoreTimeout <= 0 {
		return usagef("--store-timeout %v: want a positive duration such as 5s", c.StoreTimeout)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return usagef("--log-format %q: want text or json", c.LogFormat)
	}
	return nil
}

// validateServe checks the server's own flags.
func (c *Config) validateServe() error {
	if c.Workers < 0 {
		return usagef("--workers %d: want 0 or more", c.Workers)
	}
	if len(c.Queues) == 0 {
		return usagef("--queues: give at least one queue")
	}
	for _, q := range c.Queues {
		if q == "" {
			return usagef("--queues: empty queue name")
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return usagef("--tls-cert and --tls-key go together; give both or neither")
	}
	if c.MetricsNaming != "jobkit" && c.MetricsNaming != "go-job" {
		return usagef("--metrics-naming %q: want jobkit or go-job", c.MetricsNaming)
	}
	if c.DrainTimeout <= 0 {
		return usagef("--drain-timeout %v: want a positive duration such as 30s", c.DrainTimeout)
	}
	if c.Listen == "" {
		return usagef("--listen: give an address such as 127.0.0.1:8080")
	}
	if c.Alerts { // issue 23
		if _, err := c.checkAlertFlags(); err != nil {
			return err
		}
	}
	return c.Executors.validate(c.Namespaces) // issue 22
}
