// Package redistest holds jobotel's tests that trace jobs across two
// managers sharing a Redis store (two processes, each with its own
// TracerProvider). It is a module of its own, which no released module
// requires, so that the otel module's go.mod does not require the Redis
// plugin and go-redis: Go counts a module's test dependencies in the
// module graph of every program that uses it.
//
// Run with JOBKIT_REDIS_ADDR set to a redis-server, or without it to let
// the tests start their own (see internal/testserver).
package redistest
