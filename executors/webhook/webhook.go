// Package webhook is the webhook executor type: each attempt is one
// signed HTTP request built from the definition's config and the
// instance's arguments.
//
// A definition's config (store.ExecutorSpec.Config):
//
//	{
//	  "method": "POST",                                  // default POST
//	  "url": "https://hooks.example.com/build/{{index .Args 0}}",
//	  "headers": {"Authorization": "Bearer {{secret \"ci-token\"}}"},
//	  "body": "{\"ref\": {{json (index .Args 1)}}}",     // default below
//	  "timeout": "10s",                                  // default 30s
//	  "secret_ref": "hook-key",                          // signing secret's name
//	  "max_response_bytes": 65536                        // default 64 KiB
//	}
//
// url, headers and body are text/template strings over the instance:
// {{.ID}}, {{.Kind}}, {{.Attempt}}, {{.Args}} (the arguments decoded from
// JSON), with json, urlquery, index and printf; header values may also
// call {{secret "name"}}, which the node resolves (never the URL or the
// body, which are logged). Without "body" the request carries
// {"id","kind","attempt","args"} as JSON. Every request carries
// Jobkit-Instance, Jobkit-Kind, Jobkit-Attempt and Idempotency-Key (the
// instance ID), and is signed (Jobkit-Timestamp, Jobkit-Signature: see
// package github.com/jobkit/job/webhook) with the secret secret_ref names;
// a definition that means to send unsigned requests says "unsigned": true.
//
// A 2xx response completes the instance with {"status", "headers",
// "body", "truncated"} (the body bounded). 429, 5xx and network errors
// fail the attempt, so it is retried per the job's policy, no sooner than
// a Retry-After asks; other statuses (4xx, and 3xx not followed) and a
// refused destination end it at once (job.Permanent). The exchange is
// written to the instance's log (method, URL, status, time, a bounded
// excerpt of the response), never a secret.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/jobkit/job"
	"github.com/jobkit/job/executors/internal/tmpl"
	"github.com/jobkit/job/executors/secrets"
	"github.com/jobkit/job/store"
	guard "github.com/jobkit/job/webhook"
)

// Config is a definition's webhook config; see the package documentation.
type Config struct {
	Method           string            `json:"method,omitempty"`
	URL              string            `json:"url"`
	Headers          map[string]string `json:"headers,omitempty"`
	Body             *string           `json:"body,omitempty"`
	Timeout          string            `json:"timeout,omitempty"`
	SecretRef        string            `json:"secret_ref,omitempty"`
	Unsigned         bool              `json:"unsigned,omitempty"`
	MaxResponseBytes int64             `json:"max_response_bytes,omitempty"`
}

// Limits of a config and of what an attempt sends and keeps.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 64 << 10
	MaxResponseBytesLimit   = 1 << 20
	// DefaultMaxBodyBytes bounds a rendered request body unless
	// Options.MaxBodyBytes says otherwise.
	DefaultMaxBodyBytes = 1 << 20
	maxURLBytes         = 8 << 10
	maxHeaderBytes      = 8 << 10
	logExcerpt          = 512
)

// ErrConfig is the error of a config that can work nowhere.
var ErrConfig = errors.New("webhook executor: invalid config")

// Options configure the type on a node.
type Options struct {
	// Guard decides which destinations requests may reach; nil refuses
	// every internal address (loopback, private, link-local, ...) and
	// allows every public one. jobd builds one per namespace from
	// --webhook-allow.
	Guard *guard.Guard
	// Secrets resolves secret_ref and {{secret}} names. Nil: none
	// resolve, so only unsigned definitions without secrets run.
	Secrets secrets.Resolver
	// MaxBodyBytes bounds a rendered request body. Defaults to
	// DefaultMaxBodyBytes.
	MaxBodyBytes int
	// Now is the signing clock. Defaults to time.Now.
	Now func() time.Time
}

// Type is the webhook executor type; create it with New.
type Type struct {
	opts    Options
	client  *http.Client
	signers sync.Map // secret_ref → *guard.Signer of its current secret
}

// New returns the webhook executor type configured by opts.
func New(opts Options) *Type {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Guard == nil {
		opts.Guard = &guard.Guard{}
	}
	return &Type{opts: opts, client: opts.Guard.Client(0)}
}

// Type returns store.ExecutorWebhook.
func (*Type) Type() string { return store.ExecutorWebhook }

type compiled struct {
	cfg     Config
	method  string
	url     *tmpl.Template
	headers map[string]*tmpl.Template // by canonical name
	static  map[string]string         // headers without actions, rendered once
	body    *tmpl.Template
	timeout time.Duration
	maxResp int64
}

