package alert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/jobkit/job/alert"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// mailServer is a real SMTP server on loopback, with STARTTLS and a PLAIN
// login, that keeps the mails it accepts.
type mailServer struct {
	addr   string
	caFile string
	mu     sync.Mutex
	mails  []string
	logins []string
	srv    *smtp.Server
}

// noTLS stops offering STARTTLS (before the first connection), and lets
// a login through in the clear, as a careless server would.
func (m *mailServer) noTLS() {
	m.srv.TLSConfig = nil
	m.srv.AllowInsecureAuth = true
}

type mailSession struct {
	srv      *mailServer
	password string
	authed   bool
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		s.srv.mu.Lock()
		s.srv.logins = append(s.srv.logins, user)
		s.srv.mu.Unlock()
		if user != "jobs" || pass != s.password {
			return errors.New("bad credentials")
		}
		s.authed = true
		return nil
	}), nil
}
func (s *mailSession) Mail(string, *smtp.MailOptions) error {
	if !s.authed {
		return &smtp.SMTPError{Code: 530, Message: "authentication required"}
	}
	return nil
}
func (s *mailSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (s *mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.srv.mu.Lock()
	s.srv.mails = append(s.srv.mails, string(b))
	s.srv.mu.Unlock()
	return nil
}
func (s *mailSession) Reset()        {}
func (s *mailSession) Logout() error { return nil }

// newMailServer starts a server that accepts the login jobs/password.
func newMailServer(t *testing.T, password string) *mailServer {
	t.Helper()
	cert, caPEM := selfSigned(t)
	m := &mailServer{caFile: filepath.Join(t.TempDir(), "ca.pem")}
	if err := os.WriteFile(m.caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &mailSession{srv: m, password: password}, nil
	}))
	s.Domain = "localhost"
	s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = l.Addr().String()
	m.srv = s
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
	return m
}

// selfSigned makes a certificate for 127.0.0.1 and the PEM to trust it.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jobkit test smtp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM
}

func TestEmailChannel(t *testing.T) {
	ctx := context.Background()
	st, err := memdbstore.New()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := alert.New(alert.Config{Store: st, Node: "n1", ConsoleURL: "https://jobd.example/console"})
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "smtp-password")
	if err := os.WriteFile(pwFile, []byte("right-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := newMailServer(t, "right-password")
	ch := &alert.Channel{Name: "mail", Type: alert.Email, SMTPAddr: good.addr, From: "jobs@example.com", To: []string{"ops@example.com"},
		Username: "jobs", PasswordRef: "file:" + pwFile, CAFile: good.caFile}
	if _, err := svc.PutChannel(ctx, ch, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.TestChannel(ctx, "mail"); err != nil {
		t.Fatalf("test notification: %v", err)
	}
	good.mu.Lock()
	mails := append([]string(nil), good.mails...)
	good.mu.Unlock()
	if len(mails) != 1 || !strings.Contains(mails[0], "Subject: TEST") || !strings.Contains(mails[0], "To: ops@example.com") {
		t.Fatalf("mails %q; want one test mail to ops@example.com", mails)
	}
	// The API's view of the channel carries the reference, not the password.
	got, err := svc.GetChannel(ctx, "mail")
	if err != nil || got.PasswordRef != "file:"+pwFile {
		t.Fatalf("channel %+v, %v", got, err)
	}

	// A server that refuses the login: the test send says so, and the
	// channel shows as failing.
	refusing := newMailServer(t, "another-password")
	ch.SMTPAddr, ch.CAFile = refusing.addr, refusing.caFile
	if _, err := svc.PutChannel(ctx, ch, got.Version); err != nil {
		t.Fatal(err)
	}
	_, err = svc.TestChannel(ctx, "mail")
	if !errors.Is(err, alert.ErrDelivery) || !strings.Contains(err.Error(), "refused the login of jobs") {
		t.Fatalf("test notification to a refusing server: %v; want ErrDelivery naming the refused login", err)
	}
	status, err := svc.ChannelStatus(ctx, "mail")
	if err != nil || status.ConsecutiveFailures != 1 || !strings.Contains(status.LastError, "refused the login") || status.Delivered != 1 {
		t.Fatalf("status %+v, %v; want failing once after one delivery", status, err)
	}
	if strings.Contains(status.LastError, "right-password") || strings.Contains(status.LastError, "another-password") {
		t.Fatalf("a password in the status: %q", status.LastError)
	}
	page, err := svc.ListNotifications(ctx, "", 0, "")
	if err != nil || len(page.Notifications) != 2 || page.Notifications[0].Status != alert.Undelivered || page.Notifications[1].Status != alert.Delivered {
		t.Fatalf("history %+v, %v; want the failed test then the delivered one", page.Notifications, err)
	}
	// A server without STARTTLS is refused: mail goes only over TLS.
	plain := newMailServer(t, "right-password")
	plain.noTLS()
	ch.SMTPAddr = plain.addr
	if _, err := svc.PutChannel(ctx, ch, store.AnyVersion); err != nil {
		t.Fatal(err)
	}
	if _, err = svc.TestChannel(ctx, "mail"); err == nil || !strings.Contains(err.Error(), "does not offer STARTTLS") {
		t.Fatalf("test notification without STARTTLS: %v", err)
	}
	plain.mu.Lock()
	defer plain.mu.Unlock()
	if len(plain.logins) != 0 || len(plain.mails) != 0 {
		t.Fatalf("credentials or mail sent in the clear: logins %v, mails %d", plain.logins, len(plain.mails))
	}
}
