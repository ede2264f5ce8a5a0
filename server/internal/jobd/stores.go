package jobd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
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
)

// stores is the store of each namespace, on one client jobd owns.
type stores struct {
	byNS map[string]store.Store
	// ping checks that the server is reachable (nil for memdb).
	ping  func(ctx context.Context) error
	close func()
	// describe says where the data is, for the logs.
	describe string
}

// openStores opens one store per namespace, as --store says: memdb keeps
// one in-process store per namespace; the server stores share one client
// and put each namespace in its own key space (their WithNamespace).
func openStores(ctx context.Context, c *Config) (*stores, error) {
	st := &stores{byNS: make(map[string]store.Store, len(c.Namespaces)), close: func() {}}
	switch c.Store {
	case StoreMemdb:
		for _, ns := range c.Namespaces {
			s, err := memdbstore.New()
			if err != nil {
				return nil, err
			}
			st.byNS[ns] = s
		}
		st.describe = "memdb (in this process; lost on exit)"
	case StoreRedis:
		rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr, ContextTimeoutEnabled: true, PoolSize: 64})
		st.close = func() { _ = rdb.Close() }
		st.ping = func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
		for _, ns := range c.Namespaces {
			s, err := redisstore.New(rdb, redisstore.WithNamespace(ns))
			if err != nil {
				st.close()
				return nil, usagef("--namespace %q: %v", ns, err)
			}
			st.byNS[ns] = s
		}
		st.describe = "redis at " + c.RedisAddr
	case StoreValkey:
		vk, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{c.ValkeyAddr}, DisableCache: true, ForceSingleClient: true})
		if err != nil && vk == nil {
			return nil, fmt.Errorf("valkey at %s: %w", c.ValkeyAddr, err)
		}
		// A client that could not dial yet reconnects; /readyz tells.
		st.close = vk.Close
		st.ping = func(ctx context.Context) error { return vk.Do(ctx, vk.B().Ping().Build()).Error() }
		for _, ns := range c.Namespaces {
			s, err := valkeystore.New(vk, valkeystore.WithNamespace(ns))
			if err != nil {
				st.close()
				return nil, usagef("--namespace %q: %v", ns, err)
			}
			st.byNS[ns] = s
		}
		st.describe = "valkey at " + c.ValkeyAddr
	case StoreEtcd:
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.EtcdEndpoints, DialTimeout: 5 * time.Second, Context: context.WithoutCancel(ctx)})
		if err != nil {
			return nil, fmt.Errorf("etcd at %v: %w", c.EtcdEndpoints, err)
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
		for _, ns := range c.Namespaces {
			s, err := etcdstore.New(cli, etcdstore.WithNamespace(ns))
			if err != nil {
				st.close()
				return nil, usagef("--namespace %q: %v", ns, err)
			}
			ess = append(ess, s)
			st.byNS[ns] = s
		}
		st.describe = fmt.Sprintf("etcd at %v", c.EtcdEndpoints)
	case StorePostgres:
		pool, err := pgxpool.New(context.WithoutCancel(ctx), c.PGURL)
		if err != nil {
			return nil, usagef("--pg-url: %v", err)
		}
		var pss []*pgstore.Store
		st.close = func() {
			for _, s := range pss {
				_ = s.Close()
			}
			pool.Close()
		}
		st.ping = pool.Ping
		for _, ns := range c.Namespaces {
			s, err := pgstore.New(ctx, pool, pgstore.WithNamespace(ns))
			if err != nil {
				st.close()
				if errors.Is(err, pgstore.ErrSchema) {
					return nil, fmt.Errorf("%w (run jobd migrate with the same --store and --pg-url first)", err)
				}
				return nil, fmt.Errorf("postgres: %w", err)
			}
			pss = append(pss, s)
			st.byNS[ns] = s
		}
		st.describe = "postgres at " + redactURL(c.PGURL)
	default:
		return nil, usagef("--store %q: want one of memdb, redis, valkey, etcd, postgres", c.Store)
	}
	return st, nil
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
