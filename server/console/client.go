package console

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// clients are the jobkit.v1 clients of one user in one namespace: every
// call carries the user's token and the namespace header, so the server
// authorises it.
type clients struct {
	jobs     jobkitv1connect.JobServiceClient
	defs     jobkitv1connect.DefinitionServiceClient
	triggers jobkitv1connect.TriggerServiceClient
	queues   jobkitv1connect.QueueServiceClient
	nodes    jobkitv1connect.NodeServiceClient
	// calendars: see calendars.go.
	calendars jobkitv1connect.CalendarServiceClient
	alerts    jobkitv1connect.AlertServiceClient
	// workflows: see workflows.go.
	workflows jobkitv1connect.WorkflowServiceClient
	// limits: see limits.go.
	limits jobkitv1connect.LimitServiceClient
}

// newClients returns the clients for token and namespace ns.
func (c *Console) newClients(token, ns string) *clients {
	opts := []connect.ClientOption{connect.WithInterceptors(credentials{token: token, ns: ns})}
	hc, base := c.httpClient, c.baseURL
	return &clients{
		jobs:     jobkitv1connect.NewJobServiceClient(hc, base, opts...),
		defs:     jobkitv1connect.NewDefinitionServiceClient(hc, base, opts...),
		triggers: jobkitv1connect.NewTriggerServiceClient(hc, base, opts...),
		queues:   jobkitv1connect.NewQueueServiceClient(hc, base, opts...),
		nodes:    jobkitv1connect.NewNodeServiceClient(hc, base, opts...),

		calendars: jobkitv1connect.NewCalendarServiceClient(hc, base, opts...),
		alerts:    jobkitv1connect.NewAlertServiceClient(hc, base, opts...),
		workflows: jobkitv1connect.NewWorkflowServiceClient(hc, base, opts...),
		limits:    jobkitv1connect.NewLimitServiceClient(hc, base, opts...),
	}
}

// credentials is the interceptor that puts the user's token and the
// namespace on every call.
type credentials struct{ token, ns string }

// set writes the headers of one call.
func (c credentials) set(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	h.Set(namespaceHeader, c.ns)
}

// WrapUnary adds the headers to a unary call.
func (c credentials) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		c.set(req.Header())
		return next(ctx, req)
	}
}

// WrapStreamingClient adds the headers to a streaming call.
func (c credentials) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		c.set(conn.RequestHeader())
		return conn
	}
}

// WrapStreamingHandler is not used: the console is a client.
func (c credentials) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// pipeListener is an in-memory net.Listener: the console reaches an
// in-process API handler through it with real HTTP (streams included),
// without a port.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// errPipeClosed is the error of Accept and dial after Close.
var errPipeClosed = errors.New("console: the in-process API connection is closed")

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the server end of the next dialled connection.
func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errPipeClosed
	}
}

// Close stops Accept and dial.
func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr names the listener.
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects a client to the listener.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, errPipeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pipeAddr is the address of a pipeListener.
type pipeAddr struct{}

// Network names the transport.
func (pipeAddr) Network() string { return "pipe" }

// String names the address.
func (pipeAddr) String() string { return "in-process" }
