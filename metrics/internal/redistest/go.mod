module github.com/jobkit/job/metrics/internal/redistest

go 1.26.0

require (
	github.com/jobkit/job v0.1.0
	github.com/jobkit/job/metrics v0.1.0
	github.com/jobkit/job/store/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jobkit/job/store/internal/redisscript v0.1.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.67.5 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md); go.work does the same for
// commands run from the repository root.
replace (
	github.com/jobkit/job => ../../..
	github.com/jobkit/job/metrics => ../..
	github.com/jobkit/job/store/internal/redisscript => ../../../store/internal/redisscript
	github.com/jobkit/job/store/internal/redisscript/scripttest => ../../../store/internal/redisscript/scripttest
	github.com/jobkit/job/store/redisstore => ../../../store/redisstore
)
