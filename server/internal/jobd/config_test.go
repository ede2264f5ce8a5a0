package jobd

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// parse resolves the configuration of jobd's command line args with env
// as the environment, without running the command.
func parse(t *testing.T, args []string, env map[string]string) (*Config, error) {
	t.Helper()
	c := &Config{}
	o := &options{getenv: func(k string) string { return env[k] }}
	root := newRoot(context.Background(), o, c, io.Discard, io.Discard)
	cmd, rest, err := root.Find(args)
	if err != nil {
		t.Fatalf("find %v: %v", args, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return nil, err
	}
	_, err = c.prepare(cmd, o, io.Discard)
	return c, err
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence checks every flag: a config file key sets it, JOBD_<FLAG>
// wins over the file, and the flag wins over both.
func TestPrecedence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flag       string
		file, envv string // the YAML value, the environment value
		flagv      string
		get        func(*Config) any
		fromFile   any
		fromEnv    any
		fromFlag   any
	}{
		{"listen", "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", func(c *Config) any { return c.Listen }, "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"},
		{"metrics-listen", "127.0.0.1:4", "127.0.0.1:5", "127.0.0.1:6", func(c *Config) any { return c.MetricsListen }, "127.0.0.1:4", "127.0.0.1:5", "127.0.0.1:6"},
		{"store", "redis", "etcd", "valkey", func(c *Config) any { return c.Store }, "redis", "etcd", "valkey"},
		{"redis-addr", "r1:1", "r2:2", "r3:3", func(c *Config) any { return c.RedisAddr }, "r1:1", "r2:2", "r3:3"},
		{"valkey-addr", "v1:1", "v2:2", "v3:3", func(c *Config) any { return c.ValkeyAddr }, "v1:1", "v2:2", "v3:3"},
		{"etcd-endpoints", "[e1:1, e2:2]", "e3:3,e4:4", "e5:5", func(c *Config) any { return c.EtcdEndpoints }, []string{"e1:1", "e2:2"}, []string{"e3:3", "e4:4"}, []string{"e5:5"}},
		{"pg-url", "postgres://a", "postgres://b", "postgres://c", func(c *Config) any { return c.PGURL }, "postgres://a", "postgres://b", "postgres://c"},
		{"namespace", "[a, b]", "c,d", "e", func(c *Config) any { return c.Namespaces }, []string{"a", "b"}, []string{"c", "d"}, []string{"e"}},
		{"workers", "3", "4", "5", func(c *Config) any { return c.Workers }, 3, 4, 5},
		{"queues", "[q1]", "q2,q3", "q4", func(c *Config) any { return c.Queues }, []string{"q1"}, []string{"q2", "q3"}, []string{"q4"}},
		{"node-id", "n1", "n2", "n3", func(c *Config) any { return c.NodeID }, "n1", "n2", "n3"},
		{"labels", "[region=eu]", "gpu,zone=a", "ssd", func(c *Config) any { return c.Labels }, []string{"region=eu"}, []string{"gpu", "zone=a"}, []string{"ssd"}},
		{"scheduler", "false", "true", "false", func(c *Config) any { return c.Scheduler }, false, true, false},
		{"tls-cert", "c1.pem", "c2.pem", "c3.pem", func(c *Config) any { return c.TLSCert }, "c1.pem", "c2.pem", "c3.pem"},
		{"tls-key", "k1.pem", "k2.pem", "k3.pem", func(c *Config) any { return c.TLSKey }, "k1.pem", "k2.pem", "k3.pem"},
		{"tokens-file", "t1.yaml", "t2.yaml", "t3.yaml", func(c *Config) any { return c.TokensFile }, "t1.yaml", "t2.yaml", "t3.yaml"},
		{"insecure", "true", "false", "true", func(c *Config) any { return c.Insecure }, true, false, true},
		{"metrics-naming", "go-job", "jobkit", "go-job", func(c *Config) any { return c.MetricsNaming }, "go-job", "jobkit", "go-job"},
		{"drain-timeout", "5s", "6s", "7s", func(c *Config) any { return c.DrainTimeout }, 5 * time.Second, 6 * time.Second, 7 * time.Second},
		{"store-timeout", "2s", "3s", "4s", func(c *Config) any { return c.StoreTimeout }, 2 * time.Second, 3 * time.Second, 4 * time.Second},
		{"log-level", "debug", "warn", "error", func(c *Config) any { return c.LogLevel }, "debug", "warn", "error"},
		{"log-format", "json", "text", "json", func(c *Config) any { return c.LogFormat }, "json", "text", "json"},
		// issue 22: executors as data
		{"webhook", "true", "false", "true", func(c *Config) any { return c.Executors.Webhook }, true, false, true},
		{"webhook-allow", "[10.0.0.0/8]", "a.example,b.example", "ns=c.example", func(c *Config) any { return c.Executors.WebhookAllow }, []string{"10.0.0.0/8"}, []string{"a.example", "b.example"}, []string{"ns=c.example"}},
		{"webhook-strict", "true", "false", "true", func(c *Config) any { return c.Executors.WebhookStrict }, true, false, true},
		{"command-allow", "[/bin/a]", "/bin/b,/bin/c", "/bin/d", func(c *Config) any { return c.Executors.CommandAllow }, []string{"/bin/a"}, []string{"/bin/b", "/bin/c"}, []string{"/bin/d"}},
		{"wasm", "true", "false", "true", func(c *Config) any { return c.Executors.Wasm }, true, false, true},
		{"wasm-modules", "/m1", "/m2", "/m3", func(c *Config) any { return c.Executors.WasmModules }, "/m1", "/m2", "/m3"},
		{"wasm-max-module-mb", "1", "2", "3", func(c *Config) any { return c.Executors.WasmMaxModuleMB }, 1, 2, 3},
		{"wasm-max-memory-mb", "4", "5", "6", func(c *Config) any { return c.Executors.WasmMaxMemoryMB }, 4, 5, 6},
		{"wasm-allow-dir", "[/d1]", "/d2,/d3", "/d4", func(c *Config) any { return c.Executors.WasmAllowDirs }, []string{"/d1"}, []string{"/d2", "/d3"}, []string{"/d4"}},
		{"wasm-cache-dir", "/c1", "/c2", "/c3", func(c *Config) any { return c.Executors.WasmCacheDir }, "/c1", "/c2", "/c3"},
		{"secrets-dir", "/s1", "/s2", "/s3", func(c *Config) any { return c.Executors.SecretsDir }, "/s1", "/s2", "/s3"},
		{"wasm-module-grace", "2h", "3h", "4h", func(c *Config) any { return c.Executors.WasmModuleGrace }, 2 * time.Hour, 3 * time.Hour, 4 * time.Hour},
		{"wasm-collect-every", "1m", "2m", "0s", func(c *Config) any { return c.Executors.WasmCollectEvery }, time.Minute, 2 * time.Minute, time.Duration(0)},
		// Alerting (issue 23).
		{"alerts", "false", "true", "false", func(c *Config) any { return c.Alerts }, false, true, false},
		{"alert-interval", "2s", "3s", "4s", func(c *Config) any { return c.AlertInterval }, 2 * time.Second, 3 * time.Second, 4 * time.Second},
		{"alert-console-url", "https://a/console", "https://b/console", "https://c/console", func(c *Config) any { return c.AlertConsoleURL }, "https://a/console", "https://b/console", "https://c/console"},
		{"alert-allow", "[10.0.0.0/8]", "hooks.internal,*.corp", "127.0.0.1", func(c *Config) any { return c.AlertAllow }, []string{"10.0.0.0/8"}, []string{"hooks.internal", "*.corp"}, []string{"127.0.0.1"}},
	}
	// Every flag of jobd is in the table.
	seen := map[string]bool{"config": true, "help": true}
	for _, tc := range cases {
		seen[tc.flag] = true
	}
	root := newRoot(context.Background(), &options{}, &Config{}, io.Discard, io.Discard)
	for _, name := range allFlags(root) {
		if !seen[name] {
			t.Errorf("flag --%s has no precedence case; add it to the table", name)
		}
	}
	for _, tc := range cases {
		t.Run(tc.flag, func(t *testing.T) {
			file := writeFile(t, "jobd.yaml", tc.flag+": "+tc.file+"\n")
			c, err := parse(t, []string{"--config", file}, nil)
			if err != nil {
				t.Fatalf("file only: %v", err)
			}
			if got := tc.get(c); !reflect.DeepEqual(got, tc.fromFile) {
				t.Errorf("file only: %v, want %v", got, tc.fromFile)
			}
			env := map[string]string{envName(tc.flag): tc.envv}
			c, err = parse(t, []string{"--config", file}, env)
			if err != nil {
				t.Fatalf("file and env: %v", err)
			}
			if got := tc.get(c); !reflect.DeepEqual(got, tc.fromEnv) {
				t.Errorf("file and %s: %v, want %v", envName(tc.flag), got, tc.fromEnv)
			}
			c, err = parse(t, []string{"--config", file, "--" + tc.flag + "=" + tc.flagv}, env)
			if err != nil {
				t.Fatalf("file, env and flag: %v", err)
			}
			if got := tc.get(c); !reflect.DeepEqual(got, tc.fromFlag) {
				t.Errorf("file, env and --%s: %v, want %v", tc.flag, got, tc.fromFlag)
			}
		})
	}
}

