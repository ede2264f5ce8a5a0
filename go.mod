module github.com/jobkit/job

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/hashicorp/go-memdb v1.3.5
	github.com/robfig/cron/v3 v3.0.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/hashicorp/go-immutable-radix v1.3.1 // indirect
	github.com/hashicorp/golang-lru v0.5.4 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
)
