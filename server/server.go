// Package server serves the jobkit.v1 API (JobService, DefinitionService,
// TriggerService, QueueService, NodeService) over gRPC, gRPC-Web and the
// Connect protocol from one http.Handler, with gRPC health checking and
// server reflection beside it. Each namespace is served by its own
// *job.Manager; a request names its namespace in the Jobkit-Namespace
// header. Bearer tokens with roles guard the services when configured.
package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/store"
)

// NamespaceHeader is the request header that names the namespace a call
// works on; without it the server uses Config.DefaultNamespace.
const NamespaceHeader = "Jobkit-Namespace"

// DefaultMaxRequestBytes is the request size limit when
// Config.MaxRequestBytes is 0.
const DefaultMaxRequestBytes = 4 << 20

// Config configures a Server.
type Config struct {
	// Namespaces maps a namespace name to the Manager that serves it (each on its own
	// store or store namespace). At least one. A request names its namespace in the
	// Jobkit-Namespace header; without it, DefaultNamespace.
	Namespaces       map[string]*job.Manager
	DefaultNamespace string // "" means "default"
	// Tokens, when not empty, turn authentication on: every call needs
	// "Authorization: Bearer <token>" matching one of them. Empty: no authentication
	// (jobd refuses that on a non-loopback address unless --insecure).
	Tokens []Token
	// MaxRequestBytes bounds a request message (0: 4 MiB); larger → ResourceExhausted
	// with a message naming the limit.
	MaxRequestBytes int
	// Logger receives the server's own log lines (denied calls, internal
	// errors); nil means slog.Default().
	Logger *slog.Logger
	// WasmModules, when set, returns where the namespace served by a
	// manager keeps the WebAssembly modules sent with a definition
	// (CreateDefinitionRequest.wasm_module, issue 22); nil (or a nil
	// store) refuses such requests.
	WasmModules func(m *job.Manager) ModuleStore
	// Alerts is each namespace's alerting (issue 23), served by
	// AlertService; a namespace without one answers FailedPrecondition.
	Alerts map[string]*alert.Service
	// ExecutorStores maps a namespace to the store its remote executors
	// reach through ExecutorService (issue 21): the same store its
	// Manager uses. A namespace without one answers ExecutorService calls
	// with Unimplemented.
	ExecutorStores map[string]store.Store
}

// ModuleStore keeps WebAssembly modules by content hash (the wasm
// executor's DirModules is one).
type ModuleStore interface {
	// Put checks and stores a module and returns its reference
	// ("sha256:<hex>").
	Put(module []byte) (ref string, err error)
}

// ModuleChecker is an optional interface of a ModuleStore: Check checks a
// module as Put does and returns the reference Put would, storing
// nothing. A validate-only definition request that carries a module needs
// it (DefinitionService, validate_only).
type ModuleChecker interface {
	Check(module []byte) (ref string, err error)
}

// Role is what a token may do: RoleViewer reads; RoleOperator also schedules, cancels,
// retries, pauses/resumes queues and triggers, runs triggers; RoleAdmin also writes
// definitions and triggers and deletes; RoleWorker is for remote executors (no API calls
// of these services); RoleMetrics reads /metrics only (Server.MetricsGuard).
type Role string

// The roles a Token may carry, from least to most privileged (RoleWorker
// stands apart: it may call none of the jobkit.v1 services).
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
	RoleWorker   Role = "worker"
	// RoleMetrics may read /metrics (see MetricsGuard) and call nothing
	// else: the token to give Prometheus.
	RoleMetrics Role = "metrics"
)

// Token is one accepted bearer token, kept as the hex SHA-256 of the secret (never the
// secret), compared in constant time.
type Token struct {
	Name       string // for logs ("ci-bot")
	SHA256     string // hex of sha256(secret)
	Role       Role
	Namespaces []string // the namespaces it may use; "*" means all
}

// HashToken returns the hex SHA-256 of a secret, as Token.SHA256 wants it.
func HashToken(secret string) string {
	return hex.EncodeToString(hashBytes(secret))
}

