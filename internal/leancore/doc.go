// Package leancore holds the test that keeps the core module lean: a
// program that imports only github.com/jobkit/job (the engine and the
// embedded memdb store) must not find gRPC, protobuf, etcd, Redis,
// Valkey, pgx or Prometheus anywhere in its module graph. Heavy clients
// live in their own modules (doc/design.md, "Module layout"); this test
// fails the build when one of them leaks back into the core's go.mod.
package leancore
