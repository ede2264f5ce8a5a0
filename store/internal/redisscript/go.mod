module github.com/jobkit/job/store/internal/redisscript

go 1.26.0

require github.com/jobkit/job v0.0.0

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md); go.work does the same for
// commands run from the repository root.
replace github.com/jobkit/job => ../../..
