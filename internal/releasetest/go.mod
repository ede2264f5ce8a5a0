module github.com/jobkit/job/internal/releasetest

go 1.26.0

require (
	github.com/jobkit/job v0.1.0
	golang.org/x/mod v0.42.0
)

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace github.com/jobkit/job => ../..
