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
	// A name no resolver knows: the error names every place looked in,
	// as doc/executors.md says (the file, then the variable).
	_, err := r("db-pass")
	if want := `secrets: no such secret: "db-pass"; create the file ` + filepath.Join(dir, "db-pass") + `, or set the environment variable TESTSECRET_DB_PASS`; !errors.Is(err, secrets.ErrNotFound) || err.Error() != want {
		t.Errorf("missing:\n got %v\nwant %s", err, want)
	}
	for _, bad := range []string{"", "../etc/passwd", ".hidden", "a/b", "a b"} {
		if _, err := r(bad); !errors.Is(err, secrets.ErrInvalidName) {
			t.Errorf("%q: %v, want ErrInvalidName", bad, err)
		}
	}
}
