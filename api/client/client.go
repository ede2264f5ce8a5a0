package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/api/internal/transport"
)

// NamespaceHeader is the request header that names the namespace a call
// acts in; the server uses its default namespace when it is absent.
const NamespaceHeader = transport.NamespaceHeader

// Protocol is the wire protocol the client speaks. The server serves all
// three on one port.
type Protocol string

// The protocols.
const (
	// ProtocolConnect is the Connect protocol (binary protobuf over
	// HTTP/1.1 or HTTP/2): the default.
	ProtocolConnect Protocol = "connect"
	// ProtocolGRPC is gRPC; over http:// it uses HTTP/2 without TLS (h2c).
	ProtocolGRPC Protocol = "grpc"
	// ProtocolGRPCWeb is gRPC-Web.
	ProtocolGRPCWeb Protocol = "grpcweb"
)

// ParseProtocol returns the Protocol named s ("connect", "grpc",
// "grpcweb"), or an error naming the choices.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(strings.ToLower(s)); p {
	case ProtocolConnect, ProtocolGRPC, ProtocolGRPCWeb:
		return p, nil
	case "grpc-web":
		return ProtocolGRPCWeb, nil
	}
	return "", fmt.Errorf("client: unknown protocol %q; want connect, grpc or grpcweb", s)
}

// Option configures a Client (New).
type Option func(*config) error

type config struct {
	token      string
	namespace  string
	httpClient connect.HTTPClient
	protocol   Protocol
	tlsConfig  *tls.Config
	json       bool
}

// WithToken sends "Authorization: Bearer token" with every call. Without
// it the client sends no credentials, which a server with authentication
// answers with CodeUnauthenticated.
func WithToken(token string) Option {
	return func(c *config) error {
		if strings.ContainsAny(token, "\r\n") {
			return errors.New("client: WithToken: the token contains a line break; trim it (a token file's trailing newline?)")
		}
		c.token = token
		return nil
	}
}

// WithNamespace makes every call act in the namespace ns (the
// Jobkit-Namespace header). Defaults to the server's default namespace.
func WithNamespace(ns string) Option {
	return func(c *config) error { c.namespace = ns; return nil }
}

// WithHTTPClient sends requests with hc instead of a client the package
// builds. hc must speak HTTP/2 for ProtocolGRPC (for http:// addresses,
// h2c: an http.Transport whose Protocols has only UnencryptedHTTP2).
// WithTLSConfig does not apply to it.
func WithHTTPClient(hc connect.HTTPClient) Option {
	return func(c *config) error {
		if hc == nil {
			return errors.New("client: WithHTTPClient(nil)")
		}
		c.httpClient = hc
		return nil
	}
}

// WithProtocol chooses the wire protocol. Defaults to ProtocolConnect.
func WithProtocol(p Protocol) Option {
	return func(c *config) error {
		if _, err := ParseProtocol(string(p)); err != nil {
			return err
		}
		c.protocol = p
		return nil
	}
}

// WithTLSConfig sets the TLS configuration of the HTTP client the package
// builds, for an https:// address with a private CA or a client
// certificate.
func WithTLSConfig(tc *tls.Config) Option {
	return func(c *config) error { c.tlsConfig = tc; return nil }
}

// WithJSON makes the Connect and gRPC-Web protocols encode messages as
// JSON instead of binary protobuf, as curl would send them. Slower; useful
// to debug.
func WithJSON() Option {
	return func(c *config) error { c.json = true; return nil }
}

// Client calls one jobkit.v1 server. It is safe for concurrent use.
type Client struct {
	jobs     jobkitv1connect.JobServiceClient
	queues   jobkitv1connect.QueueServiceClient
	nodes    jobkitv1connect.NodeServiceClient
	defs     jobkitv1connect.DefinitionServiceClient
	triggers jobkitv1connect.TriggerServiceClient
	// calendars: see calendars.go.
	calendars jobkitv1connect.CalendarServiceClient
	alerts    jobkitv1connect.AlertServiceClient
	// workflows: see workflows.go.
	workflows jobkitv1connect.WorkflowServiceClient
	// limits: see limits.go.
	limits jobkitv1connect.LimitServiceClient
}

// New returns a client of the server at baseURL ("http://127.0.0.1:8080",
// "https://jobd.example.com"). It does not connect; the first call does.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://host:port or https://host:port", baseURL)
	}
	c := config{protocol: ProtocolConnect}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("client: nil Option")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	hc := c.httpClient
	if hc == nil {
		// gRPC over http:// needs h2c; the rest work over HTTP/1.1 or HTTP/2.
		hc = transport.Client(u.Scheme, c.tlsConfig, c.protocol == ProtocolGRPC)
	}
	hc = transport.WithHeaders(hc, c.token, c.namespace)
	var copts []connect.ClientOption
	switch c.protocol {
	case ProtocolGRPC:
		copts = append(copts, connect.WithGRPC())
	case ProtocolGRPCWeb:
		copts = append(copts, connect.WithGRPCWeb())
	}
	if c.json {
		copts = append(copts, connect.WithProtoJSON())
	}
	base := strings.TrimSuffix(baseURL, "/")
	return &Client{
		jobs:     jobkitv1connect.NewJobServiceClient(hc, base, copts...),
		queues:   jobkitv1connect.NewQueueServiceClient(hc, base, copts...),
		nodes:    jobkitv1connect.NewNodeServiceClient(hc, base, copts...),
		defs:     jobkitv1connect.NewDefinitionServiceClient(hc, base, copts...),
		triggers: jobkitv1connect.NewTriggerServiceClient(hc, base, copts...),

		calendars: jobkitv1connect.NewCalendarServiceClient(hc, base, copts...),
		alerts:    jobkitv1connect.NewAlertServiceClient(hc, base, copts...),
		workflows: jobkitv1connect.NewWorkflowServiceClient(hc, base, copts...),
		limits:    jobkitv1connect.NewLimitServiceClient(hc, base, copts...),
	}, nil
}

// Services returns the generated service clients the Client calls, for
// calls it has no method for or to read response headers.
func (c *Client) Services() Services {
	return Services{Jobs: c.jobs, Queues: c.queues, Nodes: c.nodes, Definitions: c.defs, Triggers: c.triggers, Calendars: c.calendars, Workflows: c.workflows, Limits: c.limits}
}

// Services are the generated clients of the five jobkit.v1 services, with
// the client's token, namespace and protocol.
type Services struct {
	Jobs        jobkitv1connect.JobServiceClient
	Queues      jobkitv1connect.QueueServiceClient
	Nodes       jobkitv1connect.NodeServiceClient
	Definitions jobkitv1connect.DefinitionServiceClient
	Triggers    jobkitv1connect.TriggerServiceClient
	// Calendars is the CalendarService's client (calendars.go).
	Calendars jobkitv1connect.CalendarServiceClient
	// Workflows is the WorkflowService's client (workflows.go).
	Workflows jobkitv1connect.WorkflowServiceClient
	// Limits is the LimitService's client (limits.go).
	Limits jobkitv1connect.LimitServiceClient
}
