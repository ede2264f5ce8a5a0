package jobd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jobkit/job/executors/wasm"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/memdbstore"
)

// TestExecutorFlagsRefused: executor flags jobd cannot use are usage
// errors naming the flag (issue 22).
func TestExecutorFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    ExecutorsConfig
		want string
	}{
		{"allow without webhook", ExecutorsConfig{WebhookAllow: []string{"10.0.0.0/8"}, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}, "need --webhook"},
		{"bad allow entry", ExecutorsConfig{Webhook: true, WebhookAllow: []string{"10.0.0.0/33"}, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}, "--webhook-allow"},
		{"unknown namespace", ExecutorsConfig{Webhook: true, WebhookAllow: []string{"prod=10.0.0.1"}, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}, `namespace "prod" is not served`},
		{"relative program", ExecutorsConfig{CommandAllow: []string{"sh"}, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}, "--command-allow"},
		{"zero module size", ExecutorsConfig{WasmMaxMemoryMB: 1}, "--wasm-max-module-mb"},
		{"grace too short", ExecutorsConfig{Wasm: true, WasmModuleGrace: time.Second, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}, "--wasm-module-grace"},
		{"negative interval", ExecutorsConfig{Wasm: true, WasmCollectEvery: -time.Second, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}, "--wasm-collect-every"},
	} {
		err := tc.c.validate([]string{"default"})
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a usage error naming %q", tc.name, err, tc.want)
		}
	}
	ok := ExecutorsConfig{Webhook: true, WebhookAllow: []string{"default=10.0.0.0/8", "*.corp.example"}, CommandAllow: []string{"/bin/true"}, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 1}
	if err := ok.validate([]string{"default"}); err != nil {
		t.Fatalf("valid flags: %v", err)
	}
}

// TestWasmModulesCollected: jobd's collector deletes a module no
// definition of its namespace names once --wasm-module-grace has passed,
// and keeps the one a definition names (under synctest's clock).
func TestWasmModulesCollected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := &ExecutorsConfig{Wasm: true, WasmMaxModuleMB: 1, WasmMaxMemoryMB: 16, WasmModuleGrace: time.Hour, WasmCollectEvery: 10 * time.Minute}
		x, err := newExecutorTypes(c)
		if err != nil {
			t.Fatal(err)
		}
		defer x.close()
		st, err := memdbstore.New()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := x.forNamespace("default", st); err != nil {
			t.Fatal(err)
		}
		mods := x.moduleStore("default")
		header := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
		used, err := mods.Put(append(header, 1))
		if err != nil {
			t.Fatal(err)
		}
		unused, err := mods.Put(append(header, 2))
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := json.Marshal(map[string]string{"module": used})
		if _, err := st.PutDefinition(ctx, &store.PutDefinitionParams{Definition: &store.Definition{Kind: "k", Queue: "default", Executor: &store.ExecutorSpec{Type: store.ExecutorWasm, Config: cfg}}, IfVersion: store.AnyVersion, Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		stop := x.startCollectors(ctx, map[string]store.Store{"default": st}, slog.New(slog.DiscardHandler))
		get := func(ref string) error {
			_, err := x.modulesByN["default"].Get(ref)
			return err
		}
		time.Sleep(50 * time.Minute)
		synctest.Wait()
		if err := get(unused); err != nil {
			t.Fatalf("collected within its grace: %v", err)
		}
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		stop()
		if err := get(unused); !errors.Is(err, wasm.ErrNoModule) {
			t.Fatalf("an unused module past its grace: Get = %v, want ErrNoModule", err)
		}
		if err := get(used); err != nil {
			t.Fatalf("the module a definition names: %v", err)
		}
	})
}
