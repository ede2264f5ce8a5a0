// Package redistest runs the metrics Collector's checks
// (metrics/internal/collectortest) on the Redis store. It is a module of
// its own, which no released module requires, so that the metrics
// module's go.mod does not require the Redis plugin and go-redis: Go
// counts a module's test dependencies in the module graph of every
// program that uses it.
//
// Run with JOBKIT_REDIS_ADDR set to a redis-server, or without it to let
// the test start its own (see internal/testserver).
package redistest