// ParseConfig decodes and checks a webhook config: unknown fields, a
// missing URL, a bad method, timeout or template are errors wrapping
// ErrConfig.
func ParseConfig(raw []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %v (fields: method, url, headers, body, timeout, secret_ref, unsigned, max_response_bytes)", ErrConfig, err)
	}
	if _, err := compile(&c, func(string) (string, error) { return "", nil }); err != nil {
		return nil, err
	}
	return &c, nil
}

// compile checks c and parses its templates; header values call secret.
func compile(c *Config, secret func(string) (string, error)) (*compiled, error) {
	x := &compiled{cfg: *c, headers: map[string]*tmpl.Template{}, timeout: DefaultTimeout, maxResp: DefaultMaxResponseBytes}
	x.method = strings.ToUpper(c.Method)
	if x.method == "" {
		x.method = http.MethodPost
	}
	switch x.method {
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead:
	default:
		return nil, fmt.Errorf("%w: method %q; want GET, POST, PUT, PATCH, DELETE or HEAD", ErrConfig, c.Method)
	}
	if err := x.compileURLBody(c); err != nil {
		return nil, err
	}
	for name, v := range c.Headers {
		if err := x.compileHeader(name, v, secret); err != nil {
			return nil, err
		}
	}
	if err := x.compileLimits(c); err != nil {
		return nil, err
	}
	if c.SecretRef == "" && !c.Unsigned {
		return nil, fmt.Errorf("%w: no secret_ref to sign requests with; name the node's signing secret, or set \"unsigned\": true", ErrConfig)
	}
	if c.SecretRef != "" {
		if err := secrets.CheckName(c.SecretRef); err != nil {
			return nil, fmt.Errorf("%w: secret_ref: %v", ErrConfig, err)
		}
	}
	return x, nil
}

// noSecret refuses secret outside header values.
var noSecret = template.FuncMap{"secret": func(string) (string, error) {
	return "", errors.New("secret is allowed only in header values")
}}

// compileURLBody parses the url and body templates, which may not call
// secret (both are logged).
func (x *compiled) compileURLBody(c *Config) error {
	if c.URL == "" {
		return fmt.Errorf("%w: no url; set \"url\" to the endpoint (a template)", ErrConfig)
	}
	var err error
	if x.url, err = tmpl.Parse("url", c.URL, noSecret); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if templateCalls(c.URL, "secret") {
		return fmt.Errorf("%w: url calls secret; secrets go in header values only (URLs are logged)", ErrConfig)
	}
	if c.Body != nil {
		if templateCalls(*c.Body, "secret") {
			return fmt.Errorf("%w: body calls secret; secrets go in header values only (bodies are logged)", ErrConfig)
		}
		if x.body, err = tmpl.Parse("body", *c.Body, noSecret); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return nil
}

// compileHeader checks the header name: v and parses it, into x.static
// when it renders the same every time, else into x.headers.
func (x *compiled) compileHeader(name, v string, secret func(string) (string, error)) error {
	if err := guard.CheckHeader(name, ""); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if strings.HasPrefix(strings.ToLower(name), "jobkit-") {
		return fmt.Errorf("%w: header %q: Jobkit-* headers are set by the executor", ErrConfig, name)
	}
	calls := templateCalls(v, "secret")
	if sensitive(name) && !calls && strings.TrimSpace(v) != "" {
		return fmt.Errorf("%w: header %q holds a literal value; credentials go by reference: {{secret \"name\"}}", ErrConfig, name)
	}
	t, err := tmpl.Parse("header "+name, v, template.FuncMap{"secret": secret})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if v, ok := tmpl.Text(t); ok {
		if err := guard.CheckHeader(name, v); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if x.static == nil {
			x.static = map[string]string{}
		}
		x.static[http.CanonicalHeaderKey(name)] = v
		return nil
	}
	x.headers[http.CanonicalHeaderKey(name)] = t
	return nil
}

// compileLimits reads the timeout and the response size limit.
func (x *compiled) compileLimits(c *Config) error {
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return fmt.Errorf("%w: timeout %q; want a Go duration such as \"10s\"", ErrConfig, c.Timeout)
		}
		x.timeout = d
	}
	if c.MaxResponseBytes < 0 || c.MaxResponseBytes > MaxResponseBytesLimit {
		return fmt.Errorf("%w: max_response_bytes %d; want 0 (default %d) up to %d", ErrConfig, c.MaxResponseBytes, DefaultMaxResponseBytes, MaxResponseBytesLimit)
	}
	if c.MaxResponseBytes > 0 {
		x.maxResp = c.MaxResponseBytes
	}
	return nil
}

