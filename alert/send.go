package alert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/smtp"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jobkit/job/webhook"
)

// Payload is the JSON body of a Webhook notification.
type Payload struct {
	Namespace string    `json:"namespace"`
	Event     Event     `json:"event"`
	Incident  string    `json:"incident,omitempty"`
	Rule      string    `json:"rule,omitempty"`
	Condition Condition `json:"condition,omitempty"`
	Kind      string    `json:"kind,omitempty"`
	Queue     string    `json:"queue,omitempty"`
	Trigger   string    `json:"trigger,omitempty"`
	Instance  string    `json:"instance_id,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	// Workflow is the workflow's name (workflow_failed; Instance is then
	// the workflow's ID).
	Workflow string    `json:"workflow,omitempty"`
	Error    string    `json:"error,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	At       time.Time `json:"at"`
	// ConsoleURL links to the console page of the instance, the trigger
	// or the incident (empty when jobd was given no console address).
	ConsoleURL string `json:"console_url,omitempty"`
	// Notification is the notification's ID in the history; a receiver
	// can drop a repeated delivery by it.
	Notification string `json:"notification"`
}

// payload builds what a notification tells.
func (s *Service) payload(n *Notification) *Payload {
	p := &Payload{
		Namespace: s.cfg.Namespace, Event: n.Event, Incident: n.Incident, Rule: n.Rule, Condition: n.Condition,
		Kind: n.Subject.Kind, Queue: n.Subject.Queue, Trigger: n.Subject.Trigger, Instance: n.Subject.InstanceID,
		Attempt: n.Subject.Attempt, Error: n.Subject.Error, Detail: n.Subject.Detail, At: n.At.UTC(), Notification: n.ID,
		Workflow: n.Subject.Workflow,
	}
	if base := s.cfg.ConsoleURL; base != "" {
		ns := "?ns=" + url.QueryEscape(s.cfg.Namespace)
		switch {
		case n.Condition == WorkflowFailed && p.Instance != "":
			p.ConsoleURL = base + "/workflows/" + url.PathEscape(p.Instance) + ns
		case p.Instance != "":
			p.ConsoleURL = base + "/instances/" + url.PathEscape(p.Instance) + ns
		case n.Incident != "":
			p.ConsoleURL = base + "/alerts/incidents/" + url.PathEscape(n.Incident) + ns
		default:
			p.ConsoleURL = base + "/alerts" + ns
		}
	}
	return p
}

// text is a notification in one line of words, for chat and mail.
func (p *Payload) text() string {
	var b strings.Builder
	switch p.Event {
	case Firing:
		b.WriteString("FIRING")
	case Repeat:
		b.WriteString("STILL FIRING")
	case ResolvedEvent:
		b.WriteString("RESOLVED")
	case Test:
		b.WriteString("TEST")
	}
	if p.Rule != "" {
		fmt.Fprintf(&b, " [%s] %s", p.Rule, p.Condition)
	}
	fmt.Fprintf(&b, " in %s", p.Namespace)
	for _, kv := range [][2]string{{"kind", p.Kind}, {"queue", p.Queue}, {"trigger", p.Trigger}, {"instance", p.Instance}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	if p.Error != "" {
		b.WriteString(" — error: " + p.Error)
	}
	if p.ConsoleURL != "" {
		b.WriteString(" " + p.ConsoleURL)
	}
	return b.String()
}

// send delivers n through ch.
func (s *Service) send(ctx context.Context, ch *Channel, n *Notification) error {
	p := s.payload(n)
	switch ch.Type {
	case Webhook:
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		hdr := http.Header{}
		if ch.SecretRef != "" {
			secret, err := resolveRef(ch.SecretRef)
			if err != nil {
				return err
			}
			// Signed at the wall clock's time: the receiver checks it
			// against its own.
			webhook.SignHeader(hdr, []byte(secret), time.Now(), body)
		}
		return s.post(ctx, ch.URL, body, hdr)
	case Chat:
		body, err := json.Marshal(map[string]string{"text": p.text()})
		if err != nil {
			return err
		}
		return s.post(ctx, ch.URL, body, http.Header{})
	case Email:
		return sendMail(ctx, ch, p)
	}
	return fmt.Errorf("channel %q has type %q, which this node cannot send", ch.Name, ch.Type)
}

// post sends a JSON body; a status other than 2xx is an error quoting
// the start of the answer.
func (s *Service) post(ctx context.Context, u string, body []byte, hdr http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "jobkit-alert")
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			// A chat address carries its token: name only its host.
			return fmt.Errorf("POST %s: %w", redact(u), ue.Err)
		}
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", redact(u), resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// redact keeps the scheme, host and path of an address, since chat
// webhook addresses carry their token in the path's end or the query.
func redact(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "the channel's url"
	}
	return pu.Scheme + "://" + pu.Host + "/…"
}

// sendMail sends p as a mail over SMTP: STARTTLS is required (a server
// that does not offer it is an error), then the login when the channel
// has one.
func sendMail(ctx context.Context, ch *Channel, p *Payload) error {
	host, _, err := net.SplitHostPort(ch.SMTPAddr)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", ch.SMTPAddr)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", ch.SMTPAddr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("smtp %s: %w", ch.SMTPAddr, err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); !ok {
		return fmt.Errorf("smtp %s does not offer STARTTLS; jobkit sends mail only over TLS", ch.SMTPAddr)
	}
	tc := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if ch.CAFile != "" {
		pem, err := os.ReadFile(ch.CAFile)
		if err != nil {
			return fmt.Errorf("smtp ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("smtp ca_file %s holds no PEM certificate", ch.CAFile)
		}
		tc.RootCAs = pool
	}
	if err := c.StartTLS(tc); err != nil {
		return fmt.Errorf("smtp %s STARTTLS: %w", ch.SMTPAddr, err)
	}
	if ch.Username != "" {
		pw, err := resolveRef(ch.PasswordRef)
		if err != nil {
			return err
		}
		if err := c.Auth(smtp.PlainAuth("", ch.Username, pw, host)); err != nil {
			return fmt.Errorf("smtp %s refused the login of %s: %w", ch.SMTPAddr, ch.Username, err)
		}
	}
	if err := c.Mail(ch.From); err != nil {
		return fmt.Errorf("smtp MAIL FROM: %w", err)
	}
	for _, to := range ch.To {
		if err := c.Rcpt(to); err != nil {
			return fmt.Errorf("smtp RCPT TO %s: %w", to, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	subject := p.text()
	if len(subject) > 150 {
		subject = subject[:150] + "…"
	}
	body, _ := json.MarshalIndent(p, "", "  ")
	var msg bytes.Buffer
	fmt.Fprintf(&msg, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nX-Jobkit-Notification: %s\r\n\r\n",
		ch.From, strings.Join(ch.To, ", "), strings.ReplaceAll(strings.ReplaceAll(subject, "\r", " "), "\n", " "), p.At.Format(time.RFC1123Z), p.Notification)
	msg.WriteString(p.text() + "\r\n\r\n")
	msg.WriteString(strings.ReplaceAll(string(body), "\n", "\r\n") + "\r\n")
	if _, err := w.Write(msg.Bytes()); err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if err := c.Quit(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("smtp QUIT: %w", err)
	}
	return nil
}
