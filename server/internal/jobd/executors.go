package jobd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/command"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/executors/webhook"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store"
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
	// Wasm enables the wasm type with modules kept in the store, so every
	// node on it (and namespace) runs the modules any was given (--wasm).
	Wasm bool
	// WasmModules, when set, keeps modules in this directory by content
	// hash instead, and enables the wasm type (--wasm-modules).
	WasmModules string
	// WasmMaxModuleMB bounds an uploaded module (--wasm-max-module-mb).
	WasmMaxModuleMB int
	// WasmMaxMemoryMB bounds a definition's memory_mb (--wasm-max-memory-mb).
	WasmMaxMemoryMB int
	// WasmAllowDirs lists host directories definitions may mount.
	WasmAllowDirs []string
	// WasmCacheDir keeps compiled modules across restarts.
	WasmCacheDir string
	// WasmModuleGrace is how long an uploaded module no definition names
	// is kept after its last upload before it is deleted
	// (--wasm-module-grace; 0: wasm.DefaultModuleGrace).
	WasmModuleGrace time.Duration
	// WasmCollectEvery is how often the unused modules are collected
	// (--wasm-collect-every); 0 never.
	WasmCollectEvery time.Duration
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
	fs.BoolVar(&c.Wasm, "wasm", false, "run wasm definitions, with the modules uploaded kept in the store (shared by every node on it)")
	fs.StringVar(&c.WasmModules, "wasm-modules", "", "keep WebAssembly modules in this directory by content hash instead of the store (implies --wasm)")
	fs.IntVar(&c.WasmMaxModuleMB, "wasm-max-module-mb", 32, "largest WebAssembly module uploaded, in MiB")
	fs.IntVar(&c.WasmMaxMemoryMB, "wasm-max-memory-mb", wasm.DefaultMaxMemoryMB, "largest memory_mb a wasm definition may ask for")
	fs.StringSliceVar(&c.WasmAllowDirs, "wasm-allow-dir", nil, "host directories wasm definitions may mount; repeatable")
	fs.StringVar(&c.WasmCacheDir, "wasm-cache-dir", "", "directory keeping compiled WebAssembly modules across restarts")
	fs.DurationVar(&c.WasmModuleGrace, "wasm-module-grace", wasm.DefaultModuleGrace, "keep an uploaded WebAssembly module no definition names this long after its last upload, then delete it")
	fs.DurationVar(&c.WasmCollectEvery, "wasm-collect-every", wasm.DefaultCollectEvery, "how often to delete the WebAssembly modules no definition names (0: never)")
	fs.StringVar(&c.SecretsDir, "secrets-dir", "", "directory of secrets (one file each) that executor configs name; JOBD_SECRET_<NAME> variables are read too")
}

// any reports whether a type is enabled.
func (c *ExecutorsConfig) any() bool {
	return c.Webhook || len(c.CommandAllow) > 0 || c.wasm()
}

