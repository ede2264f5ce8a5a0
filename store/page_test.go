package store

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCursor checks what the conformance suite cannot: a cursor of
// another namespace or version is refused, and the message says to start
// again.
func TestCursor(t *testing.T) {
	q := &Query{Kind: "k", States: []State{Scheduled, Completed}}
	pos := position{t: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano(), seq: 42, id: "id-1"}
	c := encodeCursor(orderInstances, "ns-a", q, pos)

	q.Cursor = c
	got, ok, err := decodeCursor(orderInstances, "ns-a", q)
	if err != nil || !ok || got != pos {
		t.Fatalf("decode = %+v, %v, %v; want %+v", got, ok, err, pos)
	}
	// The order of States does not make another query.
	q2 := &Query{Kind: "k", States: []State{Completed, Scheduled}, Limit: 7, Cursor: c}
	if _, _, err := decodeCursor(orderInstances, "ns-a", q2); err != nil {
		t.Fatalf("same filters in another order, another limit: %v", err)
	}
	for name, tc := range map[string]struct {
		order byte
		ns    string
		c     string
		why   string
	}{
		"other namespace": {orderInstances, "ns-b", c, "namespace"},
		"other lookup":    {orderLogs, "ns-a", c, "lookup of instances"},
		"other version":   {orderInstances, "ns-a", reversion(c), "integrity"},
		"not base64":      {orderInstances, "ns-a", "%%%", "not base64"},
	} {
		q.Cursor = tc.c
		_, _, err := decodeCursor(tc.order, tc.ns, q)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "first page") {
			t.Errorf("%s: %v; want ErrInvalid naming %q and the first page", name, err, tc.why)
		}
	}
}

// reversion returns c with its version byte changed (and so its checksum
// wrong).
func reversion(c string) string {
	raw, _ := base64.RawURLEncoding.DecodeString(c)
	raw[0]++
	return base64.RawURLEncoding.EncodeToString(raw)
}
