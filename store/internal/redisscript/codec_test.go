package redisscript

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
)

// TestDecodeKeepsErrorBehaviour pins what a record decodes to and which
// bytes are refused with store.ErrCorrupt naming the record.
func TestDecodeKeepsErrorBehaviour(t *testing.T) {
	in := codecInstance()
	goPart := EncodeSpec(in)
	good := specOf(t, in.Seq, goPart, Micros(codecAt), 0, 5)
	if got, err := DecodeInstance(in.ID, good, ""); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("DecodeInstance of a good spec = %+v, %v; want %+v", got, err, in)
	}

	// What cmsgpack may write for a number or a string is accepted.
	for name, spec := range map[string]string{
		"integral float64 Seq": specOf(t, float64(in.Seq), goPart, Micros(codecAt), 0, 5),
		"integral float32 Seq": specOf(t, float32(in.Seq), goPart, Micros(codecAt), 0, 5),
		"uint64 Seq":           specOf(t, uint64(in.Seq), goPart, Micros(codecAt), 0, 5),
		"int64 in 9 bytes":     "\xd3\x00\x00\x00\x00\x00\x01\xe2\x40" + goPart + pack(t, Micros(codecAt), 0, 5),
	} {
		if got, err := DecodeInstance(in.ID, spec, ""); err != nil || !reflect.DeepEqual(got, in) {
			t.Errorf("%s: DecodeInstance = %+v, %v; want %+v", name, got, err, in)
		}
	}
	args := pack(t, in.Kind, in.Queue, []byte(in.Args))
	bin := pack(t, in.Seq, in.Kind, in.Queue, string(in.Args))
	if got, err := DecodeInstance(in.ID, pack(t, in.Seq)+args+goPart[len(bin)-len(pack(t, in.Seq)):]+pack(t, Micros(codecAt), 0, 5), ""); err != nil || !reflect.DeepEqual(got, in) {
		t.Errorf("args as bin: DecodeInstance = %+v, %v; want %+v", got, err, in)
	}

	badSpecs := map[string]string{
		"empty":               "",
		"truncated":           good[:len(good)-1],
		"trailing value":      good + pack(t, 1),
		"one value short":     specOf(t, in.Seq, goPart, Micros(codecAt), 0),
		"as one array":        pack(t, []any{1, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0}),
		"nil for a string":    pack(t, 1, nil, "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"nil for a number":    pack(t, nil, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"bool for a number":   pack(t, true, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"number for a string": pack(t, 1, 7, "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"string for a number": pack(t, "1", "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"fractional float":    pack(t, 1.5, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"NaN":                 pack(t, math.NaN(), "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"infinity":            pack(t, math.Inf(1), "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"float beyond int64":  pack(t, 1e19, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"map for a string":    pack(t, 1, map[string]any{"a": 1}, "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"ext for a number":    "\xd4\x01\x00" + pack(t, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"unused code 0xc1":    "\xc1" + pack(t, "k", "q", "", 0, 0, 0, 0, "", 0, 0, 0, 0, 0),
		"str32 past the end":  "\x01\xdb\xff\xff\xff\xff",
		"array32 past end":    "\xdd\xff\xff\xff\xff",
		"not msgpack":         "hello",
	}
	for name, spec := range badSpecs {
		if _, err := DecodeInstance("id-2", spec, ""); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "instance id-2") {
			t.Errorf("spec %s: DecodeInstance: %v, want ErrCorrupt naming instance id-2", name, err)
		}
	}

	done := *in
	done.State, done.Attempt, done.LeaseOwner, done.Result, done.Error = store.Completed, 2, "node-1", []byte(`{"ok":true}`), "boom"
	done.FinishedAt, done.UpdatedAt, done.CancelRequested = codecAt.Add(time.Minute), codecAt.Add(time.Minute), true
	if got, err := DecodeInstance(in.ID, good, stateOf(t, &done, "1-0 2-0 ", 4)); err != nil || !reflect.DeepEqual(got, &done) {
		t.Errorf("DecodeInstance with a state = %+v, %v; want %+v", got, err, &done)
	}
	state := func(st any) string {
		return pack(t, []any{st, 1, 0, "o", 0, 0, 0, 0, "", "", "", 3})
	}
	for name, raw := range map[string]string{
		"not an array":     pack(t, 3, 1, 0, "o", 0, 0, 0, 0, "", "", "", 3),
		"11 values":        pack(t, []any{3, 1, 0, "o", 0, 0, 0, 0, "", "", ""}),
		"unknown state":    state(99),
		"state as string":  state("3"),
		"trailing value":   state(3) + pack(t, 1),
		"nested array":     pack(t, []any{[]any{3}, 1, 0, "o", 0, 0, 0, 0, "", "", "", 3}),
		"nil owner":        pack(t, []any{3, 1, 0, nil, 0, 0, 0, 0, "", "", "", 3}),
		"truncated header": "\x9c",
	} {
		if _, err := DecodeInstance("id-3", good, raw); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "the state of instance id-3") {
			t.Errorf("state %s: DecodeInstance: %v, want ErrCorrupt naming the state of id-3", name, err)
		}
	}

	sid := EncodeID(in.ID)
	hgood := pack(t, "t", Micros(codecAt), "node-1", []any{sid, 4, 2, "", "{}", 4})
	if hs, err := decodeHistory(hgood); err != nil || len(hs) != 1 || hs[0].InstanceID != in.ID || hs[0].State != store.Completed || hs[0].Seq != 4 {
		t.Errorf("decodeHistory of a good entry = %+v, %v", hs, err)
	}
	if hs, err := decodeHistory(pack(t, "e", Micros(codecAt), "node-1", sid, sid)); err != nil || len(hs) != 4 {
		t.Errorf("decodeHistory of an enqueue entry = %+v, %v", hs, err)
	}
	for name, raw := range map[string]string{
		"no records":       pack(t, "t", Micros(codecAt), "node-1"),
		"unknown tag":      pack(t, "x", Micros(codecAt), "node-1", sid),
		"record too short": pack(t, "t", Micros(codecAt), "node-1", []any{sid, 4, 2, "", "{}"}),
		"bad ID":           pack(t, "t", Micros(codecAt), "node-1", []any{"\x07x", 4, 2, "", "{}", 4}),
		"e with a number":  pack(t, "e", Micros(codecAt), "node-1", 7),
		"time as string":   pack(t, "t", "now", "node-1", []any{sid, 4, 2, "", "{}", 4}),
		"truncated":        hgood[:len(hgood)-2],
	} {
		if _, err := decodeHistory(raw); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "history entry") {
			t.Errorf("history %s: %v, want ErrCorrupt naming the history entry", name, err)
		}
	}

	lgood := pack(t, []any{sid, "k", 1, 2, Micros(codecAt), "node-1", "hello", 3})
	if l, err := decodeLog(lgood); err != nil || l.InstanceID != in.ID || l.Message != "hello" || l.Seq != 3 {
		t.Errorf("decodeLog of a good record = %+v, %v", l, err)
	}
	for name, raw := range map[string]string{
		"7 values":        pack(t, []any{sid, "k", 1, 2, Micros(codecAt), "node-1", "hello"}),
		"bad ID":          pack(t, []any{"\x07", "k", 1, 2, Micros(codecAt), "node-1", "hello", 3}),
		"consecutive":     pack(t, sid, "k", 1, 2, Micros(codecAt), "node-1", "hello", 3),
		"message as bool": pack(t, []any{sid, "k", 1, 2, Micros(codecAt), "node-1", false, 3}),
	} {
		if _, err := decodeLog(raw); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "log record") {
			t.Errorf("log %s: %v, want ErrCorrupt naming the log record", name, err)
		}
	}
}

