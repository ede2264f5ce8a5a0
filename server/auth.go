package server

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/api/client"
	pb "github.com/jobkit/job/api/gen/jobkit/v1"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// rank orders the roles that may call the API: a role may call what its
// rank or a lower one may. RoleWorker has none.
var rank = map[Role]int{RoleViewer: 1, RoleOperator: 2, RoleAdmin: 3}

// procedureRoles is the least role each procedure needs. A procedure that
// is not here is refused to every token (a test checks every procedure of
// the five services is here).
var procedureRoles = map[string]Role{
	jobkitv1connect.JobServiceScheduleProcedure:        RoleOperator,
	jobkitv1connect.JobServiceScheduleBatchProcedure:   RoleOperator,
	jobkitv1connect.JobServiceGetInstanceProcedure:     RoleViewer,
	jobkitv1connect.JobServiceListInstancesProcedure:   RoleViewer,
	jobkitv1connect.JobServiceListHistoryProcedure:     RoleViewer,
	jobkitv1connect.JobServiceListLogsProcedure:        RoleViewer,
	jobkitv1connect.JobServiceFollowLogsProcedure:      RoleViewer,
	jobkitv1connect.JobServiceCancelInstanceProcedure:  RoleOperator,
	jobkitv1connect.JobServiceRetryInstanceProcedure:   RoleOperator,
	jobkitv1connect.JobServiceDeleteInstanceProcedure:  RoleAdmin,
	jobkitv1connect.JobServiceCancelInstancesProcedure: RoleOperator,
	jobkitv1connect.JobServiceRetryInstancesProcedure:  RoleOperator,
	jobkitv1connect.JobServiceDeleteInstancesProcedure: RoleAdmin,
	jobkitv1connect.JobServiceWatchProcedure:           RoleViewer,

	jobkitv1connect.DefinitionServiceCreateDefinitionProcedure: RoleAdmin,
	jobkitv1connect.DefinitionServiceGetDefinitionProcedure:    RoleViewer,
	jobkitv1connect.DefinitionServiceListDefinitionsProcedure:  RoleViewer,
	jobkitv1connect.DefinitionServiceUpdateDefinitionProcedure: RoleAdmin,
	jobkitv1connect.DefinitionServiceDeleteDefinitionProcedure: RoleAdmin,

	jobkitv1connect.TriggerServiceCreateTriggerProcedure: RoleAdmin,
	jobkitv1connect.TriggerServiceGetTriggerProcedure:    RoleViewer,
	jobkitv1connect.TriggerServiceListTriggersProcedure:  RoleViewer,
	jobkitv1connect.TriggerServiceUpdateTriggerProcedure: RoleAdmin,
	jobkitv1connect.TriggerServiceDeleteTriggerProcedure: RoleAdmin,
	jobkitv1connect.TriggerServicePauseTriggerProcedure:  RoleOperator,
	jobkitv1connect.TriggerServiceResumeTriggerProcedure: RoleOperator,
	jobkitv1connect.TriggerServiceRunTriggerProcedure:    RoleOperator,

	jobkitv1connect.QueueServiceListQueuesProcedure:  RoleViewer,
	jobkitv1connect.QueueServicePauseQueueProcedure:  RoleOperator,
	jobkitv1connect.QueueServiceResumeQueueProcedure: RoleOperator,
	jobkitv1connect.QueueServiceListKindsProcedure:   RoleViewer,

	jobkitv1connect.NodeServiceListNodesProcedure:  RoleViewer,
	jobkitv1connect.NodeServiceGetVersionProcedure: RoleViewer,

	jobkitv1connect.ExecutorServiceConnectProcedure: RoleWorker,
	jobkitv1connect.ExecutorServiceCallProcedure:    RoleWorker,
}

// token is a configured Token with its hash decoded.
type token struct {
	Token
	sum []byte
}

