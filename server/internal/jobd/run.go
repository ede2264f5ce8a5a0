package jobd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/jobkit/job"
	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
	"github.com/jobkit/job/metrics"
	jobotel "github.com/jobkit/job/otel"
	"github.com/jobkit/job/server"
	"github.com/jobkit/job/server/console"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// streamPaths are the server-streaming procedures: their calls last until
// the client ends them, so a drain ends them itself once the managers have
// stopped.
var streamPaths = map[string]bool{
	jobkitv1connect.JobServiceWatchProcedure:      true,
	jobkitv1connect.JobServiceFollowLogsProcedure: true,
	"/grpc.health.v1.Health/Watch":                true,
}

// daemon is one running jobd.
type daemon struct {
	cfg *Config
	log *slog.Logger
	// mlog is the logger of the managers and alerts (quietWhileDown).
	mlog     *slog.Logger
	stores   *stores
	managers map[string]*job.Manager
	api      *server.Server
	console  *console.Console
	draining atomic.Bool
	// streams is the context of streaming calls, canceled by the drain.
	streams      context.Context
	cancelStream context.CancelFunc
	errWriter    *connect.ErrorWriter
	xt           *executorTypes // issue 22: built-in executor types; nil when none
}

// serve runs jobd until ctx ends, then drains: the API stops taking new
// calls (gRPC health NOT_SERVING, /readyz 503), the managers stop within
// --drain-timeout (running attempts finish or are handed back), calls in
// flight end, and serve returns nil when all of that went as designed.
func serve(ctx context.Context, c *Config, log *slog.Logger, o *options) error {
	if err := c.validateServe(); err != nil {
		return err
	}
	tokens, tlsCfg, err := c.protection(log)
	if err != nil {
		return err
	}
	st, err := openStores(ctx, c, log)
	if err != nil {
		return err
	}
	defer st.close()

	// Store outages are logged once per change of state (watchStore),
	// and the managers' and alerts' warnings are quieted meanwhile.
	d := &daemon{cfg: c, log: log, mlog: slog.New(quietWhileDown{log.Handler(), st}), stores: st, managers: make(map[string]*job.Manager, len(c.Namespaces)), errWriter: connect.NewErrorWriter()}
	// Issue 22: the built-in executor types the flags enable.
	if d.xt, err = newExecutorTypes(&c.Executors); err != nil {
		return err
	}
	defer d.xt.close()
	if d.xt != nil && c.Workers == 0 {
		log.Warn("executor types are enabled but --workers is 0: this node runs none of their jobs")
	}
	d.streams, d.cancelStream = context.WithCancel(context.WithoutCancel(ctx))
	defer d.cancelStream()
	reg, stats, err := d.startManagers(ctx, o)
	if err != nil {
		d.stopManagers(time.Second)
		return err
	}
	go st.watchStore(ctx, log.With("component", "store"))
	// Issue 22: delete the uploaded Wasm modules no definition names.
	defer d.xt.startCollectors(ctx, d.stores.byNS, log.With("component", "wasm-modules"))()
	// Alerting (issue 23): each namespace's evaluator and deliverer.
	alertMetrics := metrics.NewAlerts()
	reg.MustRegister(alertMetrics)
	alerts, err := d.startAlerts(ctx, alertMetrics)
	if err != nil {
		d.stopManagers(time.Second)
		return err
	}
	defer alerts.stop()
	// Issue 20: the Overview counts every node's attempts, wait and run
	// times from the change feed, until the drain begins.
	for ns, m := range d.managers {
		go func() { _ = stats[ns].Follow(ctx, m) }()
	}
	if err := d.startAPI(tokens, alerts, stats); err != nil {
		d.stopManagers(time.Second)
		return err
	}
	defer d.console.Close()

	l := d.newListeners()
	if err := d.listen(l, reg, tlsCfg); err != nil {
		d.shutdownHTTP(l.servers, time.Second)
		d.stopManagers(time.Second)
		return err
	}
	d.logListening(l.addrs, len(tokens) > 0)

	var failed error
	select {
	case <-ctx.Done():
		log.Info("draining: new API calls are refused, /readyz answers 503", "cause", context.Cause(ctx), "timeout", c.DrainTimeout.String())
	case failed = <-l.serveErr:
		log.Error("serving failed; draining", "err", failed)
	}
	return errors.Join(failed, d.drain(l.servers))
}