// allFlags lists the names of every flag of jobd's commands.
func allFlags(root *cobra.Command) []string {
	var names []string
	for _, cmd := range append([]*cobra.Command{root}, root.Commands()...) {
		for _, fs := range []*pflag.FlagSet{cmd.PersistentFlags(), cmd.LocalFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
		}
	}
	return names
}

// TestConfigFileFromEnv: JOBD_CONFIG names the file, and a flag given on
// the command line wins over it.
func TestConfigFileFromEnv(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "jobd.yaml", "store: redis\nredis-addr: 10.0.0.1:6379\nworkers: 7\n")
	c, err := parse(t, []string{"--workers", "2"}, map[string]string{"JOBD_CONFIG": file})
	if err != nil {
		t.Fatal(err)
	}
	if c.Store != "redis" || c.RedisAddr != "10.0.0.1:6379" || c.Workers != 2 {
		t.Errorf("store %q, redis-addr %q, workers %d; want redis, 10.0.0.1:6379 (file), 2 (flag)", c.Store, c.RedisAddr, c.Workers)
	}
	// migrate takes only the global flags, but may share the file.
	if c, err = parse(t, []string{"migrate"}, map[string]string{"JOBD_CONFIG": file}); err != nil || c.Store != "redis" {
		t.Errorf("migrate with the shared file: store %q, err %v; want redis and no error", c.Store, err)
	}
}

