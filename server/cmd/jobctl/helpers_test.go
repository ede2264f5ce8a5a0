package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"go.yaml.in/yaml/v3"
)

// jobkitv1ItemCode parses a code name as the API spells it in batch
// results ("not_found").
type jobkitv1ItemCode struct{ connect.Code }

func (c *jobkitv1ItemCode) UnmarshalText(b []byte) error { return c.Code.UnmarshalText(b) }

// yamlToJSONForTest converts a YAML document back to JSON.
func yamlToJSONForTest(b []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func writeFile(name, content string) error { return os.WriteFile(name, []byte(content), 0o600) }

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}
