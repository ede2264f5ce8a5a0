package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrForbidden is the error of a destination the Guard refuses: an
// internal address not named by the allowlist, a host a strict allowlist
// does not name, a scheme other than http or https, or credentials in a
// URL.
var ErrForbidden = errors.New("webhook: destination forbidden")

// ErrHeader is the error of a header name or value a request must not
// carry (CR, LF or NUL in a value, a name that is not an HTTP token).
var ErrHeader = errors.New("webhook: invalid header")

// ErrTooLarge is the error of a body over its size limit.
var ErrTooLarge = errors.New("webhook: body too large")

// MaxRedirects is how many redirects a Guard's client follows, each
// re-checked, before it gives up.
const MaxRedirects = 5

// Allowlist names the destinations a Guard lets a request reach beyond
// the public internet. The zero value names nothing: every public address
// is allowed and every internal one refused.
type Allowlist struct {
	hosts    map[string]bool // exact host names, lowercase
	suffixes []string        // ".example.com" from "*.example.com"
	nets     []netip.Prefix
	// Strict, when true, refuses public destinations too unless named:
	// the allowlist is then the only way out.
	Strict bool
}

// ParseAllowlist builds an Allowlist from entries, each a host name
// ("hooks.example.com"), a wildcard for its subdomains ("*.example.com",
// which does not name example.com itself), an IP address ("10.1.2.3",
// "::1") or a CIDR network ("10.0.0.0/8", "fd00::/8"). Empty entries are
// skipped; anything else is an error wrapping ErrForbidden naming it.
func ParseAllowlist(entries ...string) (*Allowlist, error) {
	a := &Allowlist{hosts: map[string]bool{}}
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("%w: allowlist entry %q is not a CIDR network (want e.g. 10.0.0.0/8)", ErrForbidden, e)
			}
			a.nets = append(a.nets, p.Masked())
		case strings.HasPrefix(e, "*."):
			if !validHostName(e[2:]) {
				return nil, fmt.Errorf("%w: allowlist entry %q: want *.domain", ErrForbidden, e)
			}
			a.suffixes = append(a.suffixes, e[1:])
		default:
			if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				a.nets = append(a.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			if !validHostName(e) {
				return nil, fmt.Errorf("%w: allowlist entry %q is neither a host name, an IP address nor a CIDR network", ErrForbidden, e)
			}
			a.hosts[e] = true
		}
	}
	return a, nil
}

func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}

