// Package wasm is the WebAssembly executor type: each attempt runs a WASI
// (preview 1) module under wazero, pure Go with no cgo.
//
// A definition's config (store.ExecutorSpec.Config):
//
//	{
//	  "module": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
//	  "memory_mb": 64,            // default 64, at most the node's limit
//	  "timeout": "10s",           // default 30s, at most the node's limit
//	  "args": ["--verbose"],      // the module's argv after its name
//	  "env": {"MODE": "fast"},
//	  "mounts": [{"host": "/srv/data", "guest": "/data", "read_only": true}]
//	}
//
// module names a module by the SHA-256 of its bytes, as Modules.Put
// returns it; the module is read from the node's Modules (uploaded
// through the API with a definition, or put there by the operator). The
// instance's arguments are the module's stdin, as a JSON array; what it
// writes to stdout, which must be JSON (or nothing), is the result; each
// line on stderr goes to the instance's log. Exit status 0 completes the
// instance; a trap (unreachable, out-of-bounds access, a failed memory
// growth), a module that is not Wasm and a module missing from this node
// end it at once (job.Permanent); another exit status and running past
// the time limit fail the attempt, retried per the job's policy.
//
// A module gets no filesystem and no network (WASI preview 1 has no
// sockets, and none are preopened), only the real clocks and a random
// source, unless the definition mounts a directory the node allows
// (Options.AllowDirs). Compiled modules are cached per node (Options.Cache
// modules, least recently used out first).
package wasm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"

	"github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// Config is a definition's wasm config; see the package documentation.
type Config struct {
	Module   string            `json:"module"`
	MemoryMB int               `json:"memory_mb,omitempty"`
	Timeout  string            `json:"timeout,omitempty"`
	Args     []string          `json:"args,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Mounts   []Mount           `json:"mounts,omitempty"`
}

// Mount grants a module a host directory, which the node must allow.
type Mount struct {
	Host     string `json:"host"`
	Guest    string `json:"guest"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Defaults and bounds.
const (
	DefaultMemoryMB      = 64
	DefaultMaxMemoryMB   = 1024
	DefaultTimeout       = 30 * time.Second
	DefaultMaxTimeout    = 10 * time.Minute
	DefaultMaxModuleSize = 32 << 20
	DefaultCache         = 64
	maxStdout            = 1 << 20
	maxLogLines          = 10000
	maxLineBytes         = 4 << 10
)

// Errors of the type.
var (
	// ErrConfig: a config that can work nowhere.
	ErrConfig = errors.New("wasm executor: invalid config")
	// ErrModule: bytes that are not a usable Wasm module, or one over the
	// size limit.
	ErrModule = errors.New("wasm executor: invalid module")
	// ErrNoModule: the module is not on this node.
	ErrNoModule = errors.New("wasm executor: module not found")
	// ErrTrap: the module trapped.
	ErrTrap = errors.New("wasm executor: module trapped")
	// ErrTimeLimit: the module ran past its time limit.
	ErrTimeLimit = errors.New("wasm executor: time limit exceeded")
)

// Options configure the type on a node.
type Options struct {
	// Modules holds the modules by content hash. Required.
	Modules Modules
	// MaxMemoryMB bounds a definition's memory_mb. Defaults to
	// DefaultMaxMemoryMB.
	MaxMemoryMB int
	// MaxTimeout bounds a definition's timeout. Defaults to
	// DefaultMaxTimeout.
	MaxTimeout time.Duration
	// AllowDirs lists the host directories definitions may mount (a
	// mount's host must be one of them or under one). Empty: no mounts.
	AllowDirs []string
	// Cache is how many compiled modules the node keeps in memory.
	// Defaults to DefaultCache.
	Cache int
	// CacheDir, when set, keeps compiled code in that directory too, so a
	// restarted node (or another Type on the same machine) skips the
	// compilation: a Go-built module of 3 MB takes seconds to compile.
	CacheDir string
	// Interpreter runs modules in wazero's interpreter instead of
	// compiling them to machine code: it starts a new module at once but
	// runs it several times slower. Defaults to false (the compiler).
	Interpreter bool
}

// Type is the wasm executor type; create it with New and Close it when
// done.
type Type struct {
	opts  Options
	cache wazero.CompilationCache

	mu       sync.Mutex
	runtimes map[uint32]*runtimeEntry // by memory limit in pages
	tick     uint64
}

type runtimeEntry struct {
	rt      wazero.Runtime
	modules map[string]*cachedModule
}

type cachedModule struct {
	mod  wazero.CompiledModule
	used uint64
}

// New returns the wasm executor type configured by opts.
func New(opts Options) (*Type, error) {
	if opts.Modules == nil {
		return nil, fmt.Errorf("%w: Options.Modules is nil; give the node a module store (DirModules)", ErrConfig)
	}
	if opts.MaxMemoryMB <= 0 {
		opts.MaxMemoryMB = DefaultMaxMemoryMB
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = DefaultMaxTimeout
	}
	if opts.Cache <= 0 {
		opts.Cache = DefaultCache
	}
	cache := wazero.NewCompilationCache()
	if opts.CacheDir != "" {
		c, err := wazero.NewCompilationCacheWithDir(opts.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm executor: cache directory: %w", err)
		}
		cache = c
	}
	return &Type{opts: opts, cache: cache, runtimes: map[uint32]*runtimeEntry{}}, nil
}

// Type returns store.ExecutorWasm.
func (*Type) Type() string { return store.ExecutorWasm }

// Close releases the runtimes and compiled modules.
func (t *Type) Close(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.runtimes {
		_ = e.rt.Close(ctx)
		delete(t.runtimes, k)
	}
	return t.cache.Close(ctx)
}

// ParseConfig decodes and checks a wasm config against the node's
// bounds; a config that can work nowhere is an error wrapping ErrConfig.
func (t *Type) ParseConfig(raw []byte) (*Config, time.Duration, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, 0, fmt.Errorf("%w: %v (fields: module, memory_mb, timeout, args, env, mounts)", ErrConfig, err)
	}
	if _, err := ParseRef(c.Module); err != nil {
		return nil, 0, fmt.Errorf("%w: module: %v", ErrConfig, err)
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = DefaultMemoryMB
	}
	if c.MemoryMB < 1 || c.MemoryMB > t.opts.MaxMemoryMB {
		return nil, 0, fmt.Errorf("%w: memory_mb %d; want 1 to %d", ErrConfig, c.MemoryMB, t.opts.MaxMemoryMB)
	}
	timeout := DefaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return nil, 0, fmt.Errorf("%w: timeout %q; want a Go duration such as \"10s\"", ErrConfig, c.Timeout)
		}
		timeout = d
	}
	if timeout > t.opts.MaxTimeout {
		return nil, 0, fmt.Errorf("%w: timeout %v; this node allows at most %v", ErrConfig, timeout, t.opts.MaxTimeout)
	}
	for k, v := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, 0, fmt.Errorf("%w: env %q", ErrConfig, k)
		}
	}
	for _, a := range c.Args {
		if strings.ContainsRune(a, 0) {
			return nil, 0, fmt.Errorf("%w: an arg holds a NUL byte", ErrConfig)
		}
	}
	for _, m := range c.Mounts {
		if !filepath.IsAbs(m.Host) || !strings.HasPrefix(m.Guest, "/") {
			return nil, 0, fmt.Errorf("%w: mount %q → %q; want absolute paths", ErrConfig, m.Host, m.Guest)
		}
	}
	return &c, timeout, nil
}