// luaRecords is evaluated by the round-trip test on a real redis-server:
// what Lua's cmsgpack writes and reads.
//
// ARGV: [1] the spec as the Go side packed it; [2]..[13] the twelve state
// values (lua/lib.lua T_*; numbers as decimal text); [14] a stored ID,
// [15] a node name, [16] a time; [17]..[20] bytes of any kind.
// Returns: [1] ARGV[1] unpacked and packed again by cmsgpack (nil when it
// does not unpack into the fourteen to sixteen typed values of lib.lua's spec()),
// [2] the state packed, [3] a history entry of one record of that state,
// [4] a history entry of a first claim (built from parts, as lib.lua's
// claim_first does), [5] an enqueue entry, [6] a log record, then for
// each of ARGV[17..20] whether cmsgpack unpacked it, its values packed
// again, and whether every number in it is an integer a Lua number holds
// exactly (so the repacked bytes carry the same values).
const luaRecords = `
local P_SCHEMA = {'number', 'string', 'string', 'string', 'number', 'number', 'number',
	'number', 'string', 'number', 'number', 'number', 'number', 'number', 'string', 'string'}
local out = {}
local ok, p = pcall(function() return {cmsgpack.unpack(ARGV[1])} end)
if ok and #p >= 14 and #p <= #P_SCHEMA then
	for i = 1, #p do
		if type(p[i]) ~= P_SCHEMA[i] then ok = false end
	end
else
	ok = false
end
out[1] = ok and cmsgpack.pack(unpack(p)) or false

local T = 'nnnsnnnnsssn'
local st = {}
for i = 1, 12 do
	local v = ARGV[i + 1]
	if string.sub(T, i, i) == 'n' then v = tonumber(v) end
	st[i] = v
end
out[2] = cmsgpack.pack(st)
local id, node, now = ARGV[14], ARGV[15], tonumber(ARGV[16])
out[3] = cmsgpack.pack('t', now, node) .. cmsgpack.pack({id, st[1], st[2], st[10], st[9], st[12]})
out[4] = cmsgpack.pack('t', now, node) .. '\150' .. cmsgpack.pack(id) .. cmsgpack.pack(3, 1, '', '', 3)
out[5] = cmsgpack.pack('e', now, node) .. cmsgpack.pack(id) .. cmsgpack.pack(id)
out[6] = cmsgpack.pack({id, st[4], st[2], st[6], now, node, st[10], st[12]})

local function exact(v)
	if type(v) == 'number' then
		return v == math.floor(v) and math.abs(v) <= 2^53
	elseif type(v) == 'table' then
		for _, x in pairs(v) do
			if not exact(x) then return false end
		end
	end
	return true
end
for i = 17, 20 do
	local ok, vals = pcall(function() return {cmsgpack.unpack(ARGV[i])} end)
	local re = ''
	if ok then
		ok, re = pcall(function() return cmsgpack.pack(unpack(vals)) end)
	end
	out[#out + 1] = ok and 1 or 0
	out[#out + 1] = ok and re or ''
	out[#out + 1] = (ok and exact(vals)) and 1 or 0
end
return out
`

