package redisstore_test

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobkit/job/store/internal/redisscript"
)

// TestLuaNumFormatsAsBefore checks lib.lua's num, which builds keys,
// fields and stream IDs from numbers, against string.format('%.0f'), what
// it returned before it took faster ways (issue 19): keys written by
// either must be the same. It also checks div_pow10, which the enqueue
// script uses instead of num(math.floor(n / 10^k)) on the Go side's
// decimal text.
func TestLuaNumFormatsAsBefore(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	prelude, _, ok := strings.Cut(redisscript.Enqueue.Source, "\n-- ---- enqueue.lua ----")
	if !ok {
		t.Fatal("no enqueue.lua marker in the enqueue script")
	}
	script := redis.NewScript(prelude + `
local bad = {}
for i = 2, #ARGV do
	local n = tonumber(ARGV[i])
	local want = string.format('%.0f', n)
	if num(n) ~= want then
		bad[#bad + 1] = 'num(' .. ARGV[i] .. ') = ' .. num(n) .. ', want ' .. want
	end
	-- twice: the second of a small number comes from smallnum
	if num(n) ~= want then
		bad[#bad + 1] = 'num(' .. ARGV[i] .. ') again = ' .. num(n) .. ', want ' .. want
	end
	if n % 1 == 0 and string.find(ARGV[i], '^-?%d+$') then
		for _, k in ipairs({3, 6}) do
			local got = div_pow10(ARGV[i], k) or num(math.floor(n / 10 ^ k))
			local want = string.format('%.0f', math.floor(n / 10 ^ k))
			if got ~= want then
				bad[#bad + 1] = 'div_pow10(' .. ARGV[i] .. ', ' .. k .. ') = ' .. got .. ', want ' .. want
			end
		end
	end
end
return bad`)
	args := []any{"jobkit:{numtest}:"}
	add := func(f float64) { args = append(args, strconv.FormatFloat(f, 'g', -1, 64)) }
	addInt := func(i int64) { args = append(args, strconv.FormatInt(i, 10)) }
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 1023, 1024, -1024, -1025, 0.5, 1.5, 2.5, -0.5, -1.5,
		1e6 - 1, 1e6, 1e6 + 1, 1 << 31, 1 << 32, 1<<53 - 1, 1 << 53, -(1<<53 - 1), -(1 << 53), 1 << 60, 1e20, -1e20} {
		add(f)
	}
	for _, i := range []int64{999, 1000, 1001, 999999, 1000000, 1764000000123456, 1764000000999999, 1764000001000000} {
		addInt(i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		addInt(r.Int64N(1<<53) - 1<<52)
		addInt(1_700_000_000_000_000 + r.Int64N(200_000_000_000_000)) // times in µs
		addInt(r.Int64N(4096) - 2048)
		add((r.Float64() - 0.5) * 1e6)
	}
	bad, err := script.Run(ctx, c, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}