// New builds the executor of a definition. The module is read and
// compiled at its first attempt on this node, then cached.
func (t *Type) New(d *job.Definition) (job.DataExecutor, error) {
	c, timeout, err := t.ParseConfig(d.Executor.Config)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, inst job.Instance, args []json.RawMessage) (any, error) {
		return t.run(ctx, c, timeout, inst, args)
	}, nil
}

// Compile compiles and caches ref's module for memoryMB (0: the default)
// without running it; Run does it on first use. It is what a node can do
// ahead of time, and how the cold start is measured.
func (t *Type) Compile(ctx context.Context, ref string, memoryMB int) error {
	if memoryMB == 0 {
		memoryMB = DefaultMemoryMB
	}
	_, _, err := t.compiled(ctx, ref, uint32(memoryMB*16))
	return err
}

// compiled returns the runtime for a memory limit and ref's module
// compiled on it.
func (t *Type) compiled(ctx context.Context, ref string, pages uint32) (wazero.Runtime, wazero.CompiledModule, error) {
	t.mu.Lock()
	e := t.runtimes[pages]
	if e == nil {
		cfg := wazero.NewRuntimeConfig()
		if t.opts.Interpreter {
			cfg = wazero.NewRuntimeConfigInterpreter()
		}
		cfg = cfg.WithMemoryLimitPages(pages).WithCloseOnContextDone(true).WithCompilationCache(t.cache)
		rt := wazero.NewRuntimeWithConfig(context.Background(), cfg)
		if _, err := wasi_snapshot_preview1.Instantiate(context.Background(), rt); err != nil {
			t.mu.Unlock()
			return nil, nil, fmt.Errorf("wasm executor: WASI: %w", err)
		}
		e = &runtimeEntry{rt: rt, modules: map[string]*cachedModule{}}
		t.runtimes[pages] = e
	}
	t.tick++
	if cm := e.modules[ref]; cm != nil {
		cm.used = t.tick
		t.mu.Unlock()
		return e.rt, cm.mod, nil
	}
	t.mu.Unlock()

	b, err := t.opts.Modules.Get(ref)
	if err != nil {
		return nil, nil, err
	}
	mod, err := e.rt.CompileModule(ctx, b)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrModule, ref, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if cm := e.modules[ref]; cm != nil { // compiled meanwhile by another attempt
		_ = mod.Close(context.Background())
		return e.rt, cm.mod, nil
	}
	t.evictLocked()
	t.tick++
	e.modules[ref] = &cachedModule{mod: mod, used: t.tick}
	return e.rt, mod, nil
}

