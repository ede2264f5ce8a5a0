module github.com/jobkit/job/server

go 1.26.0

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace (
	github.com/jobkit/job => ..
	github.com/jobkit/job/api => ../api
)

require (
	connectrpc.com/grpchealth v1.5.0
	connectrpc.com/grpcreflect v1.3.1
	github.com/jobkit/job v0.0.0
	github.com/jobkit/job/api v0.0.0
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
