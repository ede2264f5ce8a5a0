package jobd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/server"
	guard "github.com/jobkit/job/webhook"
)

// ExecutorsConfig says which built-in executor types (issue 22) this node
// enables, and with what allowlists. Every type is off by default; a node
// runs them only with --workers above 0.
type ExecutorsConfig struct {
	// Webhook enables the webhook type (--webhook).
	Webhook bool
	// WebhookAllow lists the destinations beyond the public internet, each
	// "host", "*.domain", "IP" or "CIDR", optionally "namespace=" first to
	// apply to one namespace only (--webhook-allow).
	WebhookAllow []string
	// WebhookStrict refuses public destinations not on the allowlist too.
	WebhookStrict bool
	// CommandAllow lists the programs command definitions may run, as
	// absolute paths; it enables the command type (--command-allow).
	CommandAllow []string
	// WasmModules is the directory of WebAssembly modules by content
	// hash; it enables the wasm type (--wasm-modules).
	WasmModules string
	// WasmMaxModuleMB bounds an uploaded module (--wasm-max-module-mb).
	WasmMaxModuleMB int
	// WasmMaxMemoryMB bounds a definition's memory_mb (--wasm-max-memory-mb).
	WasmMaxMemoryMB int
	// WasmAllowDirs lists host directories definitions may mount.
	WasmAllowDirs []string
	// WasmCacheDir keeps compiled modules across restarts.
	WasmCacheDir string
	// SecretsDir holds one file per secret a config names; besides it,
	// JOBD_SECRET_<NAME> environment variables (--secrets-dir).
	SecretsDir string
}

// SecretEnvPrefix starts the environment variables jobd resolves secret
// names from: secret "hook-key" is JOBD_SECRET_HOOK_KEY.
const SecretEnvPrefix = "JOBD_SECRET_"

// bindExecutors defines the flags of ExecutorsConfig.
func bindExecutors(fs *pflag.FlagSet, c *ExecutorsConfig) {
	fs.BoolVar(&c.Webhook, "webhook", false, "run webhook definitions (issue 22); destinations on loopback, private and link-local addresses need --webhook-allow")
	fs.StringSliceVar(&c.WebhookAllow, "webhook-allow", nil, "webhook destinations allowed beyond the public internet: host, *.domain, IP or CIDR, optionally namespace=entry; repeatable")
	fs.BoolVar(&c.WebhookStrict, "webhook-strict", false, "refuse public webhook destinations not on --webhook-allow too")
	fs.StringSliceVar(&c.CommandAllow, "command-allow", nil, "run command definitions of these programs (absolute paths; /bin/sh to allow \"shell\": true); repeatable")
	fs.StringVar(&c.WasmModules, "wasm-modules", "", "directory of WebAssembly modules by content hash; runs wasm definitions and takes module uploads")
	fs.IntVar(&c.WasmMaxModuleMB, "wasm-max-module-mb", 32, "largest WebAssembly module uploaded, in MiB")
	fs.IntVar(&c.WasmMaxMemoryMB, "wasm-max-memory-mb", wasm.DefaultMaxMemoryMB, "largest memory_mb a wasm definition may ask for")
	fs.StringSliceVar(&c.WasmAllowDirs, "wasm-allow-dir", nil, "host directories wasm definitions may mount; repeatable")
	fs.StringVar(&c.WasmCacheDir, "wasm-cache-dir", "", "directory keeping compiled WebAssembly modules across restarts")
	fs.StringVar(&c.SecretsDir, "secrets-dir", "", "directory of secrets (one file each) that executor configs name; JOBD_SECRET_<NAME> variables are read too")
}

// any reports whether a type is enabled.
func (c *ExecutorsConfig) any() bool {
	return c.Webhook || len(c.CommandAllow) > 0 || c.WasmModules != ""
}