// checkTokens decodes and checks the configured tokens.
func checkTokens(tokens []Token, namespaces map[string]*job.Manager) ([]token, error) {
	out := make([]token, 0, len(tokens))
	for i, t := range tokens {
		name := t.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i+1)
		}
		sum, err := hex.DecodeString(t.SHA256)
		if err != nil || len(sum) != 32 {
			return nil, fmt.Errorf("server: token %s: SHA256 %q is not the hex of a SHA-256 (64 hex digits); compute it with server.HashToken(secret)", name, t.SHA256)
		}
		if _, ok := rank[t.Role]; !ok && t.Role != RoleWorker && t.Role != RoleMetrics {
			return nil, fmt.Errorf("server: token %s: unknown role %q; want viewer, operator, admin, worker or metrics", name, t.Role)
		}
		if len(t.Namespaces) == 0 {
			return nil, fmt.Errorf("server: token %s has no namespaces; list those it may use, or \"*\" for all", name)
		}
		for _, ns := range t.Namespaces {
			if _, ok := namespaces[ns]; !ok && ns != "*" {
				return nil, fmt.Errorf("server: token %s names namespace %q, which is not served (served: %s)", name, ns, strings.Join(served(namespaces), ", "))
			}
		}
		t.Name = name
		out = append(out, token{Token: t, sum: sum})
	}
	return out, nil
}

// served lists the served namespaces, sorted.
func served(namespaces map[string]*job.Manager) []string {
	names := make([]string, 0, len(namespaces))
	for n := range namespaces {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// managerKey is the context key of the namespace's manager.
type managerKey struct{}

// managerOf returns the manager of the call's namespace, which the guard
// put in ctx.
func managerOf(ctx context.Context) *job.Manager {
	return ctx.Value(managerKey{}).(*job.Manager)
}

// admit authenticates and authorizes a call of procedure with header h,
// and returns ctx with the namespace's manager. In order: a missing or
// unknown token is Unauthenticated; an unknown namespace NotFound (naming
// the served namespaces the token may use); a token
// for another namespace, or with too low a role, PermissionDenied.
func (s *Server) admit(ctx context.Context, procedure string, h http.Header) (context.Context, error) {
	var who *token
	if len(s.tokens) > 0 {
		var err error
		if who, err = s.authenticate(h); err != nil {
			s.cfg.Logger.Info("jobkit server: call refused", "procedure", procedure, "reason", err)
			return nil, err
		}
	}
	ns := h.Get(NamespaceHeader)
	if ns == "" {
		ns = s.cfg.DefaultNamespace
	}
	m, ok := s.cfg.Namespaces[ns]
	if !ok {
		// Name only the namespaces the caller may use: a token scoped to
		// some is not told the names of the others.
		names := served(s.cfg.Namespaces)
		if who != nil && !slices.Contains(who.Namespaces, "*") {
			names = slices.DeleteFunc(names, func(n string) bool { return !slices.Contains(who.Namespaces, n) })
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("namespace %q is not served here; served: %s (name one in the %s header)", ns, strings.Join(names, ", "), NamespaceHeader))
	}
	if who != nil {
		if err := authorize(who, ns, procedure); err != nil {
			s.cfg.Logger.Info("jobkit server: call refused", "procedure", procedure, "token", who.Name, "namespace", ns, "reason", err)
			return nil, err
		}
	}
	return context.WithValue(context.WithValue(ctx, managerKey{}, m), namespaceKey{}, ns), nil
}

// authenticate finds the configured token whose hash is that of the
// bearer token in h, comparing in constant time against every one.
func (s *Server) authenticate(h http.Header) (*token, error) {
	auth := h.Get("Authorization")
	if auth == "" {
		return nil, noTokenError()
	}
	scheme, secret, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("the Authorization header is not a bearer token: send \"Authorization: Bearer <token>\""))
	}
	sum := hashBytes(strings.TrimSpace(secret))
	var found *token
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(s.tokens[i].sum, sum) == 1 && found == nil {
			found = &s.tokens[i]
		}
	}
	if found == nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("the bearer token is not accepted here: check the token (the server keeps only SHA-256 hashes; compare with server.HashToken)"))
	}
	return found, nil
}