// hashBytes returns the SHA-256 of a secret.
func hashBytes(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// Server serves jobkit.v1 (gRPC, gRPC-Web, Connect) plus gRPC health checking and server
// reflection from one http.Handler.
type Server struct {
	cfg    Config
	tokens []token
	mux    *http.ServeMux
	health *grpchealth.StaticChecker
	// followPoll and followSettle pace FollowLogs (tests shorten them).
	followPoll, followSettle time.Duration
	// drained is closed by Drain; open streams end when it is.
	drained   chan struct{}
	drainOnce sync.Once

	// sessMu guards the connected remote workers' sessions (executors.go).
	sessMu   sync.Mutex
	sessions map[string]*session
	// cancelFeeds follow each namespace's cancel notices while workers of
	// it are connected (remote_cancel.go); guarded by sessMu.
	cancelFeeds map[string]*cancelFeed
	// encodings are the session encodings the server speaks, most
	// preferred first, nil for all it knows (remote.go); tests narrow
	// them to play an older jobd. Guarded by sessMu.
	encodings []string
}

// serviceNames lists the jobkit.v1 services the Server serves, for health
// checking and reflection.
var serviceNames = []string{
	jobkitv1connect.JobServiceName,
	jobkitv1connect.DefinitionServiceName,
	jobkitv1connect.TriggerServiceName,
	jobkitv1connect.QueueServiceName,
	jobkitv1connect.NodeServiceName,
	jobkitv1connect.AlertServiceName,
	jobkitv1connect.ExecutorServiceName,
}

// New checks cfg and returns a Server for it: at least one namespace, no
// nil manager, a DefaultNamespace that is served (when set), tokens with a
// 64-hex-digit SHA256, a known role and served namespaces.
func New(cfg Config) (*Server, error) {
	if len(cfg.Namespaces) == 0 {
		return nil, errors.New("server: Config.Namespaces is empty; give at least one namespace and its *job.Manager")
	}
	for name, m := range cfg.Namespaces {
		if m == nil {
			return nil, fmt.Errorf("server: namespace %q has a nil *job.Manager", name)
		}
		if name == "" || name == "*" {
			return nil, fmt.Errorf("server: namespace name %q; name it with letters, digits and \"._-\"", name)
		}
	}
	if cfg.DefaultNamespace == "" {
		cfg.DefaultNamespace = "default"
	} else if _, ok := cfg.Namespaces[cfg.DefaultNamespace]; !ok {
		return nil, fmt.Errorf("server: DefaultNamespace %q is not served (served: %s); add it to Namespaces or name a served one", cfg.DefaultNamespace, strings.Join(served(cfg.Namespaces), ", "))
	}
	switch {
	case cfg.MaxRequestBytes < 0:
		return nil, fmt.Errorf("server: MaxRequestBytes %d is negative; use 0 for the default (%d)", cfg.MaxRequestBytes, DefaultMaxRequestBytes)
	case cfg.MaxRequestBytes == 0:
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	tokens, err := checkTokens(cfg.Tokens, cfg.Namespaces)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, tokens: tokens, mux: http.NewServeMux(),
		health:     grpchealth.NewStaticChecker(serviceNames...),
		followPoll: followPoll, followSettle: followSettle,
		drained: make(chan struct{}), sessions: make(map[string]*session),
	}
	for ns := range cfg.ExecutorStores {
		if _, ok := cfg.Namespaces[ns]; !ok {
			return nil, fmt.Errorf("server: ExecutorStores names namespace %q, which is not served (served: %s)", ns, strings.Join(served(cfg.Namespaces), ", "))
		}
	}
	opts := []connect.HandlerOption{
		connect.WithReadMaxBytes(cfg.MaxRequestBytes),
		connect.WithInterceptors(guard{s}),
		connect.WithCodec(strictJSON{"json"}),
		connect.WithCodec(strictJSON{"json; charset=utf-8"}),
	}
	s.mux.Handle(jobkitv1connect.NewJobServiceHandler(jobService{s}, opts...))
	s.mux.Handle(jobkitv1connect.NewDefinitionServiceHandler(definitionService{modules: cfg.WasmModules}, opts...))
	s.mux.Handle(jobkitv1connect.NewTriggerServiceHandler(triggerService{}, opts...))
	s.mux.Handle(jobkitv1connect.NewQueueServiceHandler(queueService{}, opts...))
	s.mux.Handle(jobkitv1connect.NewNodeServiceHandler(nodeService{}, opts...))
	s.mux.Handle(jobkitv1connect.NewCalendarServiceHandler(calendarService{}, opts...))
	s.mux.Handle(jobkitv1connect.NewAlertServiceHandler(alertService{s}, opts...))
	s.mux.Handle(jobkitv1connect.NewExecutorServiceHandler(executorService{s}, opts...))
	s.mountWorkflows(opts...)
	s.mountLimits(opts...)
	// Health checking and reflection need no token.
	open := connect.WithReadMaxBytes(cfg.MaxRequestBytes)
	s.mux.Handle(grpchealth.NewHandler(s.health, open))
	reflector := grpcreflect.NewStaticReflector(append(slices.Clone(serviceNames), grpchealth.HealthV1ServiceName)...)
	s.mux.Handle(grpcreflect.NewHandlerV1(reflector, open))
	s.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, open))
	return s, nil
}

