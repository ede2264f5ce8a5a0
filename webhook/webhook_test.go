package webhook_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobkit/job/webhook"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	now := time.Unix(1767225600, 0)
	body := []byte(`{"a":1}`)
	h := http.Header{}
	webhook.SignHeader(h, secret, now, body)
	if got := h.Get(webhook.HeaderTimestamp); got != "1767225600" {
		t.Fatalf("timestamp header %q", got)
	}
	if err := webhook.Verify(secret, h, body, now.Add(time.Minute), 0); err != nil {
		t.Fatalf("Verify of a fresh signature: %v", err)
	}
	cases := map[string]func() (http.Header, []byte, []byte, time.Time){
		"body changed": func() (http.Header, []byte, []byte, time.Time) { return h, []byte(`{"a":2}`), secret, now },
		"other secret": func() (http.Header, []byte, []byte, time.Time) { return h, body, []byte("other"), now },
		"too old":      func() (http.Header, []byte, []byte, time.Time) { return h, body, secret, now.Add(6 * time.Minute) },
		"from future":  func() (http.Header, []byte, []byte, time.Time) { return h, body, secret, now.Add(-6 * time.Minute) },
		"unsigned":     func() (http.Header, []byte, []byte, time.Time) { return http.Header{}, body, secret, now },
		"no secret":    func() (http.Header, []byte, []byte, time.Time) { return h, body, nil, now },
		"timestamp changed": func() (http.Header, []byte, []byte, time.Time) {
			c := h.Clone()
			c.Set(webhook.HeaderTimestamp, "1767225601")
			return c, body, secret, now
		},
	}
	for name, f := range cases {
		hh, b, s, at := f()
		if err := webhook.Verify(s, hh, b, at, 0); !errors.Is(err, webhook.ErrSignature) {
			t.Errorf("%s: Verify = %v, want ErrSignature", name, err)
		}
	}
	// Rotation: a header listing an old and the current signature verifies.
	rot := h.Clone()
	rot.Set(webhook.HeaderSignature, webhook.Sign([]byte("old"), now, body)+", "+webhook.Sign(secret, now, body))
	if err := webhook.Verify(secret, rot, body, now, 0); err != nil {
		t.Fatalf("Verify with two signatures: %v", err)
	}
}

// TestSignedRequestVerifiedByReceiver sends a signed request through a
// Guard's client to a real server that verifies it.
func TestSignedRequestVerifiedByReceiver(t *testing.T) {
	t.Parallel()
	secret := []byte("hook-secret")
	verified := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		verified <- webhook.Verify(secret, r.Header, b, time.Now(), time.Minute)
	}))
	defer srv.Close()
	allow, err := webhook.ParseAllowlist("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	g := &webhook.Guard{Allow: allow}
	body := []byte(`{"hello":"world"}`)
	req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader(body))
	webhook.SignHeader(req.Header, secret, time.Now(), body)
	resp, err := g.Client(5 * time.Second).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-verified; err != nil {
		t.Fatalf("receiver: %v", err)
	}
}

