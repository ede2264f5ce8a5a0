package redisstore

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

// reloadOnConnectionError asks a redis.ClusterClient to reload its slot
// map when err says a call could not reach a node. go-redis reloads the
// map on a MOVED or ASK reply and otherwise every
// ClusterStateReloadInterval (a minute by default): a primary that died
// keeps its slots in the client's map, every call to them fails to dial,
// and no node is asked who serves them now, so after its replica was
// promoted (seconds later) the store went on failing for up to a minute
// (TestClusterPrimaryKilled). ReloadState reloads in the background and
// coalesces concurrent requests; the calls failing meanwhile fail as
// before, and the engine retries them.
func reloadOnConnectionError(c redis.UniversalClient, err error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || !connectionError(err) {
		return
	}
	cc.ReloadState(context.Background())
}

// connectionError reports whether err is a failure to reach a server (a
// refused or broken connection, a dial or read timeout), not a reply.
func connectionError(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, context.DeadlineExceeded)
}
