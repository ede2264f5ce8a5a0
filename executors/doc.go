// Package executors holds jobkit's built-in executor types, which run job
// definitions stored as data with no Go code (issue 22): webhook (a
// signed HTTP request), command (an allowlisted program in a process
// group of its own) and wasm (a WebAssembly module under wazero). Each is
// a job.ExecutorType; enable them on a manager with job.WithExecutorTypes,
// or on jobd with its --webhook, --command-allow and --wasm flags. See
// doc/executors.md.
//
// It is a module of its own so that wazero stays out of the core module.
package executors
