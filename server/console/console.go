// Package console is jobkit's web console: server-rendered pages to see and
// operate queues, instances, jobs, triggers and nodes, updated live from the
// server's change feed.
//
// The console is an http.Handler. It holds no authority of its own: a user
// signs in with an API token, which the console keeps in an HttpOnly,
// SameSite=Strict cookie and sends with every jobkit.v1 call it makes for
// that user, so the server checks every page and every action. Mount it in
// any http.Server, under any path prefix:
//
//	srv, _ := server.New(server.Config{Namespaces: ..., Tokens: ...})
//	con, _ := console.New(console.Config{API: srv, Prefix: "/console", Namespaces: []string{"default"}})
//	defer con.Close()
//	mux.Handle("/console/", con)
//	mux.Handle("/", srv)
//
// Its assets are embedded; building it needs no Node.
package console

import (
	"crypto/rand"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// namespaceHeader is the header that names the namespace of a jobkit.v1
// call (server.NamespaceHeader).
const namespaceHeader = "Jobkit-Namespace"

// Config configures a Console.
type Config struct {
	// API is the jobkit.v1 handler (a *server.Server) the console calls
	// in-process, over an in-memory connection. Set exactly one of API and
	// URL.
	API http.Handler
	// URL is the base URL of a jobkit.v1 server the console calls over the
	// network ("https://jobd.internal:8080").
	URL string
	// HTTPClient makes the calls to URL. Defaults to a client with HTTP/1.1
	// and HTTP/2. Ignored with API.
	HTTPClient *http.Client
	// Prefix is the path the console is mounted under ("/console"); the
	// handler expects request paths that start with it. Defaults to "" (the
	// console at "/").
	Prefix string
	// Namespaces are the namespaces the server serves. A signed-in user
	// sees those its token grants. Defaults to ["default"].
	Namespaces []string
	// Stats are the Overview's charts of each namespace: give the same
	// *Stats to the namespace's Manager (job.WithObserver). A namespace
	// without one shows no charts. Defaults to none.
	Stats map[string]*Stats
	// Title is shown in the page header. Defaults to "jobkit".
	Title string
	// SessionKey signs the per-session CSRF tokens; at least 32 bytes.
	// Defaults to random bytes, so sessions end when the process restarts
	// unless several consoles behind one address share a key.
	SessionKey []byte
	// IdentityTTL is how long the console trusts what it learned of a token
	// (its role and namespaces) before asking the server again. Defaults to
	// 30 s; the server checks every call regardless.
	IdentityTTL time.Duration
	// SearchScanLimit is how many instances the server reads at most for
	// one page of a text search on the Instances page before it answers
	// with what it found and a link to continue (ListInstancesRequest's
	// scan_limit). Defaults to 0, the server's default (10,000).
	SearchScanLimit int
	// Logger receives the console's own log lines; nil means slog.Default().
	Logger *slog.Logger
}

// Console serves the web console. Create it with New; Close it when done.
type Console struct {
	cfg        Config
	prefix     string
	mux        *http.ServeMux
	pages      map[string]*template.Template
	httpClient *http.Client
	baseURL    string
	pipe       *pipeListener
	apiServer  *http.Server

	mu         sync.Mutex
	identities map[string]identityEntry
	// bus tells open pages of the changes made here that have no event.
	bus changeBus
}

// New checks cfg and returns a Console for it.
func New(cfg Config) (*Console, error) {
	if (cfg.API == nil) == (cfg.URL == "") {
		return nil, errors.New("console: set exactly one of Config.API (an in-process jobkit.v1 handler such as *server.Server) and Config.URL (a jobkit.v1 server's base URL)")
	}
	prefix := strings.TrimRight(cfg.Prefix, "/")
	if prefix != "" && !strings.HasPrefix(prefix, "/") {
		return nil, fmt.Errorf("console: Prefix %q must start with \"/\" (for example \"/console\")", cfg.Prefix)
	}
	if len(cfg.Namespaces) == 0 {
		cfg.Namespaces = []string{"default"}
	}
	if cfg.Title == "" {
		cfg.Title = "jobkit"
	}
	switch {
	case cfg.SessionKey == nil:
		cfg.SessionKey = make([]byte, 32)
		if _, err := rand.Read(cfg.SessionKey); err != nil {
			return nil, fmt.Errorf("console: making a session key: %w", err)
		}
	case len(cfg.SessionKey) < 32:
		return nil, fmt.Errorf("console: SessionKey has %d bytes; give at least 32 random bytes, or none for a random key", len(cfg.SessionKey))
	}
	if cfg.IdentityTTL <= 0 {
		cfg.IdentityTTL = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Console{cfg: cfg, prefix: prefix, identities: map[string]identityEntry{}}
	if cfg.API != nil {
		c.pipe = newPipeListener()
		c.apiServer = &http.Server{Handler: cfg.API, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = c.apiServer.Serve(c.pipe) }()
		c.httpClient = &http.Client{Transport: &http.Transport{DialContext: c.pipe.dial, MaxIdleConnsPerHost: 16}}
		c.baseURL = "http://in-process"
	} else {
		u, err := url.Parse(cfg.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("console: URL %q is not an http(s) base URL such as \"http://127.0.0.1:8080\"", cfg.URL)
		}
		c.baseURL = strings.TrimRight(cfg.URL, "/")
		c.httpClient = cfg.HTTPClient
		if c.httpClient == nil {
			c.httpClient = &http.Client{}
		}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c.pages = pages
	c.routes()
	return c, nil
}

// Close ends the in-process connection to Config.API (live pages still
// open end with it). It does nothing with Config.URL.
func (c *Console) Close() error {
	if c.apiServer == nil {
		return nil
	}
	c.httpClient.CloseIdleConnections()
	return c.apiServer.Close()
}

// ServeHTTP serves the console's pages, actions, live events and assets.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	rest, ok := strings.CutPrefix(r.URL.Path, c.prefix)
	if !ok || (rest != "" && !strings.HasPrefix(rest, "/")) {
		http.NotFound(w, r)
		return
	}
	if rest == "" {
		http.Redirect(w, r, c.prefix+"/", http.StatusFound)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = rest
	r2.URL.RawPath = ""
	c.mux.ServeHTTP(w, r2)
}

// path returns the URL path of a console page.
func (c *Console) path(p string) string { return c.prefix + p }
