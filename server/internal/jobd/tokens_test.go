package jobd

import (
	"errors"
	"strings"
	"testing"

	"github.com/jobkit/job/server"
)

// TestLoadTokens: a good file gives the tokens; every mistake is a usage
// error naming the token and the fix.
func TestLoadTokens(t *testing.T) {
	t.Parallel()
	h := server.HashToken("s3cret")
	h2 := server.HashToken("other")
	good := "- name: ci\n  sha256: " + strings.ToUpper(h) + "\n  role: operator\n  namespaces: [a]\n" +
		"- name: ops\n  sha256: " + h2 + "\n  role: admin\n  namespaces: [\"*\"]\n"
	toks, err := loadTokens(writeFile(t, "tokens.yaml", good), []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 || toks[0].Name != "ci" || toks[0].SHA256 != h || toks[0].Role != server.RoleOperator || toks[1].Namespaces[0] != "*" {
		t.Errorf("tokens %+v; want ci (operator, a, hash lower-cased) and ops (admin, *)", toks)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"empty", "[]\n", "no tokens"},
		{"not a list", "name: ci\n", "YAML list"},
		{"unknown field", "- name: ci\n  secret: x\n  sha256: " + h + "\n  role: viewer\n  namespaces: [a]\n", "secret"},
		{"no name", "- sha256: " + h + "\n  role: viewer\n  namespaces: [a]\n", "no name"},
		{"name twice", "- name: ci\n  sha256: " + h + "\n  role: viewer\n  namespaces: [a]\n- name: ci\n  sha256: " + h2 + "\n  role: viewer\n  namespaces: [a]\n", "used twice"},
		{"bad hash", "- name: ci\n  sha256: s3cret\n  role: viewer\n  namespaces: [a]\n", "sha256sum"},
		{"same secret", "- name: ci\n  sha256: " + h + "\n  role: viewer\n  namespaces: [a]\n- name: cd\n  sha256: " + h + "\n  role: viewer\n  namespaces: [a]\n", "same secret"},
		{"bad role", "- name: ci\n  sha256: " + h + "\n  role: root\n  namespaces: [a]\n", `role "root"`},
		{"no namespaces", "- name: ci\n  sha256: " + h + "\n  role: viewer\n", "no namespaces"},
		{"namespace not served", "- name: ci\n  sha256: " + h + "\n  role: viewer\n  namespaces: [c]\n", `namespace "c" is not served`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadTokens(writeFile(t, "tokens.yaml", tc.file), []string{"a", "b"})
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want a usage error naming %q", err, tc.want)
			}
		})
	}
}
