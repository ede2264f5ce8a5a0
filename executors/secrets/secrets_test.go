package secrets_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/jobkit/job/executors/secrets"
)

func TestResolvers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hook-key"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TESTSECRET_API_TOKEN", "from-env")
	r := secrets.Chain(secrets.Dir(dir), secrets.Env("TESTSECRET_"), secrets.Map(map[string]string{"m": "from-map"}))
	for name, want := range map[string]string{"hook-key": "from-file", "api.token": "from-env", "m": "from-map"} {
		got, err := r(name)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := r("missing"); !errors.Is(err, secrets.ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	for _, bad := range []string{"", "../etc/passwd", ".hidden", "a/b", "a b"} {
		if _, err := r(bad); !errors.Is(err, secrets.ErrInvalidName) {
			t.Errorf("%q: %v, want ErrInvalidName", bad, err)
		}
	}
}
