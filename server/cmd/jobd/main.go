// Command jobd serves the jobkit.v1 API (gRPC, gRPC-Web and Connect/JSON on
// one port), /healthz, /readyz and /metrics on a store shared with the
// services that run the jobs: memdb (in process), Redis, Valkey, etcd or
// PostgreSQL (after jobd migrate).
// Several jobd on one store serve the same data with no leader; SIGTERM
// drains one. With no flags it serves the embedded memdb store on
// 127.0.0.1:8080:
//
//	go run ./cmd/jobd
//	jobd --store redis --redis-addr 10.0.0.5:6379 --namespace prod --namespace staging
//	jobd migrate --store postgres --pg-url ...
//	jobd version
//
// doc/server.md describes every flag, environment variable and
// configuration key, and how to secure and scale it.
package main

import (
	"os"

	"github.com/jobkit/job/server/internal/jobd"
)

func main() {
	os.Exit(jobd.Main(os.Args[1:], os.Stdout, os.Stderr))
}
