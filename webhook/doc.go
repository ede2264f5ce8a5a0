// Package webhook holds what every outgoing jobkit webhook shares: the
// HMAC-SHA256 request signature (Sign for senders, Verify for receivers)
// and the SSRF guard (Guard) that decides which destinations a request
// built from stored data may reach.
//
// # Signatures
//
// A signed request carries two headers:
//
//	Jobkit-Timestamp: 1767225600
//	Jobkit-Signature: v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd
//
// The timestamp is the Unix time in seconds at which the request was
// signed; the signature is the lowercase hex HMAC-SHA256, keyed with the
// shared secret, of the timestamp, a dot and the raw body bytes
// ("1767225600." + body). A receiver recomputes it over the body it read,
// compares in constant time and refuses a timestamp too far from its own
// clock, so a captured request cannot be replayed later (Verify does all
// three). The header may list several comma-separated v1= values while a
// sender rotates its secret; one match is enough.
//
// # Destinations
//
// A Guard refuses, at connect time, every address that is loopback,
// link-local, private (RFC 1918, RFC 4193), unspecified, multicast or
// otherwise not globally routable, unless its Allowlist names the host or
// a network containing the address. The check runs in the dialer on the
// address actually being connected, after DNS resolution, so a name that
// resolves (or re-resolves) to an internal address and a redirect to one
// are both refused; redirects are also re-checked as URLs. With
// Allowlist.Strict, public destinations must be named too. Header names
// and values carrying CR, LF or NUL are refused before a request is built
// (CheckHeader), and response bodies are read to a bound (ReadLimited).
package webhook
