package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// The built-in executor types a Definition's Executor may name. The
// engine runs a definition naming one on the managers that enable the
// type (job.WithExecutorTypes); the store keeps the spec as data.
const (
	// ExecutorWebhook: a signed HTTP request built from the definition and
	// the instance's arguments.
	ExecutorWebhook = "webhook"
	// ExecutorCommand: a program from a node's allowlist, run in a
	// process group of its own.
	ExecutorCommand = "command"
	// ExecutorWasm: a WebAssembly module (WASI), stored by content hash.
	ExecutorWasm = "wasm"
)

// ExecutorTypes lists the executor types a definition may name, sorted.
var ExecutorTypes = []string{ExecutorCommand, ExecutorWasm, ExecutorWebhook}

// MaxExecutorConfigBytes bounds the JSON config of an ExecutorSpec.
const MaxExecutorConfigBytes = 64 << 10

// ExecutorSpec names the built-in executor that runs a kind, instead of a
// Go function registered under it, and holds its configuration. Config
// is the type's own JSON object (see the executors module's packages for
// each type's fields); it never holds a secret's value, only the name of
// a secret each node resolves from its own configuration (a "secret_ref").
type ExecutorSpec struct {
	// Type is one of ExecutorTypes.
	Type string `json:"type"`
	// Config is a JSON object of at most MaxExecutorConfigBytes, or empty
	// for the type's defaults. Validate rewrites it in canonical form
	// (CanonicalJSON), and a store that keeps JSON in a form of its own
	// (PostgreSQL's jsonb reorders keys) returns it in that form too, so
	// every store returns the bytes it was given after Validate.
	Config json.RawMessage `json:"config,omitempty"`
}

// Validate reports an unusable spec as ErrInvalid: an unknown type, a
// config that is not a JSON object or is over MaxExecutorConfigBytes. It
// rewrites Config in canonical form (see Config). A nil spec is
// valid (the kind is run by a Go function).
func (x *ExecutorSpec) Validate() error {
	if x == nil {
		return nil
	}
	if !slices.Contains(ExecutorTypes, x.Type) {
		return fmt.Errorf("%w: executor type %q; want one of %v", ErrInvalid, x.Type, ExecutorTypes)
	}
	if len(x.Config) > MaxExecutorConfigBytes {
		return fmt.Errorf("%w: %s executor config of %d bytes; keep it within %d (store large blobs, such as Wasm modules, by reference)", ErrInvalid, x.Type, len(x.Config), MaxExecutorConfigBytes)
	}
	if len(x.Config) == 0 {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(x.Config, &obj); err != nil {
		return fmt.Errorf("%w: %s executor config is not a JSON object: %v", ErrInvalid, x.Type, err)
	}
	b, err := CanonicalJSON(x.Config)
	if err != nil {
		return fmt.Errorf("%w: %s executor config: %v", ErrInvalid, x.Type, err)
	}
	if !bytes.Equal(b, x.Config) {
		x.Config = b
	}
	return nil
}

// Clone returns a deep copy of x.
func (x *ExecutorSpec) Clone() *ExecutorSpec {
	if x == nil {
		return nil
	}
	c := *x
	if x.Config != nil {
		c.Config = bytes.Clone(x.Config)
	}
	return &c
}

// CanonicalJSON returns the JSON value b as encoding/json writes it once
// decoded: compact, object keys sorted, <, > and & escaped, numbers as
// written (a store that reformats numbers, as jsonb does 1e2, may return
// them in its own form). Two encodings of the same value give the same
// bytes.
func CanonicalJSON(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return json.Marshal(v)
}
