package jobd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/memdbstore"
	"github.com/jobkit/job/store/pgstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/valkeystore"
	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// stores is the store of each namespace, on one client jobd owns.
type stores struct {
	byNS map[string]store.Store
	// ping checks that the server is reachable (nil for memdb).
	ping  func(ctx context.Context) error
	close func()
	// describe says where the data is, for the logs.
	describe string
	// down is true while watchStore finds the store unreachable; watchPing
	// is its ping (ping unless a store has one that fails faster), poke
	// asks it to ping now.
	down      atomic.Bool
	watchPing func(ctx context.Context) error
	poke      chan struct{}
}

// openStores opens one store per namespace, as --store says: memdb keeps
// one in-process store per namespace; the server stores share one client
// and put each namespace in its own key space (their WithNamespace).
func openStores(ctx context.Context, c *Config, log *slog.Logger) (*stores, error) {
	st := &stores{byNS: make(map[string]store.Store, len(c.Namespaces)), close: func() {}, poke: make(chan struct{}, 1)}
	// go-redis logs each failed dial on the standard logger; jobd logs the
	// store's outages itself, once each (watchStore), and keeps go-redis's
	// lines for --log-level debug.
	redis.SetLogger(redisLogger{log})
	open := map[string]func(context.Context, *Config) error{
		StoreMemdb: st.openMemdb, StoreRedis: st.openRedis, StoreValkey: st.openValkey,
		StoreEtcd: st.openEtcd, StorePostgres: st.openPostgres,
	}[c.Store]
	if open == nil {
		return nil, usagef("--store %q: want one of memdb, redis, valkey, etcd, postgres", c.Store)
	}
	if err := open(ctx, c); err != nil {
		return nil, err
	}
	return st, nil
}

// openMemdb makes one in-process store per namespace.
func (st *stores) openMemdb(ctx context.Context, c *Config) error {
	for _, ns := range c.Namespaces {
		s, err := memdbstore.New()
		if err != nil {
			return err
		}
		st.byNS[ns] = s
	}
	st.describe = "memdb (in this process; lost on exit)"
	return nil
}

// openRedis opens the namespaces' stores on one Redis client.
func (st *stores) openRedis(ctx context.Context, c *Config) error {
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, ContextTimeoutEnabled: true, PoolSize: 64})
	// watchStore's own connection dials once, without go-redis's
	// retries, so an outage is seen at once.
	wdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, ContextTimeoutEnabled: true, PoolSize: 1, MaxRetries: -1, DialerRetries: 1})
	st.close = func() { _ = rdb.Close(); _ = wdb.Close() }
	st.ping = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	st.watchPing = func(ctx context.Context) error { return wdb.Ping(ctx).Err() }
	st.describe = "redis at " + c.RedisAddr
	if err := st.reachable(ctx, c.StoreTimeout, st.ping); err != nil {
		st.close()
		return err
	}
	for _, ns := range c.Namespaces {
		s, err := redisstore.New(rdb, redisstore.WithNamespace(ns))
		if err != nil {
			st.close()
			return usagef("--namespace %q: %v", ns, err)
		}
		st.byNS[ns] = s
	}
	return nil
}

// openValkey opens the namespaces' stores on one Valkey client.
func (st *stores) openValkey(ctx context.Context, c *Config) error {
	// The client dials when made: made again until it can, within
	// --store-timeout.
	st.describe = "valkey at " + c.ValkeyAddr
	var vk valkey.Client
	err := st.reachable(ctx, c.StoreTimeout, func(context.Context) error {
		var err error
		vk, err = valkey.NewClient(valkey.ClientOption{InitAddress: []string{c.ValkeyAddr}, DisableCache: true, ForceSingleClient: true})
		if err != nil && vk != nil {
			vk.Close()
		}
		return err
	})
	if err != nil {
		return err
	}
	st.close = vk.Close
	st.ping = func(ctx context.Context) error { return vk.Do(ctx, vk.B().Ping().Build()).Error() }
	for _, ns := range c.Namespaces {
		s, err := valkeystore.New(vk, valkeystore.WithNamespace(ns))
		if err != nil {
			st.close()
			return usagef("--namespace %q: %v", ns, err)
		}
		st.byNS[ns] = s
	}
	return nil
}

