//go:build race

package wasm_test

// Under the race detector wazero's compiler takes minutes for a Go-built
// module of 3 MB (about 100 s here, against 6 to 10 s without it), so
// the tests that run Go-built modules use the interpreter then.
const raceEnabled = true
