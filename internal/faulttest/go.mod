module github.com/jobkit/job/internal/faulttest

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.12.0
	github.com/jobkit/job v0.1.0
	github.com/jobkit/job/api v0.1.0
	github.com/jobkit/job/store/etcdstore v0.1.0
	github.com/jobkit/job/store/pgstore v0.1.0
	github.com/jobkit/job/store/redisstore v0.1.0
	github.com/jobkit/job/store/valkeystore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/valkey-io/valkey-go v1.0.79
	go.etcd.io/etcd/client/v3 v3.7.3
)

require (
	connectrpc.com/connect v1.21.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coreos/go-semver v0.3.1 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/grpc-ecosystem/grpc-gateway/v2 v2.29.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jobkit/job/store/internal/redisscript v0.1.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/vmihailenco/msgpack/v5 v5.4.1 // indirect
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	go.etcd.io/etcd/api/v3 v3.7.3 // indirect
	go.etcd.io/etcd/client/pkg/v3 v3.7.3 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/net v0.61.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/genproto/googleapis/api v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260803160001-6ac0973c030d // indirect
	google.golang.org/grpc v1.83.2 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// The repository's other modules build against their current code here
// (see "Module layout" in doc/design.md); go.work does the same for
// commands run from the repository root.
replace (
	github.com/jobkit/job => ../..
	github.com/jobkit/job/api => ../../api
	github.com/jobkit/job/store/etcdstore => ../../store/etcdstore
	github.com/jobkit/job/store/internal/redisscript => ../../store/internal/redisscript
	github.com/jobkit/job/store/internal/redisscript/scripttest => ../../store/internal/redisscript/scripttest
	github.com/jobkit/job/store/pgstore => ../../store/pgstore
	github.com/jobkit/job/store/redisstore => ../../store/redisstore
	github.com/jobkit/job/store/valkeystore => ../../store/valkeystore
)