// validate checks the flags against the namespaces served.
func (c *ExecutorsConfig) validate(namespaces []string) error {
	for _, e := range c.WebhookAllow {
		ns, entry, scoped := strings.Cut(e, "=")
		if !scoped {
			entry = ns
		} else if !containsString(namespaces, ns) {
			return usagef("--webhook-allow %q: namespace %q is not served (--namespace)", e, ns)
		}
		if _, err := guard.ParseAllowlist(entry); err != nil {
			return usagef("--webhook-allow %q: %v", e, err)
		}
	}
	if (len(c.WebhookAllow) > 0 || c.WebhookStrict) && !c.Webhook {
		return usagef("--webhook-allow and --webhook-strict need --webhook")
	}
	for _, p := range c.CommandAllow {
		if !strings.HasPrefix(p, "/") {
			return usagef("--command-allow %q: want an absolute path", p)
		}
	}
	if c.WasmMaxModuleMB < 1 || c.WasmMaxMemoryMB < 1 {
		return usagef("--wasm-max-module-mb and --wasm-max-memory-mb: want 1 or more")
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// executorTypes holds the types a jobd built once for all namespaces.
type executorTypes struct {
	cfg     *ExecutorsConfig
	secrets secrets.Resolver
	command *command.Type
	wasm    *wasm.Type
	modules *wasm.DirModules
}

// newExecutorTypes builds the node-wide types; nil when none is enabled.
func newExecutorTypes(c *ExecutorsConfig) (*executorTypes, error) {
	if !c.any() {
		return nil, nil
	}
	x := &executorTypes{cfg: c}
	var rs []secrets.Resolver
	if c.SecretsDir != "" {
		rs = append(rs, secrets.Dir(c.SecretsDir))
	}
	x.secrets = secrets.Chain(append(rs, secrets.Env(SecretEnvPrefix))...)
	if len(c.CommandAllow) > 0 {
		x.command = command.New(command.Options{Allow: c.CommandAllow, Secrets: x.secrets})
	}
	if c.WasmModules != "" {
		mods, err := wasm.NewDirModules(c.WasmModules, c.WasmMaxModuleMB<<20)
		if err != nil {
			return nil, fmt.Errorf("--wasm-modules: %w", err)
		}
		x.modules = mods
		x.wasm, err = wasm.New(wasm.Options{Modules: mods, MaxMemoryMB: c.WasmMaxMemoryMB, AllowDirs: c.WasmAllowDirs, CacheDir: c.WasmCacheDir})
		if err != nil {
			return nil, fmt.Errorf("--wasm-modules: %w", err)
		}
	}
	return x, nil
}

// forNamespace returns the manager option enabling the types in ns:
// webhooks get the namespace's allowlist.
func (x *executorTypes) forNamespace(ns string) (job.ManagerOption, error) {
	var types []job.ExecutorType
	if x.cfg.Webhook {
		var entries []string
		for _, e := range x.cfg.WebhookAllow {
			if scope, entry, scoped := strings.Cut(e, "="); !scoped {
				entries = append(entries, e)
			} else if scope == ns {
				entries = append(entries, entry)
			}
		}
		allow, err := guard.ParseAllowlist(entries...)
		if err != nil {
			return nil, usagef("--webhook-allow: %v", err)
		}
		allow.Strict = x.cfg.WebhookStrict
		types = append(types, webhook.New(webhook.Options{Guard: &guard.Guard{Allow: allow}, Secrets: x.secrets}))
	}
	if x.command != nil {
		types = append(types, x.command)
	}
	if x.wasm != nil {
		types = append(types, x.wasm)
	}
	return job.WithExecutorTypes(types...), nil
}

// moduleStore is where the API keeps uploaded modules; nil without
// --wasm-modules.
func (x *executorTypes) moduleStore() server.ModuleStore {
	if x == nil || x.modules == nil {
		return nil
	}
	return x.modules
}

// maxRequestBytes lets a request carry the largest module (0: the API's
// default).
func (x *executorTypes) maxRequestBytes() int {
	if x == nil || x.modules == nil {
		return 0
	}
	return max(x.modules.MaxBytes()+1<<20, 4<<20)
}

// close releases the wasm runtimes.
func (x *executorTypes) close() {
	if x != nil && x.wasm != nil {
		_ = x.wasm.Close(context.Background())
	}
}
