package main_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/jobkit/job/api/gen/jobkit/v1/jobkitv1connect"
)

// mailServer is a real SMTP server on loopback with STARTTLS and a PLAIN
// login (user "jobs"), keeping the mails it accepts.
type mailServer struct {
	addr, caFile string
	mu           sync.Mutex
	mails        []string
}

type mailSession struct {
	m      *mailServer
	pass   string
	authed bool
}

func (s *mailSession) AuthMechanisms() []string { return []string{sasl.Plain} }
func (s *mailSession) Auth(string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "jobs" || pass != s.pass {
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
	s.m.mu.Lock()
	s.m.mails = append(s.m.mails, string(b))
	s.m.mu.Unlock()
	return nil
}
func (s *mailSession) Reset()        {}
func (s *mailSession) Logout() error { return nil }

func newMailServer(t *testing.T, password string) *mailServer {
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
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	m := &mailServer{caFile: filepath.Join(t.TempDir(), "ca.pem")}
	if err := os.WriteFile(m.caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &mailSession{m: m, pass: password}, nil }))
	s.Domain, s.TLSConfig = "localhost", &tls.Config{Certificates: []tls.Certificate{cert}}
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m.addr = l.Addr().String()
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
	return m
}

func (m *mailServer) got() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.mails...)
}

