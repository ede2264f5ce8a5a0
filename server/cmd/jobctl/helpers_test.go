package main

import (
	"encoding/json"

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