// protection reads the tokens and the TLS certificate the flags name, and
// refuses to serve a non-loopback address without both unless --insecure
// says so (then it warns).
func (c *Config) protection(log *slog.Logger) ([]server.Token, *tls.Config, error) {
	var tokens []server.Token
	if c.TokensFile != "" {
		var err error
		if tokens, err = loadTokens(c.TokensFile, c.Namespaces); err != nil {
			return nil, nil, err
		}
	}
	tlsOn := c.TLSCert != ""
	loopback, err := isLoopback(c.Listen)
	if err != nil {
		return nil, nil, usagef("--listen %q: %v", c.Listen, err)
	}
	if !loopback {
		switch {
		case tlsOn && len(tokens) > 0:
		case c.Insecure:
			log.Warn("serving the API on a non-loopback address without TLS and tokens, as --insecure allows: anyone who reaches it can run and delete jobs",
				"listen", c.Listen, "tls", tlsOn, "tokens", len(tokens))
		default:
			var missing []string
			if !tlsOn {
				missing = append(missing, "TLS (--tls-cert, --tls-key)")
			}
			if len(tokens) == 0 {
				missing = append(missing, "tokens (--tokens-file)")
			}
			return nil, nil, usagef("refusing to listen on %s, which is not a loopback address, without %s: anyone who reaches it could run and delete jobs. Give them, listen on 127.0.0.1, or pass --insecure to serve it unprotected anyway",
				c.Listen, strings.Join(missing, " and "))
		}
	}
	if !tlsOn {
		return tokens, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	return tokens, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// startManagers makes and starts the manager of every namespace, with its
// metrics and the console's Stats. The metrics: one Collector per
// namespace's manager, told apart by a namespace label, on a registry
// jobd owns (with the Go runtime's and the process's own collectors).
// The console's Overview charts: one Stats per namespace, following the
// namespace's change feed (attempts, wait and run times of the whole
// cluster) and sampling its lag (Stats.Follow). On an error the caller
// stops the managers made so far.
func (d *daemon) startManagers(ctx context.Context, o *options) (*prometheus.Registry, map[string]*console.Stats, error) {
	c := d.cfg
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	naming := metrics.JobkitNaming
	if c.MetricsNaming == "go-job" {
		naming = metrics.GoJobNaming
	}
	stats := make(map[string]*console.Stats, len(c.Namespaces))
	for _, ns := range c.Namespaces {
		stats[ns] = console.NewStats()
		col, err := metrics.New(metrics.WithNaming(naming), metrics.WithConstLabels(prometheus.Labels{"namespace": ns}))
		if err != nil {
			return nil, nil, err
		}
		// jobotel.New: the trace context of the call that schedules (taken
		// from its traceparent header by the API) travels in the instance's
		// metadata to whichever process runs it; spans go to the global
		// TracerProvider (none unless the build installs one).
		m, err := d.newManager(ns, o, job.WithObserver(col), job.WithObserver(stats[ns]), jobotel.New())
		if err != nil {
			return nil, nil, err
		}
		d.managers[ns] = m
		if err := reg.Register(col); err != nil {
			return nil, nil, fmt.Errorf("namespace %q: register its metrics: %w", ns, err)
		}
	}
	for ns, m := range d.managers {
		if err := m.Start(ctx); err != nil {
			return nil, nil, fmt.Errorf("namespace %q: start the manager: %w", ns, err)
		}
	}
	return reg, stats, nil
}

// startAPI makes the API server and the web console at /console/ (and /
// redirects there), which calls the API in-process with each user's own
// token.
func (d *daemon) startAPI(tokens []server.Token, alerts *alerting, stats map[string]*console.Stats) error {
	c := d.cfg
	var err error
	d.api, err = server.New(server.Config{
		Namespaces: d.managers, DefaultNamespace: c.Namespaces[0], Tokens: tokens,
		Logger:      d.log.With("component", "api"),
		WasmModules: d.moduleStore, MaxRequestBytes: d.xt.maxRequestBytes(),
		Alerts:         alerts.byNS,
		ExecutorStores: d.stores.byNS, // remote executors (issue 21)
	})
	if err != nil {
		return err
	}
	d.console, err = console.New(console.Config{
		API: d.api, Prefix: "/console", Namespaces: c.Namespaces, Stats: stats,
		Logger: d.log.With("component", "console"),
	})
	return err
}

// listeners are the HTTP servers jobd runs, the addresses they listen on
// (pairs of flag name and URL, for the log) and where a server that fails
// reports it.
type listeners struct {
	errLog   *log.Logger
	servers  []*http.Server
	addrs    []any
	serveErr chan error
}

func (d *daemon) newListeners() *listeners {
	return &listeners{errLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn), serveErr: make(chan error, 2)}
}

// listen serves the API, the console, the health checks and the metrics
// on --listen, or the last three on --metrics-listen when it is set.
func (d *daemon) listen(l *listeners, reg *prometheus.Registry, tlsCfg *tls.Config) error {
	c := d.cfg
	health := http.NewServeMux()
	health.HandleFunc("GET /healthz", d.healthz)
	health.HandleFunc("GET /readyz", d.readyz)
	health.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		Registry: reg, ErrorLog: promLog{d.log}, ErrorHandling: promhttp.ContinueOnError,
	}))
	apiMux := http.NewServeMux()
	apiMux.Handle("/", d.gate(d.api))
	apiMux.Handle("/console/", d.console)
	apiMux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusFound))
	if c.MetricsListen == "" {
		apiMux.Handle("/healthz", health)
		apiMux.Handle("/readyz", health)
		// With tokens, a scrape on the API's port needs one (issue 33).
		apiMux.Handle("/metrics", d.api.MetricsGuard(health))
	}
	if tlsCfg != nil {
		tlsCfg.NextProtos = []string{"h2", "http/1.1"}
	}
	if err := l.listen(c.Listen, apiMux, "listen", tlsCfg); err != nil {
		return err
	}
	if c.MetricsListen != "" {
		return l.listen(c.MetricsListen, health, "metrics-listen", nil)
	}
	return nil
}

