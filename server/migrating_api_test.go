package server_test

// The compile-time check of doc/migrating-from-go-job.md's claims about
// the modules outside the core (server, client, metrics, store plugins);
// doc/migrating_api_test.go checks the core's. A change to a name or
// signature the guide states fails to compile here.

import (
	"context"
	"iter"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/valkey-io/valkey-go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/metrics"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/store/etcdstore"
	"github.com/jobkit/job/store/redisstore"
	"github.com/jobkit/job/store/valkeystore"
)

var (
	_ func(server.Config) (*server.Server, error)                                                           = server.New
	_ func(string, ...client.Option) (*client.Client, error)                                                = client.New
	_ func(*client.Client, context.Context, string, ...client.ScheduleOption) (*client.Instance, error)     = (*client.Client).ScheduleJob
	_ func(*client.Client) *client.Admin                                                                    = (*client.Client).Admin
	_ func(*client.Admin, context.Context) ([]*jobkitv1.Kind, error)                                        = (*client.Admin).ListKinds
	_ func(*client.Client, context.Context, *client.Query) (*job.Page[*client.Instance], error)             = (*client.Client).ListInstances
	_ func(*client.Client, context.Context, *client.Query) iter.Seq2[*client.Instance, error]               = (*client.Client).AllInstances
	_ func(*client.Admin, context.Context, *client.Query, ...client.AdminOption) (client.BulkResult, error) = (*client.Admin).CancelInstances
	_ func(*client.Client, context.Context) (*jobkitv1.GetVersionResponse, error)                           = (*client.Client).GetVersion
	_ string                                                                                                = client.APIVersion
	_ func(...metrics.Option) (*metrics.Collector, error)                                                   = metrics.New
	_ func(metrics.Naming) metrics.Option                                                                   = metrics.WithNaming
	_ metrics.Naming                                                                                        = metrics.GoJobNaming
	_ func(*metrics.Collector, *job.Manager) error                                                          = (*metrics.Collector).ObserveManager
	_ func(redis.UniversalClient, ...redisstore.Option) (*redisstore.Store, error)                          = redisstore.New
	_ func(valkey.Client, ...valkeystore.Option) (*valkeystore.Store, error)                                = valkeystore.New
	_ func(*clientv3.Client, ...etcdstore.Option) (*etcdstore.Store, error)                                 = etcdstore.New
)

// The guide: the server is an http.Handler.
var _ http.Handler = (*server.Server)(nil)

// TestGuideServerNamesCompile makes `go test` build this file.
func TestGuideServerNamesCompile(t *testing.T) {
	if metrics.GoJobNaming == metrics.JobkitNaming {
		t.Error("GoJobNaming is the default naming; the guide says it must be chosen")
	}
}
