// Package transport holds what the API's Go clients (api/client and
// api/remote) share about reaching jobd: the namespace header, the
// token and namespace put on every request, and HTTP/2 transports (h2c
// over http://) that gRPC and bidirectional streams need.
package transport

import (
	"crypto/tls"
	"net/http"

	"connectrpc.com/connect"
)

// NamespaceHeader is the request header naming the namespace.
const NamespaceHeader = "Jobkit-Namespace"

// WithHeaders returns next with "Authorization: Bearer token" and the
// namespace header set on every request, unary or streaming; an empty
// token or namespace is left out.
func WithHeaders(next connect.HTTPClient, token, namespace string) connect.HTTPClient {
	return &headerClient{next: next, token: token, namespace: namespace}
}

type headerClient struct {
	next      connect.HTTPClient
	token     string
	namespace string
}

func (h *headerClient) Do(r *http.Request) (*http.Response, error) {
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	if h.namespace != "" {
		r.Header.Set(NamespaceHeader, h.namespace)
	}
	return h.next.Do(r)
}

// Client returns an HTTP client with its own transport: TLS from tc (when
// not nil), and, when http2 is set, HTTP/2 only: h2c for the scheme
// "http", HTTP/2 over TLS otherwise.
func Client(scheme string, tc *tls.Config, http2 bool) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tc != nil {
		tr.TLSClientConfig = tc.Clone()
	}
	if http2 {
		var ps http.Protocols
		if scheme == "http" {
			ps.SetUnencryptedHTTP2(true)
		} else {
			ps.SetHTTP2(true)
		}
		tr.Protocols = &ps
	}
	return &http.Client{Transport: tr}
}