// authorize checks that tok may call procedure in namespace ns.
func authorize(tok *token, ns, procedure string) error {
	if !slices.Contains(tok.Namespaces, "*") && !slices.Contains(tok.Namespaces, ns) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("token %q may not use namespace %q; it may use: %s", tok.Name, ns, strings.Join(tok.Namespaces, ", ")))
	}
	need, ok := procedureRoles[procedure]
	if !ok {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("procedure %s is not open to any token", procedure))
	}
	if need == RoleWorker {
		// Remote executors: a worker token, or an admin's.
		if tok.Role != RoleWorker && tok.Role != RoleAdmin {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s is for remote executors: it needs a token with role worker (or admin); token %q has role %s", procedure, tok.Name, tok.Role))
		}
		return nil
	}
	if rank[tok.Role] < rank[need] {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s needs role %s or higher; token %q has role %s (use a token with that role)", procedure, need, tok.Name, tok.Role))
	}
	return nil
}

// guard is the interceptor that admits every call of the jobkit.v1
// services (Server.admit), unary and streaming.
type guard struct{ s *Server }

// WrapUnary admits a unary call before its handler runs.
func (g guard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		ctx, err := g.s.admit(ctx, req.Spec().Procedure, req.Header())
		if err != nil {
			return nil, err
		}
		res, err := next(ctx, req)
		g.s.logFailure(req.Spec().Procedure, err)
		return res, err
	}
}

// WrapStreamingClient leaves client streams alone: the guard serves.
func (g guard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler admits a streaming call before its handler runs.
func (g guard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, err := g.s.admit(ctx, conn.Spec().Procedure, conn.RequestHeader())
		if err != nil {
			return err
		}
		err = next(ctx, conn)
		g.s.logFailure(conn.Spec().Procedure, err)
		return err
	}
}

// logFailure logs a call's error that is the server's or its store's
// fault, not the caller's: the caller sees the message, the operator
// should too.
func (s *Server) logFailure(procedure string, err error) {
	if err == nil {
		return // connect.CodeOf(nil) is CodeUnknown: a success is no failure
	}
	switch connect.CodeOf(err) {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
		s.cfg.Logger.Error("jobkit server: call failed", "procedure", procedure, "err", err)
	case connect.CodeUnavailable:
		if !s.draining() {
			s.cfg.Logger.Warn("jobkit server: call failed", "procedure", procedure, "err", err)
		}
	}
}

// MetricsGuard wraps h, the /metrics handler on the API's port. Without
// tokens it is h. With tokens, a scrape must send "Authorization: Bearer
// <token>" of a token of role metrics, viewer, operator or admin that may
// use every namespace served (the metrics cover them all): otherwise 401
// (no token, or not one of the server's; with WWW-Authenticate: Bearer)
// or 403, each with a message naming the fix. A --metrics-listen address
// of its own needs no wrapping: keep it where only Prometheus reaches it.
func (s *Server) MetricsGuard(h http.Handler) http.Handler {
	if len(s.tokens) == 0 {
		return h
	}
	all := served(s.cfg.Namespaces)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := s.authenticate(r.Header)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="jobd"`)
			http.Error(w, "/metrics: "+connectMessage(err)+" (a token of role metrics; or serve /metrics on --metrics-listen)", http.StatusUnauthorized)
			return
		}
		switch tok.Role {
		case RoleMetrics, RoleViewer, RoleOperator, RoleAdmin:
		default:
			http.Error(w, fmt.Sprintf("/metrics needs a token of role metrics (or viewer and up); token %q has role %s", tok.Name, tok.Role), http.StatusForbidden)
			return
		}
		if !slices.Contains(tok.Namespaces, "*") {
			for _, ns := range all {
				if !slices.Contains(tok.Namespaces, ns) {
					http.Error(w, fmt.Sprintf("/metrics covers every namespace served (%s); token %q may not use namespace %q: give it namespaces [\"*\"]", strings.Join(all, ", "), tok.Name, ns), http.StatusForbidden)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// connectMessage is the message of err without connect's code prefix.
func connectMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// noTokenFix is the fix an API caller reads for a call without a token.
const noTokenFix = `send the header "Authorization: Bearer <token>"`

// noTokenError is the error of a call without a token, with its ErrorFix
// detail so that jobctl names its own flags instead.
func noTokenError() error {
	ce := connect.NewError(connect.CodeUnauthenticated, errors.New("no token: "+noTokenFix))
	if d, err := connect.NewErrorDetail(&pb.ErrorFix{Reason: client.FixNoToken, Fix: noTokenFix}); err == nil {
		ce.AddDetail(d)
	}
	return ce
}
