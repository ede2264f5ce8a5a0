module github.com/jobkit/job

go 1.26.0

require (
	github.com/google/btree v1.1.3
	github.com/google/uuid v1.6.0
	github.com/robfig/cron/v3 v3.0.1
	go.uber.org/goleak v1.3.0
)

require github.com/stretchr/testify v1.12.1 // indirect