// NamesHost reports whether the allowlist names host (a host name, not
// an address) exactly or through a wildcard.
func (a *Allowlist) NamesHost(host string) bool {
	if a == nil {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a.hosts[host] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// NamesAddr reports whether one of the allowlist's addresses or networks
// contains ip.
func (a *Allowlist) NamesAddr(ip netip.Addr) bool {
	if a == nil {
		return false
	}
	ip = ip.Unmap()
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// reserved holds the ranges that are not globally routable beyond what
// netip's predicates cover.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64: may reach internal IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"), // 6to4: may reach internal IPv4
}

// Internal reports why ip is not a public destination ("loopback",
// "private", ...), or "" when it is one.
func Internal(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid():
		return "invalid"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, p := range reserved {
		if p.Contains(ip) {
			return "reserved"
		}
	}
	return ""
}

// Guard decides which destinations outgoing requests may reach. The zero
// value, or a Guard with a nil Allow, refuses every internal address and
// allows every public one. A Guard is safe for concurrent use and must
// not be changed after its first use.
type Guard struct {
	// Allow names the destinations allowed beyond the public internet
	// (and, when Strict, the only ones allowed). Nil names nothing.
	Allow *Allowlist
	// DialTimeout bounds one connection attempt. Defaults to 10 s.
	DialTimeout time.Duration
	// AllowName is how the reader of a refusal sets Allow, named in the
	// error as the fix: a flag such as "jobd's --alert-allow". Defaults
	// to "the Guard's Allow list".
	AllowName string
}

// CheckAddr decides a connection to ip on behalf of a request to host
// (the URL's host, a name or an address; "" when unknown): nil when it is
// allowed, else an error wrapping ErrForbidden that names the fix.
func (g *Guard) CheckAddr(host string, ip netip.Addr) error {
	var allow *Allowlist
	allowName := "the Guard's Allow list"
	if g != nil {
		allow = g.Allow
		if g.AllowName != "" {
			allowName = g.AllowName
		}
	}
	named := allow.NamesAddr(ip) || (host != "" && allow.NamesHost(host))
	if named {
		return nil
	}
	if why := Internal(ip); why != "" {
		return fmt.Errorf("%w: %s resolves to %s address %s; to reach it, add %s to %s", ErrForbidden, nonEmpty(host, ip.String()), why, ip, allowEntry(host, ip), allowName)
	}
	if allow != nil && allow.Strict {
		return fmt.Errorf("%w: %s (%s) is not on the allowlist", ErrForbidden, nonEmpty(host, ip.String()), ip)
	}
	return nil
}

// allowEntry is what to add to an allowlist to reach ip for host: the
// host, when it is a name, or the address.
func allowEntry(host string, ip netip.Addr) string {
	if host == "" || host == ip.String() {
		return ip.String()
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return ip.String()
	}
	return host + " (or " + ip.String() + ")"
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Control is a net.Dialer Control hook that refuses a connection to an
// address the Guard forbids. It sees the address actually being
// connected, after DNS resolution, so no name or redirect gets round it;
// it cannot see the request's host name, so a host named in the
// allowlist counts only through DialContext.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	return g.control("", address)
}

func (g *Guard) control(host, address string) error {
	h, _, err := net.SplitHostPort(address)
	if err != nil {
		h = address
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return fmt.Errorf("%w: connecting to %q, which is not an IP address", ErrForbidden, address)
	}
	return g.CheckAddr(host, ip)
}

// DialContext dials address (host:port) like a net.Dialer, checking every
// address it resolves to and connects to with CheckAddr, and counting the
// allowlist's host names for the host dialed.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("%w: dial %q: %v", ErrForbidden, address, err)
	}
	timeout := 10 * time.Second
	if g != nil && g.DialTimeout > 0 {
		timeout = g.DialTimeout
	}
	d := &net.Dialer{
		Timeout:   timeout,
		KeepAlive: 30 * time.Second,
		Control: func(_, addr string, _ syscall.RawConn) error {
			return g.control(host, addr)
		},
	}
	return d.DialContext(ctx, network, address)
}

// CheckURL checks a destination URL before any connection: scheme http or
// https, a host, no user:password, and — when the host is an IP address —
// CheckAddr. Host names are decided at connect time, after resolution.
func (g *Guard) CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: URL %q: scheme %q; want http or https", ErrForbidden, redact(u), u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%w: URL %q has no host", ErrForbidden, redact(u))
	}
	if u.User != nil {
		return fmt.Errorf("%w: URL %q carries credentials; send them in a header from a secret instead", ErrForbidden, redact(u))
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		return g.CheckAddr("", ip)
	}
	return nil
}

func redact(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.User("REDACTED")
	return c.String()
}

// Client returns an http.Client whose connections go through DialContext,
// which uses no proxy from the environment (a proxy would connect on its
// behalf, unchecked), which checks every redirect with CheckURL and
// follows at most MaxRedirects, and whose requests are bounded by timeout
// (0: no bound beyond the request's context).
func (g *Guard) Client(timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= MaxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrForbidden, MaxRedirects)
			}
			if err := g.CheckURL(req.URL); err != nil {
				return fmt.Errorf("redirect: %w", err)
			}
			return nil
		},
	}
}

// CheckHeader refuses a header a request must not carry: a name that is
// not an HTTP token, or a value with CR, LF or NUL (which would end the
// header early and start one of the sender's choosing).
func CheckHeader(name, value string) error {
	if name == "" {
		return fmt.Errorf("%w: empty header name", ErrHeader)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenByte(name[i]) {
			return fmt.Errorf("%w: header name %q has byte %q; want letters, digits and !#$%%&'*+-.^_`|~", ErrHeader, name, name[i])
		}
	}
	if i := strings.IndexAny(value, "\r\n\x00"); i >= 0 {
		return fmt.Errorf("%w: value of header %q has a CR, LF or NUL at byte %d (header injection); remove it", ErrHeader, name, i)
	}
	return nil
}

func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ReadLimited reads r up to limit bytes. It returns what it read and
// whether there was more (the rest is left unread, so the caller should
// close r); limit <= 0 reads nothing.
func ReadLimited(r io.Reader, limit int64) (body []byte, truncated bool, err error) {
	if limit <= 0 {
		return nil, false, nil
	}
	body, err = io.ReadAll(io.LimitReader(r, limit+1))
	if int64(len(body)) > limit {
		return body[:limit], true, err
	}
	return body, false, err
}
