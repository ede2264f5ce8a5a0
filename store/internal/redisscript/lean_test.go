package redisscript

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLeanScriptsNeedNothingLeftOut checks that a script built with
// loadLean never names a helper or variable of the part of lib.lua it is
// built without: Lua would find nil there only when that line runs.
func TestLeanScriptsNeedNothingLeftOut(t *testing.T) {
	lib, err := luaFS.ReadFile("lua/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	head, tail, ok := strings.Cut(string(lib), libChanges)
	if !ok {
		t.Fatal("lib.lua has no state changes section")
	}
	decl := regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z0-9_]*(?:, *[A-Za-z_][A-Za-z0-9_]*)*)`)
	var names []string
	for _, m := range decl.FindAllStringSubmatch(tail, -1) {
		for n := range strings.SplitSeq(m[1], ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d names declared in lib.lua's state changes section: %v", len(names), names)
	}
	lean := []*Script{Enqueue, EnqueueOne, ProgressSet, ProgressLookup, OrderKeys}
	for _, s := range lean {
		if strings.Contains(s.Source, libChanges) {
			t.Fatalf("%s holds lib.lua's state changes section", s.Name)
		}
		_, own, _ := strings.Cut(s.Source, "\n-- ---- "+s.Name+".lua ----\n")
		for _, n := range names {
			use := regexp.MustCompile(`(?m)^[^-\n]*\b` + n + `\b`)
			if strings.Contains(head, "local "+n) || strings.Contains(head, "function "+n+"(") {
				continue // declared again above the section: the script sees that one
			}
			if loc := use.FindStringIndex(own); loc != nil {
				t.Errorf("%s.lua uses %s, which lib.lua declares only in its state changes section: %q", s.Name, n, own[loc[0]:loc[1]])
			}
		}
	}
	for _, s := range All {
		if !slices.Contains(lean, s) && strings.HasPrefix(s.Source, "#!lua") && strings.Contains(s.Source, "-- ---- queues ----") && !strings.Contains(s.Source, libChanges) {
			t.Errorf("%s has lib.lua without its state changes section", s.Name)
		}
	}
}
