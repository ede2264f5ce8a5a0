module github.com/jobkit/job/server

go 1.26.0

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md).
replace (
	github.com/jobkit/job => ..
	github.com/jobkit/job/alert => ../alert
	github.com/jobkit/job/api => ../api
	github.com/jobkit/job/executors => ../executors
	github.com/jobkit/job/icalimport => ../icalimport
	github.com/jobkit/job/metrics => ../metrics
	github.com/jobkit/job/otel => ../otel
	github.com/jobkit/job/store/etcdstore => ../store/etcdstore
	github.com/jobkit/job/store/internal/redisscript => ../store/internal/redisscript
	github.com/jobkit/job/store/internal/redisscript/scripttest => ../store/internal/redisscript/scripttest
	github.com/jobkit/job/store/pgstore => ../store/pgstore
	github.com/jobkit/job/store/redisstore => ../store/redisstore
	github.com/jobkit/job/store/valkeystore => ../store/valkeystore
)

require (
	connectrpc.com/connect v1.21.1
	connectrpc.com/grpchealth v1.5.0
	connectrpc.com/grpcreflect v1.3.1
	github.com/chromedp/chromedp v0.23.0
	github.com/emersion/go-sasl v0.0.0-20241020182733-b788ff22d5a6
	github.com/emersion/go-smtp v0.25.1
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/jobkit/job v0.1.0
	github.com/jobkit/job/alert v0.1.0
	github.com/jobkit/job/api v0.1.0
	github.com/jobkit/job/executors v0.1.0
	github.com/jobkit/job/metrics v0.1.0
	github.com/jobkit/job/otel v0.1.0
	github.com/jobkit/job/store/etcdstore v0.1.0
	github.com/jobkit/job/store/pgstore v0.1.0
	github.com/jobkit/job/store/redisstore v0.1.0
	github.com/jobkit/job/store/valkeystore v0.1.0
	github.com/prometheus/client_golang v1.23.2
	github.com/prometheus/client_model v0.6.2
	github.com/prometheus/common v0.67.5
	github.com/redis/go-redis/v9 v9.23.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.10
	github.com/valkey-io/valkey-go v1.0.79
	go.etcd.io/etcd/client/v3 v3.7.3
	go.opentelemetry.io/otel v1.45.0
	go.yaml.in/yaml/v3 v3.0.6
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/emersion/go-ical v0.0.0-20250329121855-f41e73efc392 // indirect
	github.com/teambition/rrule-go v1.8.2 // indirect
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/chromedp/cdproto v0.159.0
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.29.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jobkit/job/icalimport v0.1.0
	github.com/jobkit/job/store/internal/redisscript v0.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/tetratelabs/wazero v1.12.0 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.etcd.io/etcd/api/v3 v3.7.3 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.7.3 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/metric v1.45.0 // indirect
	go.opentelemetry.io/otel/trace v1.45.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)
