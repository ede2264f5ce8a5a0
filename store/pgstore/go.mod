module github.com/jobkit/job/store/pgstore

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/jobkit/job v0.1.0
)

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md); go.work does the same for
// commands run from the repository root.
replace github.com/jobkit/job => ../..