// TestAlertsMemdb: one jobd on the embedded store that runs the jobs
// itself: a rule of two timeouts in a row notifies a signed webhook and a
// mail server once and resolves after a success; a job past its threshold
// alerts while it runs; a channel whose server refuses the login shows as
// failing; bad rules and channels are refused with what is wrong, and
// nothing half-stored.
func TestAlertsMemdb(t *testing.T) {
	t.Parallel()
	rec := newAlertReceiver(t)
	mail := newMailServer(t, "mail-password")
	refusing := newMailServer(t, "another-password")
	env := append([]string{"JOBKIT_TEST_SMTP_PASSWORD=mail-password"}, alertEnv...)
	j := startJobd(t, testjobdBin(), env, append([]string{"--workers", "2"}, alertArgs...)...)
	api, ns := j.api, "default"
	mustCall(t, api, ns, jobkitv1connect.AlertServiceCreateChannelProcedure,
		fmt.Sprintf(`{"channel":{"name":"hook","type":"webhook","url":%q,"secretRef":"env:JOBKIT_TEST_ALERT_SECRET"}}`, rec.srv.URL), nil)
	for name, srv := range map[string]*mailServer{"mail": mail, "refusing": refusing} {
		mustCall(t, api, ns, jobkitv1connect.AlertServiceCreateChannelProcedure, fmt.Sprintf(
			`{"channel":{"name":%q,"type":"email","smtpAddr":%q,"from":"jobs@example.com","to":["ops@example.com"],"username":"jobs","passwordRef":"env:JOBKIT_TEST_SMTP_PASSWORD","caFile":%q}}`,
			name, srv.addr, srv.caFile), nil)
	}

	// Bad input: each refused with what is wrong; nothing stored.
	for _, tc := range []struct {
		proc, body string
		code       int
		says       string
	}{
		{jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"x","condition":"failed","kind":"nightly-export","channels":["hook"]}}`, http.StatusNotFound, `kind \"nightly-export\"`},
		{jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"x","condition":"queue_lag","queue":"imports","threshold":"60s"}}`, http.StatusNotFound, `queue \"imports\"`},
		{jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"x","condition":"long_run","kind":"sleep","threshold":"0s"}}`, http.StatusBadRequest, "threshold 0s"},
		{jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"x","condition":"long_run","kind":"sleep","threshold":"-5s"}}`, http.StatusBadRequest, "threshold -5s"},
		{jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"x","condition":"failed","kind":"echo","channels":["pager"]}}`, http.StatusNotFound, `channel \"pager\"`},
		{jobkitv1connect.AlertServiceCreateChannelProcedure, `{"channel":{"name":"x","type":"webhook","url":"http://10.1.2.3/hook"}}`, http.StatusBadRequest, "private"},
		{jobkitv1connect.AlertServiceCreateChannelProcedure, `{"channel":{"name":"x","type":"chat","url":"http://169.254.169.254/latest/meta-data"}}`, http.StatusBadRequest, "link-local"},
		{jobkitv1connect.AlertServiceCreateChannelProcedure, `{"channel":{"name":"x","type":"webhook","url":"http://127.0.0.2:9/"}}`, http.StatusBadRequest, "loopback"},
		{jobkitv1connect.AlertServiceCreateChannelProcedure, `{"channel":{"name":"x","type":"webhook","url":"https://example.com/","secretRef":"hunter2"}}`, http.StatusBadRequest, "never the secret itself"},
	} {
		code, raw := callJSON(t, api, tc.proc, tc.body, nil, nil)
		if code != tc.code || !strings.Contains(raw, tc.says) {
			t.Errorf("%s %s: %d %s; want %d saying %s", tc.proc, tc.body, code, raw, tc.code, tc.says)
		}
	}
	var rules struct {
		Rules []struct{ Name string } `json:"rules"`
	}
	mustCall(t, api, ns, jobkitv1connect.AlertServiceListRulesProcedure, `{}`, &rules)
	var chans struct {
		Channels []struct {
			Name     string `json:"name"`
			Password string `json:"password"`
		} `json:"channels"`
	}
	mustCall(t, api, ns, jobkitv1connect.AlertServiceListChannelsProcedure, `{}`, &chans)
	if len(rules.Rules) != 0 || len(chans.Channels) != 3 {
		t.Fatalf("after the refusals: rules %+v, channels %+v; want none and the 3 good ones", rules, chans)
	}

	mustCall(t, api, ns, jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"fails","condition":"failed","kind":"sleep","failures":2,"channels":["hook","mail"]}}`, nil)
	mustCall(t, api, ns, jobkitv1connect.AlertServiceCreateRuleProcedure, `{"rule":{"name":"slow","condition":"long_run","kind":"sleep","threshold":"1s","channels":["hook"]}}`, nil)
	for range 2 {
		in := scheduleJSON(t, api, `{"kind":"sleep","argsJson":"[5000]","timeout":"0.2s","maxRetries":0}`, nil)
		waitStateJSON(t, api, in.ID, "STATE_TIMED_OUT", nil)
	}
	rec.waitEvents(t, ns, "fails", "firing")
	waitFor(t, 20*time.Second, "the firing mail", func() (bool, string) {
		m := mail.got()
		return len(m) == 1 && strings.Contains(m[0], "Subject: FIRING [fails] failed"), fmt.Sprint(m)
	})
	good := scheduleJSON(t, api, `{"kind":"sleep","argsJson":"[1]"}`, nil)
	waitStateJSON(t, api, good.ID, "STATE_COMPLETED", nil)
	rec.waitEvents(t, ns, "fails", "firing,resolved")
	waitFor(t, 20*time.Second, "the resolved mail", func() (bool, string) {
		m := mail.got()
		return len(m) == 2 && strings.Contains(m[1], "Subject: RESOLVED [fails]"), fmt.Sprint(len(m))
	})

	slow := scheduleJSON(t, api, `{"kind":"sleep","argsJson":"[3000]"}`, nil)
	rec.waitEvents(t, ns, "slow", "firing")
	if in, _, raw := getInstanceJSON(t, api, slow.ID, nil); in.State != "STATE_PROCESSING" {
		t.Errorf("at the long-run alert: %s; want still PROCESSING", raw)
	}

	// The refusing server: the test notification fails with the server's
	// answer (jobctl exits 6, unavailable), and the channel shows failing.
	code, out := jobctl(t, nil, "--addr", api, "alert", "channels", "test", "refusing")
	if code != 6 || !strings.Contains(out, "refused the login of jobs") {
		t.Errorf("jobctl alert channels test refusing: %d\n%s", code, out)
	}
	code, out = jobctl(t, nil, "--addr", api, "alert", "channels", "list")
	if code != 0 || !strings.Contains(out, "failing (1 in a row)") {
		t.Errorf("jobctl alert channels list: %d\n%s", code, out)
	}
	if strings.Contains(out, "mail-password") || strings.Contains(out, "another-password") {
		t.Errorf("a password in the channel list:\n%s", out)
	}
	code, out = jobctl(t, nil, "--addr", api, "alert", "history")
	if code != 0 || !strings.Contains(out, "resolved") || !strings.Contains(out, "refused the login") {
		t.Errorf("jobctl alert history: %d\n%s", code, out)
	}
}
