module github.com/jobkit/job/icalimport

go 1.26.0

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace github.com/jobkit/job => ..

require (
	github.com/emersion/go-ical v0.0.0-20250329121855-f41e73efc392
	github.com/jobkit/job v0.1.0
	github.com/teambition/rrule-go v1.8.2
)

require github.com/robfig/cron/v3 v3.0.1 // indirect