// openEtcd opens the namespaces' stores on one etcd client.
func (st *stores) openEtcd(ctx context.Context, c *Config) error {
	// The client's own log (zap, a line per failed retry) is off: jobd
	// logs the store's outages itself (watchStore).
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints, DialTimeout: 5 * time.Second, Context: context.WithoutCancel(ctx), Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd at %v: %w", c.EtcdEndpoints, err)
	}
	var ess []*etcdstore.Store
	st.close = func() {
		for _, s := range ess {
			_ = s.Close()
		}
		_ = cli.Close()
	}
	st.ping = func(ctx context.Context) error {
		_, err := cli.Get(ctx, "jobkit-readyz", clientv3.WithCountOnly())
		return err
	}
	st.describe = fmt.Sprintf("etcd at %v", strings.Join(c.EtcdEndpoints, ","))
	if err := st.reachable(ctx, c.StoreTimeout, st.ping); err != nil {
		st.close()
		return err
	}
	for _, ns := range c.Namespaces {
		s, err := etcdstore.New(cli, etcdstore.WithNamespace(ns))
		if err != nil {
			st.close()
			return usagef("--namespace %q: %v", ns, err)
		}
		ess = append(ess, s)
		st.byNS[ns] = s
	}
	return nil
}

// openPostgres opens the namespaces' stores on one pgx pool.
func (st *stores) openPostgres(ctx context.Context, c *Config) error {
	pool, err := pgxpool.New(context.WithoutCancel(ctx), c.PGURL)
	if err != nil {
		return usagef("--pg-url: %v", err)
	}
	var pss []*pgstore.Store
	st.close = func() {
		for _, s := range pss {
			_ = s.Close()
		}
		pool.Close()
	}
	st.ping = pool.Ping
	st.describe = "postgres at " + redactURL(c.PGURL)
	if err := st.reachable(ctx, c.StoreTimeout, st.ping); err != nil {
		st.close()
		return err
	}
	for _, ns := range c.Namespaces {
		s, err := pgstore.New(ctx, pool, pgstore.WithNamespace(ns))
		if err != nil {
			st.close()
			if errors.Is(err, pgstore.ErrSchema) {
				return fmt.Errorf("%w (run jobd migrate with the same --store and --pg-url first)", err)
			}
			return fmt.Errorf("postgres: %w", err)
		}
		pss = append(pss, s)
		st.byNS[ns] = s
	}
	return nil
}

// redactURL hides the password of a connection URL, for the logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// migrate brings the store's schema up to date, for stores that have one.
func migrate(ctx context.Context, c *Config) (string, error) {
	switch c.Store {
	case StorePostgres:
		pool, err := pgxpool.New(ctx, c.PGURL)
		if err != nil {
			return "", usagef("--pg-url: %v", err)
		}
		defer pool.Close()
		if err := pgstore.Migrate(ctx, pool); err != nil {
			return "", fmt.Errorf("migrate postgres at %s: %w", redactURL(c.PGURL), err)
		}
		return fmt.Sprintf("postgres at %s: schema at version %d", redactURL(c.PGURL), pgstore.SchemaVersion()), nil
	default:
		return fmt.Sprintf("store %s keeps no schema: nothing to migrate", c.Store), nil
	}
}

// reachable calls ping until it succeeds, for at most timeout: the
// store's server may be starting beside jobd. Past it, the error names
// the store, its address and --store-timeout.
func (st *stores) reachable(ctx context.Context, timeout time.Duration, ping func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		err := ping(ctx)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err // the cause, rather than the deadline that cut the last try
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			if context.Cause(ctx) != context.DeadlineExceeded && ctx.Err() != context.DeadlineExceeded {
				return fmt.Errorf("%s: %w", st.describe, context.Cause(ctx))
			}
			return fmt.Errorf("%s did not answer within --store-timeout %v: %v; start it, check the address, or raise --store-timeout", st.describe, timeout, last)
		case <-t.C:
		}
	}
}

// redisLogger takes go-redis's log lines to jobd's log, at debug.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "), "component", "go-redis")
}
