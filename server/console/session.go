package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Cookie names. The token cookie is HttpOnly and SameSite=Strict; the
// namespace and flash cookies hold nothing secret.
const (
	tokenCookie = "jobkit_token"
	nsCookie    = "jobkit_ns"
	flashCookie = "jobkit_flash"
)

// Role is what the signed-in token may do, as the server answers it.
type role int

// The roles, as the server ranks them.
const (
	roleViewer role = iota + 1
	roleOperator
	roleAdmin
)

// String names the role as the server does.
func (r role) String() string {
	switch r {
	case roleOperator:
		return "operator"
	case roleAdmin:
		return "admin"
	}
	return "viewer"
}

// identity is what the console learned of a token by asking the server.
type identity struct {
	role       role
	namespaces []string // those served and granted, in Config order
}

// identityEntry is a cached identity.
type identityEntry struct {
	id    identity
	until time.Time
}

// errSignIn is the error of a token the server refuses.
var errSignIn = errors.New("the server does not accept this token")

// session is a signed-in request's user: token, identity, namespace.
type session struct {
	token string
	id    identity
	ns    string
	csrf  string
	api   *clients
	// config is the digest of the queues' paused flags, the triggers and
	// the definitions, read before a live refresh reads the page's content
	// (empty otherwise): the page compares it with the digest its feed
	// sends every configCheck.
	config string
}

// can reports whether the session's role is at least r.
func (s *session) can(r role) bool { return s.id.role >= r }

// identify asks the server what token may do, or returns what it answered
// within IdentityTTL. Namespaces: those where ListQueues (a viewer call)
// succeeds. Role: probes with an empty ID or name, which the server
// authorises before it validates the request, so the probe changes
// nothing: PermissionDenied means the role is too low, InvalidArgument
// that it would have been allowed.
func (c *Console) identify(ctx context.Context, token string) (identity, error) {
	key := hex.EncodeToString(c.mac("identity", token))
	c.mu.Lock()
	e, ok := c.identities[key]
	c.mu.Unlock()
	if ok && time.Now().Before(e.until) {
		return e.id, nil
	}
	var id identity
	for _, ns := range c.cfg.Namespaces {
		_, err := c.newClients(token, ns).queues.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{}))
		switch connect.CodeOf(err) {
		case connect.CodeUnauthenticated:
			return identity{}, errSignIn
		case connect.CodePermissionDenied, connect.CodeNotFound:
			continue
		}
		if err != nil {
			return identity{}, err
		}
		id.namespaces = append(id.namespaces, ns)
	}
	if len(id.namespaces) == 0 {
		return identity{}, errors.New("this token may use none of the namespaces this console shows; use a token for one of them")
	}
	api := c.newClients(token, id.namespaces[0])
	id.role = roleViewer
	_, err := api.jobs.DeleteInstance(ctx, connect.NewRequest(&pb.DeleteInstanceRequest{}))
	if connect.CodeOf(err) == connect.CodeInvalidArgument {
		id.role = roleAdmin
	} else {
		_, err = api.queues.PauseQueue(ctx, connect.NewRequest(&pb.PauseQueueRequest{}))
		if connect.CodeOf(err) == connect.CodeInvalidArgument {
			id.role = roleOperator
		}
	}
	c.mu.Lock()
	now := time.Now()
	for k, v := range c.identities {
		if now.After(v.until) {
			delete(c.identities, k)
		}
	}
	c.identities[key] = identityEntry{id: id, until: now.Add(c.cfg.IdentityTTL)}
	c.mu.Unlock()
	return id, nil
}

// mac returns the HMAC of purpose and value under the session key.
func (c *Console) mac(purpose, value string) []byte {
	h := hmac.New(sha256.New, c.cfg.SessionKey)
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(value))
	return h.Sum(nil)
}

// csrfToken is the per-session token every POST form carries.
func (c *Console) csrfToken(token string) string {
	return base64.RawURLEncoding.EncodeToString(c.mac("csrf", token))
}

// session returns the signed-in user of r, or nil after redirecting to the
// sign-in page (or answering 401 to a live-events request).
func (c *Console) session(w http.ResponseWriter, r *http.Request) *session {
	ck, err := r.Cookie(tokenCookie)
	if err != nil {
		c.toSignIn(w, r, "")
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		c.clearCookie(w, r, tokenCookie)
		c.toSignIn(w, r, "")
		return nil
	}
	token := string(raw)
	id, err := c.identify(r.Context(), token)
	if err != nil {
		msg := err.Error()
		if errors.Is(err, errSignIn) {
			msg = "Your token is no longer accepted: sign in again."
		}
		c.clearCookie(w, r, tokenCookie)
		c.toSignIn(w, r, msg)
		return nil
	}
	ns := id.namespaces[0]
	if nc, err := r.Cookie(nsCookie); err == nil && slices.Contains(id.namespaces, nc.Value) {
		ns = nc.Value
	}
	s := &session{token: token, id: id, ns: ns, csrf: c.csrfToken(token), api: c.newClients(token, ns)}
	if r.Method == http.MethodGet && r.Header.Get(fragmentHeader) != "" {
		// Read before the handler reads the content, and again after it
		// (render): the content shown was read with this configuration
		// unless the two differ.
		if d, err := s.configDigest(r.Context()); err == nil {
			s.config = digestTag(d)
		}
	}
	return s
}

// toSignIn sends the browser to the sign-in page, with msg shown there.
func (c *Console) toSignIn(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Header.Get("Accept") == "text/event-stream" || r.Header.Get(fragmentHeader) != "" {
		http.Error(w, "sign in again", http.StatusUnauthorized)
		return
	}
	if msg != "" {
		c.setFlash(w, r, msg)
	}
	http.Redirect(w, r, c.path("/signin"), http.StatusSeeOther)
}

// checkPost guards a POST: same origin (when the browser says), and the
// session's CSRF token in the form. It answers 403 and returns false when
// either fails.
func (c *Console) checkPost(w http.ResponseWriter, r *http.Request, s *session) bool {
	if !sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return false
	}
	got := r.PostFormValue("csrf")
	if s == nil || !hmac.Equal([]byte(got), []byte(s.csrf)) {
		http.Error(w, "the form's CSRF token is missing or wrong: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

// sameOrigin reports whether r's Origin header, when present, names the
// host r was sent to.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return r.Header.Get("Sec-Fetch-Site") == "" || r.Header.Get("Sec-Fetch-Site") == "same-origin" || r.Header.Get("Sec-Fetch-Site") == "none"
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// setCookie sets a console cookie: HttpOnly, SameSite=Strict, scoped to
// the console's path, Secure over TLS.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	p := c.prefix
	if p == "" {
		p = "/"
	}
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: p, MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

// clearCookie removes a console cookie.
func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request, name string) {
	c.setCookie(w, r, name, "", -1)
}

// setFlash keeps a message for the next page shown.
func (c *Console) setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	c.setCookie(w, r, flashCookie, base64.RawURLEncoding.EncodeToString([]byte(msg)), 60)
}

// takeFlash returns and clears the pending message, if any.
func (c *Console) takeFlash(w http.ResponseWriter, r *http.Request) string {
	ck, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	c.clearCookie(w, r, flashCookie)
	b, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		return ""
	}
	return string(b)
}