// Drain prepares the Server to stop: it marks every service NOT_SERVING
// in gRPC health checking, so that load balancers stop sending new calls,
// and ends the open Watch and FollowLogs streams with Unavailable (a
// client resumes elsewhere: Watch from the last event's cursor), so that
// http.Server.Shutdown, which waits for calls in flight, can finish. Unary
// calls in flight go on, and new ones are still served. jobd calls it on
// SIGTERM, then shuts its http.Server down. Calling it again does nothing.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		s.health.SetStatus("", grpchealth.StatusNotServing)
		for _, name := range serviceNames {
			s.health.SetStatus(name, grpchealth.StatusNotServing)
		}
		close(s.drained)
	})
}

// errDraining returns the error that ends a stream when the Server
// drains (a new one each time: connect-go may add to an error it sends).
func errDraining() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the server is shutting down; call again (Watch: from the cursor of the last event received) on another server or once it is back"))
}

// draining reports whether Drain was called.
func (s *Server) draining() bool {
	select {
	case <-s.drained:
		return true
	default:
		return false
	}
}

// ServeHTTP serves every protocol and service of the Server.
//
// A call that carries a W3C trace context (the traceparent and tracestate
// headers) is handled in that context, so an instance it schedules carries
// the caller's trace to whichever process runs it (with the jobotel
// middleware on the Manager).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("traceparent") != "" {
		r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
	}
	if isConnectUnary(r) {
		// A request over MaxRequestBytes is 413 Content Too Large, not the
		// 429 Too Many Requests the Connect protocol gives its code
		// resource_exhausted (which the body keeps for Connect clients).
		limit := int64(s.cfg.MaxRequestBytes)
		if r.ContentLength > limit {
			writeTooLarge(w, fmt.Sprintf("request of %d bytes is larger than configured max %d (the server's request limit); send less, such as a batch split into several calls", r.ContentLength, limit))
			return
		}
		body := &countingBody{ReadCloser: r.Body}
		r.Body = body
		w = &tooLargeWriter{ResponseWriter: w, over: func() bool { return body.n > limit }}
	}
	s.mux.ServeHTTP(w, r)
}

// isConnectUnary reports whether r is a unary call of the Connect protocol
// with a body (not gRPC, gRPC-Web or a Connect stream).
func isConnectUnary(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return ct == "application/json" || ct == "application/proto"
}

// writeTooLarge answers 413 with a Connect error of code
// resource_exhausted and message msg.
func writeTooLarge(w http.ResponseWriter, msg string) {
	b, _ := json.Marshal(map[string]string{"code": "resource_exhausted", "message": msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(b)
}

// countingBody counts the bytes read from a request's body.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// tooLargeWriter turns the 429 of a request whose body went over the
// limit (over) into 413.
type tooLargeWriter struct {
	http.ResponseWriter
	over func() bool
}

func (w *tooLargeWriter) WriteHeader(code int) {
	if code == http.StatusTooManyRequests && w.over() {
		code = http.StatusRequestEntityTooLarge
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *tooLargeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// traceContext reads the W3C trace context of incoming calls.
var traceContext propagation.TraceContext

// Protocols returns the http.Protocols to serve with: HTTP/1.1 and HTTP/2 (h2c when no TLS).
func Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}