// templateCalls reports whether template text calls fn (roughly: the
// name inside an action).
func templateCalls(text, fn string) bool {
	for rest := text; ; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			return false
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return false
		}
		for _, f := range strings.FieldsFunc(rest[i+2:i+j], func(r rune) bool { return r == ' ' || r == '(' || r == '|' || r == '-' }) {
			if f == fn {
				return true
			}
		}
		rest = rest[i+j+2:]
	}
}

func sensitive(name string) bool {
	switch strings.ToLower(name) {
	case "authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token":
		return true
	}
	return false
}

// New builds the executor of a definition; a config that can work
// nowhere is an error wrapping ErrConfig.
func (t *Type) New(d *job.Definition) (job.DataExecutor, error) {
	c, err := ParseConfig(d.Executor.Config)
	if err != nil {
		return nil, err
	}
	x, err := compile(c, t.secretFunc)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, inst job.Instance, args []json.RawMessage) (any, error) {
		return t.run(ctx, x, inst, args)
	}, nil
}

// defaultBody is the request body of a config without "body".
type defaultBody struct {
	ID      string            `json:"id"`
	Kind    string            `json:"kind"`
	Attempt int               `json:"attempt"`
	Args    []json.RawMessage `json:"args"`
}

var (
	contentJSON = []string{"application/json"}
	userAgent   = []string{"jobkit-webhook/1"}
)

// Result is what a completed webhook attempt keeps as its result.
type Result struct {
	Status    int               `json:"status"`
	Headers   map[string]string `json:"headers,omitempty"`
	Body      string            `json:"body,omitempty"`
	Truncated bool              `json:"truncated,omitempty"`
}

func (t *Type) run(ctx context.Context, x *compiled, inst job.Instance, args []json.RawMessage) (any, error) {
	data, err := tmpl.NewData(inst, args)
	if err != nil {
		return nil, job.Permanent(err)
	}
	rawURL, err := tmpl.Render(x.url, data, maxURLBytes)
	if err != nil {
		return nil, job.Permanent(err)
	}
	body, err := t.renderBody(x, data, args)
	if err != nil {
		return nil, err
	}
	h, err := t.header(x, data, body)
	if err != nil {
		return nil, err
	}

	rctx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	// The request parses the rendered URL once; the guard checks that
	// parse, which is what the transport dials.
	req, err := http.NewRequestWithContext(rctx, x.method, strings.TrimSpace(rawURL), bytes.NewReader(body))
	if err != nil {
		return nil, job.Permanent(fmt.Errorf("%w: the url template rendered %q, not a URL: %v", guard.ErrForbidden, rawURL, err))
	}
	u := req.URL
	if err := t.opts.Guard.CheckURL(u); err != nil {
		return nil, job.Permanent(err)
	}
	req.Header = h
	start := time.Now()
	resp, err := t.client.Do(req)
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		return nil, sendError(ctx, rctx, x, inst, u, took, err)
	}
	defer resp.Body.Close()
	var (
		rb        []byte
		truncated bool
		rerr      error
	)
	if resp.ContentLength != 0 && x.method != http.MethodHead {
		rb, truncated, rerr = guard.ReadLimited(resp.Body, x.maxResp)
	}
	if rerr != nil && ctx.Err() != nil {
		return nil, rerr
	}
	inst.Infof("webhook %s %s → %d in %v; response %s", x.method, u.Redacted(), resp.StatusCode, took, excerpt(rb, truncated))
	return verdict(x, inst, u, resp, rb, truncated)
}

// renderBody is the request's body: the config's body template rendered,
// or else the default JSON body; either at most MaxBodyBytes.
func (t *Type) renderBody(x *compiled, data *tmpl.Data, args []json.RawMessage) ([]byte, error) {
	if x.body != nil {
		s, err := tmpl.Render(x.body, data, t.opts.MaxBodyBytes)
		if err != nil {
			return nil, job.Permanent(fmt.Errorf("%w (the body limit is %d bytes)", err, t.opts.MaxBodyBytes))
		}
		return []byte(s), nil
	}
	if args == nil {
		args = []json.RawMessage{}
	}
	body, _ := json.Marshal(defaultBody{ID: data.ID, Kind: data.Kind, Attempt: data.Attempt, Args: args})
	if len(body) > t.opts.MaxBodyBytes {
		return nil, job.Permanent(fmt.Errorf("%w: request body of %d bytes; the limit is %d", guard.ErrTooLarge, len(body), t.opts.MaxBodyBytes))
	}
	return body, nil
}

