module github.com/jobkit/job/api

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/jobkit/job v0.0.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)

replace github.com/jobkit/job => ../
