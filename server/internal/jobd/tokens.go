package jobd

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/jobkit/job/server"
	"go.yaml.in/yaml/v3"
)

// tokenEntry is one item of the tokens file.
type tokenEntry struct {
	Name       string   `yaml:"name"`
	SHA256     string   `yaml:"sha256"`
	Role       string   `yaml:"role"`
	Namespaces []string `yaml:"namespaces"`
}

// loadTokens reads the tokens file: a YAML list of {name, sha256, role,
// namespaces}. sha256 is the hex SHA-256 of the secret (sha256sum of it,
// without a newline); the secret itself never appears in the file.
func loadTokens(path string, served []string) ([]server.Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--tokens-file: %v", err)
	}
	var entries []tokenEntry
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil {
		return nil, usagef("--tokens-file %s: %v (want a YAML list of {name, sha256, role, namespaces})", path, err)
	}
	if len(entries) == 0 {
		return nil, usagef("--tokens-file %s: no tokens; list at least one, or leave the flag out", path)
	}
	isServed := map[string]bool{"*": true}
	for _, ns := range served {
		isServed[ns] = true
	}
	names := map[string]bool{}
	hashes := map[string]bool{}
	out := make([]server.Token, 0, len(entries))
	for i, e := range entries {
		where := fmt.Sprintf("--tokens-file %s: token %d (%q)", path, i+1, e.Name)
		if e.Name == "" {
			return nil, usagef("%s: no name; name every token for the logs", where)
		}
		if names[e.Name] {
			return nil, usagef("%s: the name is used twice", where)
		}
		names[e.Name] = true
		h := strings.ToLower(strings.TrimSpace(e.SHA256))
		if raw, err := hex.DecodeString(h); err != nil || len(raw) != 32 {
			return nil, usagef("%s: sha256 %q is not 64 hex digits; write the output of: printf %%s \"$SECRET\" | sha256sum", where, e.SHA256)
		}
		if hashes[h] {
			return nil, usagef("%s: the same secret as another token", where)
		}
		hashes[h] = true
		role := server.Role(e.Role)
		switch role {
		case server.RoleViewer, server.RoleOperator, server.RoleAdmin, server.RoleWorker, server.RoleMetrics:
		default:
			return nil, usagef("%s: role %q: want viewer, operator, admin, worker or metrics", where, e.Role)
		}
		if len(e.Namespaces) == 0 {
			return nil, usagef("%s: no namespaces; list the namespaces it may use, or \"*\" for all", where)
		}
		for _, ns := range e.Namespaces {
			if !isServed[ns] {
				return nil, usagef("%s: namespace %q is not served (--namespace %s)", where, ns, strings.Join(served, ","))
			}
		}
		out = append(out, server.Token{Name: e.Name, SHA256: h, Role: role, Namespaces: append([]string(nil), e.Namespaces...)})
	}
	return out, nil
}