// evictLocked drops the least recently used module once the node keeps
// Options.Cache of them. A module still running keeps working: wazero
// closes compiled code only when no instance uses it.
func (t *Type) evictLocked() {
	n := 0
	for _, e := range t.runtimes {
		n += len(e.modules)
	}
	for n >= t.opts.Cache {
		var oldE *runtimeEntry
		var oldK string
		var oldU uint64
		for _, e := range t.runtimes {
			for k, cm := range e.modules {
				if oldE == nil || cm.used < oldU {
					oldE, oldK, oldU = e, k, cm.used
				}
			}
		}
		if oldE == nil {
			return
		}
		_ = oldE.modules[oldK].mod.Close(context.Background())
		delete(oldE.modules, oldK)
		n--
	}
}

func (t *Type) run(ctx context.Context, c *Config, timeout time.Duration, inst job.Instance, args []json.RawMessage) (any, error) {
	rt, mod, err := t.compiled(ctx, c.Module, uint32(c.MemoryMB*16))
	if err != nil {
		if errors.Is(err, ErrModule) || errors.Is(err, ErrNoModule) {
			return nil, job.Permanent(err)
		}
		return nil, err
	}
	stdin, _ := json.Marshal(args)
	if len(args) == 0 {
		stdin = []byte("[]")
	}
	var stdout limitedBuffer
	stdout.max = maxStdout
	stderr := &lineWriter{logf: inst.Infof}
	mc := wazero.NewModuleConfig().WithName("").WithArgs(append([]string{inst.Info().Kind}, c.Args...)...).
		WithStdin(bytes.NewReader(stdin)).WithStdout(&stdout).WithStderr(stderr).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().WithRandSource(rand.Reader)
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		mc = mc.WithEnv(k, c.Env[k])
	}
	if len(c.Mounts) > 0 {
		fsc := wazero.NewFSConfig()
		for _, m := range c.Mounts {
			if !t.dirAllowed(m.Host) {
				return nil, job.Permanent(fmt.Errorf("%w: mount of %s: not under a directory this node allows (jobd --wasm-allow-dir)", ErrConfig, m.Host))
			}
			if m.ReadOnly {
				fsc = fsc.WithReadOnlyDirMount(m.Host, m.Guest)
			} else {
				fsc = fsc.WithDirMount(m.Host, m.Guest)
			}
		}
		mc = mc.WithFSConfig(fsc)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	m, err := rt.InstantiateModule(rctx, mod, mc)
	if m != nil {
		_ = m.Close(context.Background())
	}
	stderr.flush()
	if err != nil {
		var exit *sys.ExitError
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("wasm module %s stopped: %w", short(c.Module), context.Cause(ctx))
		case rctx.Err() != nil:
			inst.Warnf("wasm module %s: time limit %v exceeded", short(c.Module), timeout)
			return nil, fmt.Errorf("%w: module %s ran past %v", ErrTimeLimit, short(c.Module), timeout)
		case errors.As(err, &exit):
			return nil, fmt.Errorf("wasm module %s: exit status %d", short(c.Module), exit.ExitCode())
		case stdout.over:
			return nil, job.Permanent(fmt.Errorf("%w: module %s wrote over %d bytes to stdout", ErrModule, short(c.Module), maxStdout))
		default:
			inst.Errorf("wasm module %s trapped after %v: %v", short(c.Module), time.Since(start).Round(time.Millisecond), err)
			return nil, job.Permanent(fmt.Errorf("%w: module %s: %v", ErrTrap, short(c.Module), err))
		}
	}
	out := bytes.TrimSpace(stdout.Bytes())
	if len(out) == 0 {
		return nil, nil
	}
	if !json.Valid(out) {
		return nil, job.Permanent(fmt.Errorf("wasm module %s: stdout is not JSON (%d bytes); write the result as one JSON value", short(c.Module), len(out)))
	}
	return json.RawMessage(out), nil
}

