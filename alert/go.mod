module github.com/jobkit/job/alert

go 1.26.0

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace github.com/jobkit/job => ..

require (
	github.com/emersion/go-sasl v0.0.0-20241020182733-b788ff22d5a6
	github.com/emersion/go-smtp v0.25.1
	github.com/jobkit/job v0.1.0
)

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
)
