package jobd

import (
	"errors"
	"strings"
	"testing"
	"time"
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