func (t *Type) dirAllowed(host string) bool {
	host = filepath.Clean(host)
	for _, d := range t.opts.AllowDirs {
		d = filepath.Clean(d)
		if host == d || strings.HasPrefix(host, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func short(ref string) string {
	if len(ref) > 19 {
		return ref[:19]
	}
	return ref
}

type limitedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		b.over = true
		return 0, errors.New("stdout limit reached")
	}
	return b.Buffer.Write(p)
}

// lineWriter writes whole lines to logf, bounded.
type lineWriter struct {
	logf  func(string, ...any)
	buf   []byte
	lines int
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > maxLineBytes {
				w.emit(w.buf[:maxLineBytes])
				w.buf = append(w.buf[:0], w.buf[maxLineBytes:]...)
				continue
			}
			return len(p), nil
		}
		w.emit(w.buf[:i])
		w.buf = append(w.buf[:0], w.buf[i+1:]...)
	}
}

func (w *lineWriter) emit(line []byte) {
	w.lines++
	switch {
	case w.lines <= maxLogLines:
		w.logf("%s", strings.ToValidUTF8(strings.TrimRight(string(line), "\r"), "\uFFFD"))
	case w.lines == maxLogLines+1:
		w.logf("stderr beyond %d lines is not logged", maxLogLines)
	}
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

// Modules holds Wasm modules by content hash ("sha256:<hex>").
type Modules interface {
	// Put stores b after checking it is a Wasm binary within the size
	// limit, and returns its reference.
	Put(b []byte) (ref string, err error)
	// Get returns the module of ref: ErrNoModule when absent.
	Get(ref string) ([]byte, error)
}

// Ref returns the reference of module bytes b: "sha256:" and the hex
// SHA-256 of b.
func Ref(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseRef checks a module reference and returns its hex digest.
func ParseRef(ref string) (string, error) {
	h, ok := strings.CutPrefix(ref, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("%q is not a module reference; want sha256:<64 hex digits>, as jobctl prints it after an upload", ref)
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return "", fmt.Errorf("%q is not a module reference; want sha256:<64 lowercase hex digits>", ref)
	}
	return h, nil
}

var wasmMagic = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// CheckModule reports bytes that cannot be a Wasm module (no magic
// number, version 1) or are over max bytes, as ErrModule.
func CheckModule(b []byte, max int) error {
	if len(b) > max {
		return fmt.Errorf("%w: %d bytes; the limit is %d", ErrModule, len(b), max)
	}
	if !bytes.HasPrefix(b, wasmMagic) {
		return fmt.Errorf("%w: not a WebAssembly binary (no \\0asm version 1 header); build it with GOOS=wasip1 GOARCH=wasm", ErrModule)
	}
	return nil
}

// DirModules keeps modules as files named by their digest in a
// directory, which several nodes may share (a network mount) or each
// receive the same uploads. A file whose bytes do not match its name is
// refused on read.
type DirModules struct {
	dir string
	max int
}

// NewDirModules returns the modules of dir (created if missing), each at
// most maxBytes (0: DefaultMaxModuleSize).
func NewDirModules(dir string, maxBytes int) (*DirModules, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxModuleSize
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("wasm modules directory: %w", err)
	}
	return &DirModules{dir: dir, max: maxBytes}, nil
}

// MaxBytes returns the size limit of a module.
func (d *DirModules) MaxBytes() int { return d.max }

// Put implements Modules.
func (d *DirModules) Put(b []byte) (string, error) {
	if err := CheckModule(b, d.max); err != nil {
		return "", err
	}
	ref := Ref(b)
	h, _ := ParseRef(ref)
	final := filepath.Join(d.dir, h+".wasm")
	if _, err := os.Stat(final); err == nil {
		// Refresh its time: Collect keeps it another grace period.
		now := time.Now()
		if err := os.Chtimes(final, now, now); err == nil {
			return ref, nil
		}
	}
	f, err := os.CreateTemp(d.dir, ".upload-*")
	if err != nil {
		return "", fmt.Errorf("wasm modules: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("wasm modules: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("wasm modules: %w", err)
	}
	if err := os.Rename(f.Name(), final); err != nil {
		return "", fmt.Errorf("wasm modules: %w", err)
	}
	return ref, nil
}

// Get implements Modules.
func (d *DirModules) Get(ref string) ([]byte, error) {
	h, err := ParseRef(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoModule, err)
	}
	f, err := os.Open(filepath.Join(d.dir, h+".wasm"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s is not in this node's module directory; upload it (jobctl definition create --wasm-file) or copy it there", ErrNoModule, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("wasm modules: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(bufio.NewReader(io.LimitReader(f, int64(d.max)+1)))
	if err != nil {
		return nil, fmt.Errorf("wasm modules: %w", err)
	}
	if Ref(b) != ref {
		return nil, fmt.Errorf("%w: the file of %s does not hash to it (changed on disk?); upload the module again", ErrModule, ref)
	}
	return b, nil
}
