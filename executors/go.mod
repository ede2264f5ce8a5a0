module github.com/jobkit/job/executors

go 1.26.0

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace github.com/jobkit/job => ..

require (
	github.com/jobkit/job v0.1.0
	github.com/tetratelabs/wazero v1.12.0
)

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/sys v0.44.0 // indirect
)
