module github.com/jobkit/job/examples/remote

go 1.26.0

require (
	github.com/jobkit/job v0.1.0
	github.com/jobkit/job/api v0.1.0
	github.com/jobkit/job/server v0.1.0
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	connectrpc.com/grpchealth v1.5.0 // indirect
	connectrpc.com/grpcreflect v1.3.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/emersion/go-ical v0.0.0-20250329121855-f41e73efc392 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jobkit/job/alert v0.1.0 // indirect
	github.com/jobkit/job/icalimport v0.1.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/teambition/rrule-go v1.8.2 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.opentelemetry.io/otel v1.45.0 // indirect
	go.opentelemetry.io/otel/trace v1.45.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace (
	github.com/jobkit/job => ../..
	github.com/jobkit/job/alert => ../../alert
	github.com/jobkit/job/api => ../../api
	github.com/jobkit/job/executors => ../../executors
	github.com/jobkit/job/icalimport => ../../icalimport
	github.com/jobkit/job/metrics => ../../metrics
	github.com/jobkit/job/otel => ../../otel
	github.com/jobkit/job/server => ../../server
	github.com/jobkit/job/store/etcdstore => ../../store/etcdstore
	github.com/jobkit/job/store/internal/redisscript => ../../store/internal/redisscript
	github.com/jobkit/job/store/internal/redisscript/scripttest => ../../store/internal/redisscript/scripttest
	github.com/jobkit/job/store/pgstore => ../../store/pgstore
	github.com/jobkit/job/store/redisstore => ../../store/redisstore
	github.com/jobkit/job/store/valkeystore => ../../store/valkeystore
)
