package alert

import (
	"fmt"
	"net"
	"net/mail"
	"net/url"
	"os"
	"strings"
	"time"
)

// ChannelType says how a channel delivers.
type ChannelType string

// The channel types.
const (
	// Webhook POSTs the notification (a Payload) as JSON, signed with
	// HMAC-SHA256 by the secret SecretRef names, as package webhook signs
	// (headers Jobkit-Timestamp and Jobkit-Signature; webhook.Verify
	// checks them).
	Webhook ChannelType = "webhook"
	// Chat POSTs {"text": "..."}, the incoming-webhook format of Slack and
	// the chat tools compatible with it.
	Chat ChannelType = "chat"
	// Email sends a mail over SMTP with STARTTLS.
	Email ChannelType = "email"
)

// Channel is where notifications go. Secrets are never stored: a channel
// holds references ("env:NAME" or "file:/path") that each node resolves
// when it sends, and the API returns the references, never what they
// resolve to.
type Channel struct {
	// Name identifies the channel in the namespace (letters, digits,
	// "._-").
	Name string      `json:"name"`
	Type ChannelType `json:"type"`
	// URL is the http(s) address of a Webhook or Chat channel. The
	// webhook executor's address rules apply: loopback, link-local and
	// private addresses are refused unless the node allows them.
	URL string `json:"url,omitempty"`
	// SecretRef names the secret a Webhook signs its body with; optional
	// (unsigned without it).
	SecretRef string `json:"secret_ref,omitempty"`
	// SMTPAddr is the mail server (host:port) of an Email channel; the
	// connection must offer STARTTLS.
	SMTPAddr string `json:"smtp_addr,omitempty"`
	// From and To are the mail's sender and recipients.
	From string   `json:"from,omitempty"`
	To   []string `json:"to,omitempty"`
	// Username and PasswordRef are the SMTP login (PLAIN, over TLS);
	// both or neither.
	Username    string `json:"username,omitempty"`
	PasswordRef string `json:"password_ref,omitempty"`
	// CAFile is a PEM file on the node with the certificate authorities
	// that the SMTP server's certificate is checked against; empty means
	// the system's.
	CAFile string `json:"ca_file,omitempty"`

	// Version, CreatedAt and UpdatedAt are set by the store.
	Version   int64     `json:"-"`
	CreatedAt time.Time `json:"-"`
	UpdatedAt time.Time `json:"-"`
}

// ChannelStatus is how a channel's deliveries went, kept apart from the
// channel so that delivering never conflicts with an operator's edit.
type ChannelStatus struct {
	Name string `json:"name"`
	// ConsecutiveFailures counts the failed attempts since the last
	// success; a channel with any is failing.
	ConsecutiveFailures int       `json:"consecutive_failures"`
	LastError           string    `json:"last_error,omitempty"`
	LastErrorAt         time.Time `json:"last_error_at,omitzero"`
	LastSuccessAt       time.Time `json:"last_success_at,omitzero"`
	Delivered           int64     `json:"delivered"`
	Failed              int64     `json:"failed"`
}

// Validate checks a channel on its own: a name, a known type, and the
// fields that type needs, well-formed (an address is checked against the
// node's rules by Service.PutChannel).
func (c *Channel) Validate() error {
	if err := checkName("channel", c.Name); err != nil {
		return err
	}
	switch c.Type {
	case Webhook, Chat:
		return c.checkHTTP()
	case Email:
		return c.checkEmail()
	case "":
		return fmt.Errorf("%w: channel %q has no type; give webhook, chat or email", ErrInvalid, c.Name)
	default:
		return fmt.Errorf("%w: channel %q: type %q; give webhook, chat or email", ErrInvalid, c.Name, c.Type)
	}
}

// checkHTTP is Validate's check of a webhook or chat channel.
func (c *Channel) checkHTTP() error {
	if c.URL == "" {
		return fmt.Errorf("%w: channel %q: a %s channel needs a url", ErrInvalid, c.Name, c.Type)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: channel %q: url %q; give an http:// or https:// address", ErrInvalid, c.Name, c.URL)
	}
	if c.SecretRef != "" && c.Type == Chat {
		return fmt.Errorf("%w: channel %q: a chat channel is not signed; leave secret_ref empty (the url carries its token)", ErrInvalid, c.Name)
	}
	if err := checkRef("secret_ref", c.SecretRef); err != nil {
		return fmt.Errorf("channel %q: %w", c.Name, err)
	}
	if c.SMTPAddr != "" || c.From != "" || len(c.To) > 0 || c.Username != "" || c.PasswordRef != "" {
		return fmt.Errorf("%w: channel %q: smtp fields mean nothing to a %s channel", ErrInvalid, c.Name, c.Type)
	}
	return nil
}

// checkEmail is Validate's check of an email channel.
func (c *Channel) checkEmail() error {
	if _, _, err := net.SplitHostPort(c.SMTPAddr); err != nil || c.SMTPAddr == "" {
		return fmt.Errorf("%w: channel %q: smtp_addr %q; give host:port of the mail server", ErrInvalid, c.Name, c.SMTPAddr)
	}
	if _, err := mail.ParseAddress(c.From); err != nil {
		return fmt.Errorf("%w: channel %q: from %q is not a mail address", ErrInvalid, c.Name, c.From)
	}
	if len(c.To) == 0 {
		return fmt.Errorf("%w: channel %q: no recipients; give at least one address in to", ErrInvalid, c.Name)
	}
	for _, to := range c.To {
		if _, err := mail.ParseAddress(to); err != nil {
			return fmt.Errorf("%w: channel %q: recipient %q is not a mail address", ErrInvalid, c.Name, to)
		}
	}
	if (c.Username == "") != (c.PasswordRef == "") {
		return fmt.Errorf("%w: channel %q: give both username and password_ref, or neither", ErrInvalid, c.Name)
	}
	if err := checkRef("password_ref", c.PasswordRef); err != nil {
		return fmt.Errorf("channel %q: %w", c.Name, err)
	}
	if c.URL != "" || c.SecretRef != "" {
		return fmt.Errorf("%w: channel %q: url and secret_ref mean nothing to an email channel", ErrInvalid, c.Name)
	}
	return nil
}

// checkRef reports a secret reference that is neither empty, "env:NAME"
// nor "file:/absolute/path".
func checkRef(field, ref string) error {
	switch {
	case ref == "":
		return nil
	case strings.HasPrefix(ref, "env:") && len(ref) > len("env:"):
		return nil
	case strings.HasPrefix(ref, "file:/"):
		return nil
	}
	return fmt.Errorf("%w: %s %q; give a reference, env:NAME or file:/path, never the secret itself", ErrInvalid, field, ref)
}

// resolveRef reads the secret a reference names, on this node.
func resolveRef(ref string) (string, error) {
	switch {
	case strings.HasPrefix(ref, "env:"):
		name := ref[len("env:"):]
		v, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("secret %s: environment variable %s is not set on this node", ref, name)
		}
		return v, nil
	case strings.HasPrefix(ref, "file:"):
		b, err := os.ReadFile(ref[len("file:"):])
		if err != nil {
			return "", fmt.Errorf("secret %s: %w", ref, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", fmt.Errorf("secret reference %q is neither env:NAME nor file:/path", ref)
}