// wasm reports whether the wasm type is enabled.
func (c *ExecutorsConfig) wasm() bool { return c.Wasm || c.WasmModules != "" }

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
	if (c.WasmModuleGrace != 0 && c.WasmModuleGrace < time.Minute) || c.WasmCollectEvery < 0 {
		return usagef("--wasm-module-grace %v, --wasm-collect-every %v: want a grace of a minute or more (an upload and the definition naming it must fit in it), and an interval of 0 (never) or more", c.WasmModuleGrace, c.WasmCollectEvery)
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

// executorTypes holds the types a jobd built once for all namespaces,
// and the wasm types of namespaces keeping their modules in the store.
type executorTypes struct {
	cfg     *ExecutorsConfig
	secrets secrets.Resolver
	command *command.Type
	wasm    *wasm.Type       // with --wasm-modules: one for the node
	modules *wasm.DirModules // with --wasm-modules

	mu         sync.Mutex
	wasmByNS   map[string]*wasm.Type
	modulesByN map[string]*wasm.StoreModules
}

// newExecutorTypes builds the node-wide types; nil when none is enabled.
func newExecutorTypes(c *ExecutorsConfig) (*executorTypes, error) {
	if !c.any() {
		return nil, nil
	}
	x := &executorTypes{cfg: c, wasmByNS: map[string]*wasm.Type{}, modulesByN: map[string]*wasm.StoreModules{}}
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

// forNamespace returns the manager option enabling the types in ns, whose
// store is st: webhooks get the namespace's allowlist, and without
// --wasm-modules the wasm type keeps its modules in st.
func (x *executorTypes) forNamespace(ns string, st store.Store) (job.ManagerOption, error) {
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
		types = append(types, webhook.New(webhook.Options{Guard: &guard.Guard{Allow: allow, AllowName: "jobd's --webhook-allow"}, Secrets: x.secrets}))
	}
	if x.command != nil {
		types = append(types, x.command)
	}
	switch {
	case x.wasm != nil:
		types = append(types, x.wasm)
	case x.cfg.Wasm:
		mods := wasm.NewStoreModules(st, x.cfg.WasmMaxModuleMB<<20)
		wt, err := wasm.New(wasm.Options{Modules: mods, MaxMemoryMB: x.cfg.WasmMaxMemoryMB, AllowDirs: x.cfg.WasmAllowDirs, CacheDir: x.cfg.WasmCacheDir})
		if err != nil {
			return nil, fmt.Errorf("--wasm: %w", err)
		}
		x.mu.Lock()
		x.wasmByNS[ns], x.modulesByN[ns] = wt, mods
		x.mu.Unlock()
		types = append(types, wt)
	}
	return job.WithExecutorTypes(types...), nil
}

// moduleStore is where the API keeps the modules uploaded to namespace
// ns; nil without the wasm type.
func (x *executorTypes) moduleStore(ns string) server.ModuleStore {
	switch {
	case x == nil:
		return nil
	case x.modules != nil:
		return checkedModules{x.modules}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if m := x.modulesByN[ns]; m != nil {
		return checkedModules{m}
	}
	return nil
}

// startCollectors starts deleting the modules no definition names
// (issue 22): one collector per namespace keeping its modules in its
// store, or one for --wasm-modules reading every namespace's definitions.
// The returned func stops them and waits.
func (x *executorTypes) startCollectors(ctx context.Context, stores map[string]store.Store, log *slog.Logger) (stop func()) {
	if x == nil || !x.cfg.wasm() || x.cfg.WasmCollectEvery <= 0 {
		return func() {}
	}
	var cs []*wasm.Collector
	report := func(where string) func([]string, error) {
		return func(deleted []string, err error) {
			if err != nil {
				log.Warn("wasm modules: collecting the unused ones failed; retrying at the next pass", "modules", where, "error", err)
			}
			if len(deleted) > 0 {
				log.Info("wasm modules: deleted modules no definition names", "modules", where, "deleted", deleted)
			}
		}
	}
	grace, every := x.cfg.WasmModuleGrace, x.cfg.WasmCollectEvery
	if x.modules != nil {
		var defs []wasm.DefinitionLister
		for _, st := range stores {
			defs = append(defs, st)
		}
		cs = append(cs, &wasm.Collector{Modules: x.modules, Defs: defs, Grace: grace, Every: every, Report: report(x.cfg.WasmModules)})
	} else {
		x.mu.Lock()
		for ns, mods := range x.modulesByN {
			if st := stores[ns]; st != nil {
				cs = append(cs, &wasm.Collector{Modules: mods, Defs: []wasm.DefinitionLister{st}, Grace: grace, Every: every, Report: report("namespace " + ns)})
			}
		}
		x.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Run(ctx) })
	}
	return func() { cancel(); wg.Wait() }
}

// checkedModules is a module store that can also check a module without
// storing it (server.ModuleChecker, for validate-only requests).
type checkedModules struct {
	mods interface {
		Put([]byte) (string, error)
		MaxBytes() int
	}
}

// Put checks and stores b.
func (c checkedModules) Put(b []byte) (string, error) { return c.mods.Put(b) }

// Check checks b as Put does and returns its reference, storing nothing.
func (c checkedModules) Check(b []byte) (string, error) {
	if err := wasm.CheckModule(b, c.mods.MaxBytes()); err != nil {
		return "", err
	}
	return wasm.Ref(b), nil
}

// maxRequestBytes lets a request carry the largest module (0: the API's
// default).
func (x *executorTypes) maxRequestBytes() int {
	if x == nil || !x.cfg.wasm() {
		return 0
	}
	return max(x.cfg.WasmMaxModuleMB<<20+1<<20, 4<<20)
}

// close releases the wasm runtimes.
func (x *executorTypes) close() {
	if x == nil {
		return
	}
	if x.wasm != nil {
		_ = x.wasm.Close(context.Background())
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, wt := range x.wasmByNS {
		_ = wt.Close(context.Background())
	}
}