// header is the request's header: the config's headers, the jobkit ones
// and, with a secret_ref, the signature of body.
func (t *Type) header(x *compiled, data *tmpl.Data, body []byte) (http.Header, error) {
	// Header values are set under their canonical names directly (no
	// re-canonicalising per request): static ones as compiled, templated
	// ones rendered and checked for CR/LF here.
	h := make(http.Header, len(x.static)+len(x.headers)+8)
	for name, v := range x.static {
		h[name] = []string{v}
	}
	for name, ht := range x.headers {
		v, err := tmpl.Render(ht, data, maxHeaderBytes)
		if err != nil {
			return nil, job.Permanent(err)
		}
		if err := guard.CheckHeader(name, v); err != nil {
			return nil, job.Permanent(err)
		}
		h[name] = []string{v}
	}
	if len(h["Content-Type"]) == 0 && len(body) > 0 {
		h["Content-Type"] = contentJSON
	}
	vals := [3]string{data.ID, data.Kind, strconv.Itoa(data.Attempt)} // one allocation for three values
	h["User-Agent"] = userAgent
	h["Jobkit-Instance"] = vals[0:1:1]
	h["Jobkit-Kind"] = vals[1:2:2]
	h["Jobkit-Attempt"] = vals[2:3:3]
	h["Idempotency-Key"] = vals[0:1:1]
	if x.cfg.SecretRef != "" {
		secret, err := t.secret(x.cfg.SecretRef)
		if err != nil {
			return nil, job.Permanent(fmt.Errorf("sign the request: %w", err))
		}
		t.signer(x.cfg.SecretRef, secret).SignHeader(h, t.opts.Now(), body)
	}
	return h, nil
}

// sendError is the attempt's error when the request got no response: a
// refused address fails it permanently, the attempt's own end is left to
// the engine, the config's timeout and any other failure are retried.
func sendError(ctx, rctx context.Context, x *compiled, inst job.Instance, u *url.URL, took time.Duration, err error) error {
	switch {
	case errors.Is(err, guard.ErrForbidden):
		inst.Errorf("webhook %s %s refused: %v", x.method, u.Redacted(), err)
		return job.Permanent(err)
	case ctx.Err() != nil:
		return err // the attempt's own timeout or cancel: the engine decides
	case rctx.Err() != nil:
		inst.Warnf("webhook %s %s: no response within %v", x.method, u.Redacted(), x.timeout)
		return fmt.Errorf("webhook %s %s: no response within the config's timeout %v", x.method, u.Redacted(), x.timeout)
	}
	inst.Warnf("webhook %s %s failed after %v: %v", x.method, u.Redacted(), took, err)
	return fmt.Errorf("webhook %s %s: %w", x.method, u.Redacted(), err)
}

// verdict turns a response into the attempt's result (2xx), a retried
// error (429 and 5xx, after Retry-After when given) or a permanent one.
func verdict(x *compiled, inst job.Instance, u *url.URL, resp *http.Response, rb []byte, truncated bool) (any, error) {
	res := &Result{Status: resp.StatusCode, Headers: make(map[string]string, len(resp.Header)), Body: toText(rb), Truncated: truncated}
	for k, v := range resp.Header {
		if len(v) > 0 && !strings.EqualFold(k, "Set-Cookie") {
			res.Headers[k] = v[0]
		}
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return res, nil
	case code == http.StatusTooManyRequests || code >= 500:
		err := fmt.Errorf("webhook %s %s: status %d: %s", x.method, u.Redacted(), code, excerpt(rb, truncated))
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			inst.Infof("webhook: the server asks to retry after %v", d)
			return nil, job.RetryAfter(err, d)
		}
		return nil, err
	default:
		return nil, job.Permanent(fmt.Errorf("webhook %s %s: status %d (not retried): %s", x.method, u.Redacted(), code, excerpt(rb, truncated)))
	}
}

func (t *Type) secret(name string) ([]byte, error) {
	if t.opts.Secrets == nil {
		return nil, fmt.Errorf("%w: %q; this node has no secrets configured", secrets.ErrNotFound, name)
	}
	return t.opts.Secrets(name)
}

// signer returns the Signer of secret, the current value of ref (the
// secrets are resolved on every attempt, so a rotated one replaces it).
func (t *Type) signer(ref string, secret []byte) *guard.Signer {
	if v, ok := t.signers.Load(ref); ok {
		if s := v.(*guard.Signer); s.Secret(secret) {
			return s
		}
	}
	s := guard.NewSigner(secret)
	t.signers.Store(ref, s)
	return s
}

func (t *Type) secretFunc(name string) (string, error) {
	b, err := t.secret(name)
	return string(b), err
}

// retryAfter parses a Retry-After header: seconds or an HTTP date, capped
// at a day.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	} else {
		return 0, false
	}
	return min(max(d, 0), 24*time.Hour), true
}

func toText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func excerpt(b []byte, truncated bool) string {
	s := toText(b)
	if len(s) > logExcerpt {
		s, truncated = s[:logExcerpt], true
	}
	if truncated {
		s += "…"
	}
	if s == "" {
		return "(empty)"
	}
	return strconv.Quote(s)
}