// luaSafe brings n into the range a Lua number holds exactly.
func luaSafe(n int64) int64 { return n % (1 << 53) }

// luaMicros brings n into the microseconds of a time the scripts store.
func luaMicros(n int64) int64 {
	n = luaSafe(n)
	if n < 0 {
		n = -n
	}
	return n
}

// FuzzRecordsThroughCmsgpack round-trips records between the Go codec and
// Lua's cmsgpack on a real redis-server: a spec the Go side packs must
// read back in Lua as the same values and pack to the same bytes; the
// state, history entries and log records cmsgpack packs must decode in Go
// to what was packed; and any bytes the Go side decodes as a record, Lua
// decodes to the same values. Under plain go test it runs its seeds.
func FuzzRecordsThroughCmsgpack(f *testing.F) {
	f.Add(uint64(1), "email.send", "default", `[1,"two"]`, int64(0), int64(1783501811123456), int64(25), int64(30*time.Minute),
		"", int64(0), "0193a7c2-5d1e-7c3b-9f2a-4b8c6d0e1f23", "node-1", int64(3), int64(1), "owner", `{"ok":true}`, "", "1-0 ", []byte("\x93\x01\x02\x03"))
	f.Add(uint64(200), strings.Repeat("k", 31), strings.Repeat("q", 32), strings.Repeat("a", 300), int64(-200), int64(128), int64(-1), int64(1<<40),
		"unique", int64(65536), "ns-1", "", int64(7), int64(255), strings.Repeat("o", 255), strings.Repeat("r", 70000), "oops", "", []byte("\xcb\x40\x08\x00\x00\x00\x00\x00\x00"))
	f.Add(uint64(1<<33), "k", "q", "", int64(-33), int64(-1), int64(1<<31), int64(-1<<31-1),
		"u", int64(1<<32), "", "n", int64(4), int64(-129), "", "", "e", "", []byte("\xca\x40\x40\x00\x00"))
	f.Add(uint64(1<<52), "\x00\xff", "\xa1", "\xc0", int64(127), int64(32767), int64(-32768), int64(65535),
		"\xdb", int64(1<<16-1), "\x01", "n\x00", int64(2), int64(1<<31-1), "\x00", "\xff", "\xc1", "x", []byte("\x9c\x03\x01\x00\xa1o\x00\x00\x00\x00\xa0\xa0\xa0\x03"))
	f.Add(uint64(5), "k", "q", "a", int64(0), int64(0), int64(0), int64(0),
		"", int64(0), "id", "node", int64(5), int64(0), "", "", "", "", []byte("\xa1t\x01\xa1n\x96\xa3\x00id\x04\x01\xa0\xa0\x02"))

	f.Add(uint64(9), "k", "q", "", int64(1), int64(2), int64(3), int64(4),
		"", int64(5), "x", "n", int64(6), int64(7), "", "", "", "", []byte("\x01\xa1k\xa1q\xa0\x00\x00\x00\x00\xa0\x00\x00\x00\x00\xff"))
	f.Add(uint64(9), "k", "q", "", int64(1), int64(2), int64(3), int64(4),
		"", int64(5), "x", "n", int64(6), int64(7), "", "", "", "", []byte("\x98\xa2\x00x\xa1k\x01\x02\x05\xa1n\xa1m\x03"))

	addr := testserver.Redis(f)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	f.Cleanup(func() { rc.Close() })
	script := redis.NewScript(luaRecords)

	f.Fuzz(func(t *testing.T, seq uint64, kind, queue, args string, prio, runAt, maxRetries, timeout int64,
		ukey string, uuntil int64, id, node string, state, attempt int64, owner, result, errMsg, refs string, raw []byte) {
		in := &store.Instance{
			ID: id, Seq: seq % (1 << 53), Kind: kind, Queue: queue, Priority: int(int32(prio)),
			RunAt: FromMicros(luaMicros(runAt)), State: store.Scheduled, MaxRetries: int(int32(maxRetries)),
			Timeout: time.Duration(luaSafe(timeout)), UniqueKey: ukey, UniqueUntil: FromMicros(luaMicros(uuntil)),
			CreatedAt: FromMicros(luaMicros(runAt / 3)), UpdatedAt: FromMicros(luaMicros(runAt / 2)),
		}
		if args != "" {
			in.Args = []byte(args)
		}
		if ukey != "" { // metadata (P_META) too, behind an empty P_LABELS
			in.Metadata = map[string]string{ukey: node, "k": errMsg}
		}
		spec := encodeFullSpec(in, in.UpdatedAt)
		got, err := DecodeInstance(id, spec, "")
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Fatalf("Go round trip of the spec = %+v, %v; want %+v", got, err, in)
		}

		done := *in
		done.State = store.State(1 + uint64(state)%7)
		done.Attempt = int(int32(attempt))
		done.LeaseOwner, done.Error = owner, errMsg
		done.LeaseUntil, done.FinishedAt = FromMicros(luaMicros(uuntil/5)), FromMicros(luaMicros(uuntil/7))
		done.UpdatedAt = FromMicros(luaMicros(uuntil / 11))
		done.CancelRequested = attempt%2 == 0
		if result != "" {
			done.Result = []byte(result)
		}
		if done.RunAt.IsZero() {
			done.RunAt = in.RunAt // a state's RunAt 0 keeps the spec's
		}
		cancel := "0"
		if done.CancelRequested {
			cancel = "1"
		}
		d := func(n int64) string { return fmt.Sprint(n) }
		sid := EncodeID(id)
		now := Micros(done.UpdatedAt)
		argv := []any{spec,
			d(int64(done.State)), d(int64(done.Attempt)), d(Micros(done.RunAt)), owner, d(Micros(done.LeaseUntil)), cancel,
			d(now), d(Micros(done.FinishedAt)), result, errMsg, refs, d(int64(1 + uint64(attempt)%9)),
			sid, node, d(now)}
		// The fuzzed bytes are tried as each kind of record; a valid spec
		// gets them as its state.
		argv = append(argv, string(raw), string(raw), string(raw), string(raw))
		rep, err := script.Run(context.Background(), rc, nil, argv...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		luaStr := func(i int) string { s, _ := rep[i].(string); return s }

		// The spec: Lua reads the values Go wrote, and packs them to the same bytes.
		if rep[0] == nil {
			t.Fatalf("cmsgpack does not read the spec %q as lua/lib.lua's spec() does", spec)
		}
		if luaStr(0) != spec {
			t.Fatalf("cmsgpack packs the spec's values as\n%q\nthe Go side as\n%q", luaStr(0), spec)
		}

		// The state cmsgpack packs.
		got, err = DecodeInstance(id, spec, luaStr(1))
		if err != nil || !reflect.DeepEqual(got, &done) {
			t.Fatalf("Go decodes the state cmsgpack packed as %+v, %v; want %+v", got, err, &done)
		}

		// History entries and a log record.
		if !store.State(done.State).Valid() {
			t.Fatalf("state %d", done.State)
		}
		want := []*store.HistoryRecord{{InstanceID: id, State: done.State, Attempt: done.Attempt, Time: done.UpdatedAt, Node: node,
			Error: errMsg, Result: done.Result, Seq: 1 + uint64(attempt)%9}}
		if hs, err := decodeHistory(luaStr(2)); err != nil || !reflect.DeepEqual(hs, want) {
			t.Fatalf("history entry: Go decodes %+v, %v; want %+v", hs, err, want)
		}
		want = []*store.HistoryRecord{{InstanceID: id, State: store.Processing, Attempt: 1, Time: done.UpdatedAt, Node: node, Seq: 3}}
		if hs, err := decodeHistory(luaStr(3)); err != nil || !reflect.DeepEqual(hs, want) {
			t.Fatalf("first-claim history entry: Go decodes %+v, %v; want %+v", hs, err, want)
		}
		if hs, err := decodeHistory(luaStr(4)); err != nil || len(hs) != 4 || hs[0].InstanceID != id || hs[3].State != store.Scheduled || !hs[3].Time.Equal(done.UpdatedAt) {
			t.Fatalf("enqueue history entry: Go decodes %+v, %v", hs, err)
		}
		wantLog := &store.LogRecord{InstanceID: id, Kind: owner, Attempt: done.Attempt, Level: store.LogLevel(cancel[0] - '0'),
			Time: done.UpdatedAt, Node: node, Message: errMsg, Seq: 1 + uint64(attempt)%9}
		if l, err := decodeLog(luaStr(5)); err != nil || !reflect.DeepEqual(l, wantLog) {
			t.Fatalf("log record: Go decodes %+v, %v; want %+v", l, err, wantLog)
		}

		// The fuzzed bytes as each kind of record: decoded or refused with
		// ErrCorrupt, and when decoded Lua read the same values.
		type decoded struct {
			v   any
			err error
		}
		kinds := []struct {
			name   string
			decode func(string) decoded
		}{
			{"spec", func(s string) decoded { v, err := DecodeInstance("fz", s, ""); return decoded{v, err} }},
			{"state", func(s string) decoded { v, err := DecodeInstance("fz", spec, s); return decoded{v, err} }},
			{"history entry", func(s string) decoded { v, err := decodeHistory(s); return decoded{v, err} }},
			{"log record", func(s string) decoded { v, err := decodeLog(s); return decoded{v, err} }},
		}
		for i, k := range kinds {
			if k.name == "state" && len(raw) == 0 {
				continue // no state: an instance that has not run yet
			}
			g := k.decode(string(raw))
			if g.err != nil {
				if !errors.Is(g.err, store.ErrCorrupt) {
					t.Fatalf("%s %q: error %v does not wrap ErrCorrupt", k.name, raw, g.err)
				}
				continue
			}
			luaOK, _ := rep[6+3*i].(int64)
			exact, _ := rep[8+3*i].(int64)
			if luaOK != 1 {
				t.Fatalf("Go decodes %q as a %s, cmsgpack cannot unpack it", raw, k.name)
			}
			if exact != 1 {
				continue // a number past 2^53: Lua holds another value
			}
			if again := k.decode(luaStr(7 + 3*i)); again.err != nil || !reflect.DeepEqual(again.v, g.v) {
				t.Fatalf("%s %q: Go decodes %+v; cmsgpack's reading of it, packed again (%q), decodes to %+v, %v",
					k.name, raw, g.v, luaStr(7+3*i), again.v, again.err)
			}
		}
	})
}