// TestBadConfig: every way to get the configuration wrong is a usage
// error that names the culprit.
func TestBadConfig(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want string
	}{
		{"unknown key", nil, nil, "listen: 127.0.0.1:1\nlisten-addr: x\n", `unknown keys listen-addr`},
		{"not YAML", nil, nil, "listen: [\n", "config file"},
		{"list for a scalar", nil, nil, "listen: [a, b]\n", `key "listen": a list`},
		{"bad env int", nil, map[string]string{"JOBD_WORKERS": "many"}, "", "JOBD_WORKERS"},
		{"bad env bool", nil, map[string]string{"JOBD_SCHEDULER": "perhaps"}, "", "JOBD_SCHEDULER"},
		{"bad store", []string{"--store", "mongo"}, nil, "", `--store "mongo"`},
		{"bad log level", []string{"--log-level", "loud"}, nil, "", "--log-level"},
		{"bad log format", nil, map[string]string{"JOBD_LOG_FORMAT": "xml"}, "", "--log-format"},
		{"bad namespace", []string{"--namespace", "a{b}"}, nil, "", "--namespace"},
		{"twice the namespace", []string{"--namespace", "a", "--namespace", "a"}, nil, "", "given twice"},
		{"postgres without url", []string{"--store", "postgres"}, nil, "", "--pg-url"},
		{"missing file", []string{"--config", "/nonexistent/jobd.yaml"}, nil, "", "config file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeFile(t, "jobd.yaml", tc.file)}, args...)
			}
			_, err := parse(t, args, tc.env)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want a usage error naming %q", err, tc.want)
			}
		})
	}
}