// listen serves h on addr (the value of flag --what) in the background.
func (l *listeners) listen(addr string, h http.Handler, what string, tlsCfg *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", what, addr, err)
	}
	srv := &http.Server{
		Handler: h, Protocols: server.Protocols(), TLSConfig: tlsCfg, ErrorLog: l.errLog,
		ReadHeaderTimeout: 10 * time.Second,
	}
	l.servers = append(l.servers, srv)
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsCfg)
	}
	l.addrs = append(l.addrs, what, scheme+"://"+ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			l.serveErr <- fmt.Errorf("--%s %s: %w", what, addr, err)
		}
	}()
	return nil
}

// logListening says where jobd listens and how to sign in to the console.
func (d *daemon) logListening(addrs []any, auth bool) {
	c := d.cfg
	d.log.Info("jobd listening", append(addrs, "store", d.stores.describe, "namespaces", strings.Join(c.Namespaces, ","),
		"auth", auth, "workers", c.Workers, "scheduler", c.Scheduler, "node", d.nodeID())...)
	signIn := "no sign-in: --tokens-file is not set"
	if auth {
		signIn = "with a token of --tokens-file (its secret, not the sha256)"
	}
	d.log.Info("console", "url", addrs[1].(string)+"/console/", "sign_in", signIn)
}

// nodeID is the node ID of the managers (the same in every namespace).
func (d *daemon) nodeID() string {
	for _, m := range d.managers {
		return m.NodeID()
	}
	return ""
}

// promLog logs promhttp's errors.
type promLog struct{ log *slog.Logger }

func (l promLog) Println(v ...any) { l.log.Warn("/metrics", "err", fmt.Sprint(v...)) }

// newManager makes the manager of namespace ns, with extra options.
func (d *daemon) newManager(ns string, o *options, extra ...job.ManagerOption) (*job.Manager, error) {
	c := d.cfg
	opts := []job.ManagerOption{
		job.WithStore(d.stores.byNS[ns]),
		job.WithWorkers(c.Workers),
		job.WithQueues(c.Queues...),
		job.WithScheduler(c.Scheduler),
		job.WithLogger(d.mlog.With("namespace", ns)),
	}
	if c.NodeID != "" {
		opts = append(opts, job.WithNodeID(c.NodeID))
	} else if id := d.nodeID(); id != "" {
		opts = append(opts, job.WithNodeID(id)) // one ID across namespaces
	}
	if len(c.Labels) > 0 {
		opts = append(opts, job.WithLabels(c.Labels...))
	}
	if d.xt != nil { // issue 22
		xo, err := d.xt.forNamespace(ns, d.stores.byNS[ns])
		if err != nil {
			return nil, err
		}
		opts = append(opts, xo)
	}
	opts = append(opts, extra...)
	opts = append(opts, o.managerOpts...)
	m, err := job.NewManager(opts...)
	if err != nil {
		if errors.Is(err, job.ErrInvalidOption) {
			return nil, usagef("%v", err)
		}
		return nil, fmt.Errorf("namespace %q: %w", ns, err)
	}
	if o.jobs != nil {
		jobs, err := o.jobs(ns)
		if err != nil {
			return nil, fmt.Errorf("namespace %q: jobs: %w", ns, err)
		}
		for _, j := range jobs {
			if err := m.RegisterJob(j); err != nil {
				return nil, fmt.Errorf("namespace %q: register %s: %w", ns, j.Kind(), err)
			}
		}
	}
	return m, nil
}