func TestGuardRefusesLoopbackWithoutAllowlist(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	var g webhook.Guard
	// An IP literal, and a name that resolves to loopback (the check runs
	// on the resolved address, so DNS cannot get round it).
	for _, u := range []string{srv.URL, "http://localhost:" + strconv.Itoa(port) + "/"} {
		_, err := g.Client(5 * time.Second).Get(u)
		if !errors.Is(err, webhook.ErrForbidden) {
			t.Fatalf("GET %s = %v, want ErrForbidden", u, err)
		}
		if !strings.Contains(err.Error(), "loopback") {
			t.Errorf("error %q does not say why", err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server got %d requests", n)
	}
	// Named by host, by address and by network: allowed.
	for _, entry := range []string{"localhost", "127.0.0.1", "127.0.0.0/8"} {
		allow, err := webhook.ParseAllowlist(entry)
		if err != nil {
			t.Fatal(err)
		}
		g := webhook.Guard{Allow: allow}
		resp, err := g.Client(5 * time.Second).Get("http://localhost:" + strconv.Itoa(port) + "/")
		if err != nil {
			t.Fatalf("allowlist %q: %v", entry, err)
		}
		resp.Body.Close()
	}
}

func TestGuardStrict(t *testing.T) {
	t.Parallel()
	allow, _ := webhook.ParseAllowlist("hooks.example.com", "*.corp.example", "10.0.0.0/8")
	allow.Strict = true
	g := &webhook.Guard{Allow: allow}
	pub := netip.MustParseAddr("93.184.216.34")
	if err := g.CheckAddr("example.org", pub); !errors.Is(err, webhook.ErrForbidden) {
		t.Errorf("strict, unnamed public host: %v", err)
	}
	if err := g.CheckAddr("hooks.example.com", pub); err != nil {
		t.Errorf("strict, named host: %v", err)
	}
	if err := g.CheckAddr("a.corp.example", netip.MustParseAddr("192.168.1.1")); err != nil {
		t.Errorf("wildcard-named host at a private address: %v", err)
	}
	if err := g.CheckAddr("corp.example", netip.MustParseAddr("192.168.1.1")); !errors.Is(err, webhook.ErrForbidden) {
		t.Errorf("*.corp.example must not name corp.example: %v", err)
	}
	if err := g.CheckAddr("", netip.MustParseAddr("10.2.3.4")); err != nil {
		t.Errorf("address in a named network: %v", err)
	}
	var open webhook.Guard
	if err := open.CheckAddr("example.org", pub); err != nil {
		t.Errorf("zero Guard, public address: %v", err)
	}
}

func TestInternal(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"10.1.2.3": "private", "172.16.0.1": "private", "192.168.0.1": "private", "fd00::1": "private",
		"169.254.169.254": "link-local", "fe80::1": "link-local",
		"0.0.0.0": "unspecified", "::": "unspecified",
		"224.0.0.1": "multicast", "ff02::1": "multicast",
		"100.64.0.1": "reserved", "255.255.255.255": "reserved", "64:ff9b::a00:1": "reserved",
		"8.8.8.8": "", "2606:4700::1111": "",
	} {
		if got := webhook.Internal(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Internal(%s) = %q, want %q", addr, got, want)
		}
	}
}

// TestGuardRefusesRedirectToForbiddenHost: an allowed server redirects to
// another loopback address the allowlist does not name.
func TestGuardRefusesRedirectToForbiddenHost(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.2 (Linux routes all of 127/8 to lo): %v", err)
	}
	hit := make(chan struct{}, 1)
	forbidden := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- struct{}{} })}}
	forbidden.Start()
	defer forbidden.Close()
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		default:
			http.Redirect(w, r, forbidden.URL+"/x", http.StatusFound)
		}
	}))
	defer allowed.Close()
	allow, _ := webhook.ParseAllowlist("127.0.0.1/32")
	g := &webhook.Guard{Allow: allow}
	for _, path := range []string{"/", "/file"} {
		_, err = g.Client(5 * time.Second).Get(allowed.URL + path)
		if !errors.Is(err, webhook.ErrForbidden) {
			t.Fatalf("GET %s with a redirect = %v, want ErrForbidden", path, err)
		}
	}
	select {
	case <-hit:
		t.Fatal("the forbidden server was reached")
	default:
	}
	// The Control hook alone, on a plain dialer, refuses it too.
	d := &net.Dialer{Control: g.Control}
	if _, err := d.Dial("tcp", ln.Addr().String()); !errors.Is(err, webhook.ErrForbidden) {
		t.Fatalf("dial with Control = %v, want ErrForbidden", err)
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	var g webhook.Guard
	for _, u := range []string{"ftp://example.com/", "http:///path", "https://user:pw@example.com/", "http://169.254.169.254/latest/meta-data", "http://[::1]:80/"} {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		err = g.CheckURL(pu)
		if !errors.Is(err, webhook.ErrForbidden) {
			t.Errorf("CheckURL(%s) = %v, want ErrForbidden", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("CheckURL(%s) error leaks the password: %v", u, err)
		}
	}
	pu, _ := url.Parse("https://hooks.example.com/x?y=1")
	if err := g.CheckURL(pu); err != nil {
		t.Errorf("public https URL: %v", err)
	}
}

func TestCheckHeader(t *testing.T) {
	t.Parallel()
	for _, h := range [][2]string{
		{"X-Ok", "a\r\nX-Evil: 1"}, {"X-Ok", "a\nb"}, {"X-Ok", "a\x00"},
		{"X-Bad Name", "v"}, {"X-Bad:", "v"}, {"", "v"}, {"X-\r\nEvil", "v"},
	} {
		if err := webhook.CheckHeader(h[0], h[1]); !errors.Is(err, webhook.ErrHeader) {
			t.Errorf("CheckHeader(%q, %q) = %v, want ErrHeader", h[0], h[1], err)
		}
	}
	if err := webhook.CheckHeader("Content-Type", "application/json; charset=utf-8"); err != nil {
		t.Errorf("valid header: %v", err)
	}
}

func TestParseAllowlistErrors(t *testing.T) {
	t.Parallel()
	for _, e := range []string{"10.0.0.0/33", "not a host", "*.", "http://x"} {
		if _, err := webhook.ParseAllowlist(e); !errors.Is(err, webhook.ErrForbidden) {
			t.Errorf("ParseAllowlist(%q) = %v, want an error", e, err)
		}
	}
}

func TestReadLimited(t *testing.T) {
	t.Parallel()
	b, trunc, err := webhook.ReadLimited(strings.NewReader("0123456789"), 4)
	if err != nil || string(b) != "0123" || !trunc {
		t.Fatalf("ReadLimited 4 of 10 = %q %v %v", b, trunc, err)
	}
	b, trunc, err = webhook.ReadLimited(strings.NewReader("0123"), 4)
	if err != nil || string(b) != "0123" || trunc {
		t.Fatalf("ReadLimited 4 of 4 = %q %v %v", b, trunc, err)
	}
	// A bounded read of a real endless response returns.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte("x"), 1<<16)
		for i := 0; i < 1<<10; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	allow, _ := webhook.ParseAllowlist("127.0.0.1")
	resp, err := (&webhook.Guard{Allow: allow}).Client(5 * time.Second).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, trunc, err = webhook.ReadLimited(resp.Body, 1000)
	if err != nil || len(b) != 1000 || !trunc {
		t.Fatalf("ReadLimited of a 64 MiB body = %d bytes, truncated %v, %v", len(b), trunc, err)
	}
}

func TestSignerMatchesSignHeader(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	s := webhook.NewSigner(secret)
	at := time.Unix(1_700_000_000, 0)
	for _, body := range [][]byte{nil, []byte(`{"a":1}`), []byte(strings.Repeat("x", 5000))} {
		for range 3 { // the second and third reuse the pooled state
			want, got := http.Header{}, http.Header{}
			webhook.SignHeader(want, secret, at, body)
			s.SignHeader(got, at, body)
			if got.Get(webhook.HeaderSignature) != want.Get(webhook.HeaderSignature) || got.Get(webhook.HeaderTimestamp) != want.Get(webhook.HeaderTimestamp) {
				t.Fatalf("Signer %v, SignHeader %v", got, want)
			}
			if err := webhook.Verify(secret, got, body, at, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !s.Secret(secret) || s.Secret([]byte("other")) {
		t.Fatal("Secret does not tell the signer's secret from another")
	}
}
