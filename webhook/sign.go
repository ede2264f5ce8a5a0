package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// HeaderTimestamp is the request header holding the Unix time, in
	// seconds, at which the request was signed.
	HeaderTimestamp = "Jobkit-Timestamp"
	// HeaderSignature is the request header holding one or more
	// comma-separated "v1=<hex HMAC-SHA256>" signatures.
	HeaderSignature = "Jobkit-Signature"
	// DefaultTolerance is how far a request's timestamp may be from the
	// receiver's clock when Verify is given a tolerance of 0.
	DefaultTolerance = 5 * time.Minute
)

// ErrSignature is the error of Verify when a request is not signed, is
// signed with another secret, was changed after signing, or is too old.
var ErrSignature = errors.New("webhook: bad signature")

// Sign returns the value of HeaderSignature for body signed with secret at
// time t: "v1=" and the hex HMAC-SHA256 of "<unix seconds>.<body>".
func Sign(secret []byte, t time.Time, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, t.Unix(), body))
}

// SignHeader sets HeaderTimestamp and HeaderSignature on h for body signed
// with secret at time t.
func SignHeader(h http.Header, secret []byte, t time.Time, body []byte) {
	h.Set(HeaderTimestamp, strconv.FormatInt(t.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, t, body))
}

// Signer signs requests with one secret like SignHeader, reusing the
// secret's keyed HMAC state between requests instead of keying a new one
// each time. It is safe for concurrent use.
type Signer struct {
	secret []byte
	pool   sync.Pool // of hash.Hash keyed with secret
}

// NewSigner returns a Signer for secret (copied).
func NewSigner(secret []byte) *Signer {
	s := &Signer{secret: append([]byte(nil), secret...)}
	s.pool.New = func() any { return hmac.New(sha256.New, s.secret) }
	return s
}

// Secret reports whether s signs with secret, so a caller holding a
// Signer can tell when the secret was rotated.
func (s *Signer) Secret(secret []byte) bool { return hmac.Equal(s.secret, secret) }

// SignHeader sets HeaderTimestamp and HeaderSignature on h for body signed
// at time t, as the package's SignHeader does.
func (s *Signer) SignHeader(h http.Header, t time.Time, body []byte) {
	m := s.pool.Get().(hash.Hash)
	m.Reset()
	var buf [20]byte
	ts := strconv.AppendInt(buf[:0], t.Unix(), 10)
	m.Write(ts)
	m.Write([]byte{'.'})
	m.Write(body)
	var sum [sha256.Size]byte
	sig := make([]byte, 0, 3+2*sha256.Size)
	sig = append(sig, "v1="...)
	sig = hex.AppendEncode(sig, m.Sum(sum[:0]))
	s.pool.Put(m)
	h[HeaderTimestamp] = []string{string(ts)}
	h[HeaderSignature] = []string{string(sig)}
}

func mac(secret []byte, unix int64, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(strconv.AppendInt(nil, unix, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks the signature headers of a received request against the
// raw body it carried and secret. now is the receiver's clock; tolerance
// bounds how far the signed timestamp may be from it (0 means
// DefaultTolerance). A missing, malformed, mismatched or stale signature
// is an error wrapping ErrSignature.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret to verify with; pass the secret the sender signs with", ErrSignature)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	ts := h.Get(HeaderTimestamp)
	sigs := h.Get(HeaderSignature)
	if ts == "" || sigs == "" {
		return fmt.Errorf("%w: missing %s or %s header", ErrSignature, HeaderTimestamp, HeaderSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrSignature, HeaderTimestamp, ts)
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from this clock (tolerance %s)", ErrSignature, time.Unix(unix, 0).UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	want := mac(secret, unix, body)
	for s := range strings.SplitSeq(sigs, ",") {
		hexSig, ok := strings.CutPrefix(strings.TrimSpace(s), "v1=")
		if !ok {
			continue
		}
		got, err := hex.DecodeString(hexSig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature in %s matches the body", ErrSignature, HeaderSignature)
}