// moduleStore returns where the namespace served by m keeps uploaded
// Wasm modules (issue 22).
func (d *daemon) moduleStore(m *job.Manager) server.ModuleStore {
	for ns, mm := range d.managers {
		if mm == m {
			return d.xt.moduleStore(ns)
		}
	}
	return nil
}

// gate refuses new API calls once the drain began, in the protocol of the
// call (Connect, gRPC or gRPC-Web) with code Unavailable, and ends
// streaming calls when the drain ends them.
func (d *daemon) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.draining.Load() && !strings.HasPrefix(r.URL.Path, "/grpc.health.v1.Health/") {
			err := connect.NewError(connect.CodeUnavailable, errors.New("jobd is draining (shutting down): call another jobd of the cluster, or retry after it restarts"))
			if d.errWriter.IsSupported(r) {
				_ = d.errWriter.Write(w, r, err)
			} else {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
			}
			return
		}
		if streamPaths[r.URL.Path] {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			stop := context.AfterFunc(d.streams, cancel)
			defer stop()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// healthz answers 200 while the process runs.
func (d *daemon) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintln(w, "ok")
}

// readyz answers 200 when jobd may take calls: not draining, the store
// reachable, and every namespace's manager healthy in the cluster (its
// heartbeat measured the clock skew within bounds and it is not fenced).
// Otherwise 503 with the reasons.
func (d *daemon) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var reasons []string
	if d.draining.Load() {
		reasons = append(reasons, "draining: jobd is shutting down")
	}
	if d.stores.ping != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		err := d.stores.ping(ctx)
		cancel()
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("store unreachable (%s): %v", d.stores.describe, err))
		}
	}
	for _, ns := range d.cfg.Namespaces {
		h := d.managers[ns].Health()
		switch {
		case h.Fenced:
			reasons = append(reasons, fmt.Sprintf("namespace %s: fenced: heartbeats into the store fail", ns))
		case h.Skewed:
			reasons = append(reasons, fmt.Sprintf("namespace %s: clock skew %v against the store is beyond %v", ns, h.ClockSkew, h.MaxClockSkew))
		case !h.SkewKnown:
			reasons = append(reasons, fmt.Sprintf("namespace %s: no heartbeat has measured the clock skew yet (last round trip %v)", ns, h.HeartbeatRTT))
		}
	}
	if len(reasons) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %s\n", strings.Join(reasons, "; "))
		return
	}
	_, _ = fmt.Fprintln(w, "ready")
}

// drain stops jobd: see serve.
func (d *daemon) drain(servers []*http.Server) error {
	start := time.Now()
	d.draining.Store(true)
	d.api.Drain()
	err := d.stopManagers(d.cfg.DrainTimeout)
	d.cancelStream()
	if d.console != nil {
		d.console.Close() // ends the console's live event streams
	}
	left := max(d.cfg.DrainTimeout-time.Since(start), time.Second)
	if herr := d.shutdownHTTP(servers, left); herr != nil {
		err = errors.Join(err, herr)
	}
	if err != nil {
		d.log.Error("drained with losses", "err", err, "took", time.Since(start).Round(time.Millisecond).String())
		return err
	}
	d.log.Info("drained", "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// stopManagers stops every manager at once, each within timeout.
func (d *daemon) stopManagers(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for ns, m := range d.managers {
		wg.Go(func() {
			if err := m.Stop(ctx); err != nil && !errors.Is(err, job.ErrNotRunning) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("namespace %q: %w", ns, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shutdownHTTP lets the calls in flight end within timeout, then closes
// what is left.
func (d *daemon) shutdownHTTP(servers []*http.Server, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
			errs = append(errs, fmt.Errorf("calls still in flight after the drain timeout were cut: %w", err))
		}
	}
	return errors.Join(errs...)
}

// isLoopback reports whether addr (host:port) listens only on a loopback
// interface. An empty host listens on every interface.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		if host == "" {
			return false, nil
		}
		ips, err := net.LookupIP(host)
		if err != nil {
			return false, err
		}
		for _, ip := range ips {
			if !ip.IsLoopback() {
				return false, nil
			}
		}
		return len(ips) > 0, nil
	}
	return ip.IsLoopback(), nil
}
