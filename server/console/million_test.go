package console_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/internal/testserver"
	"github.com/jobkit/job/store"
	"github.com/jobkit/job/store/pgstore"
)

// millionEnv is the environment variable that runs TestMillionInstancesPage:
// "memdb", "redis" or "pg", optionally with the count after a colon
// ("redis:200000"; 1,000,000 by default).
const millionEnv = "JOBKIT_CONSOLE_MILLION"

// TestMillionInstancesPage measures the Instances page over a store holding
// a million finished instances (doc/benchmarks-appendix.md, "Issue 20: console"): it
// is a measurement, not a check, so it runs only when $JOBKIT_CONSOLE_MILLION
// names the store:
//
//	JOBKIT_CONSOLE_MILLION=redis go test -run TestMillionInstancesPage -v -timeout 60m ./console/
//
// One in 1,000 instances fails ("card declined"), the rest complete. It
// times, over HTTP (time to first byte and to the last byte, 30 requests
// each) and in Chromium (navigation timing: first byte, and the table
// rendered at DOMContentLoaded, 10 loads each): the first page, a filter
// of the failed ones of one kind, and a text search of the errors.
func TestMillionInstancesPage(t *testing.T) {
	spec := os.Getenv(millionEnv)
	if spec == "" {
		t.Skipf("a measurement: set %s=memdb, =redis or =pg (optionally :<count>) to run it", millionEnv)
	}
	name, count, _ := strings.Cut(spec, ":")
	n := 1_000_000
	if count != "" {
		var err error
		if n, err = strconv.Atoi(count); err != nil || n < 1000 {
			t.Fatalf("%s=%q: the count must be a number of at least 1000", millionEnv, spec)
		}
	}
	var open func(t *testing.T, ns string) store.Store
	switch name {
	case "memdb":
		open = memdb
	case "redis":
		open = redisStore
	case "pg":
		open = pgStore
	default:
		t.Fatalf("%s=%q: name memdb, redis or pg", millionEnv, spec)
	}
	filled := open(t, "default")
	fill(t, filled, n)
	e := newEnvOn(t, func(t *testing.T, ns string) store.Store {
		if ns == "default" {
			return filled
		}
		return open(t, ns)
	}, withManager(job.WithRetention(0, 0))) // keep the million: by default a manager keeps the newest 100,000 finished

	c := browserless(t)
	signIn(t, e, c, viewerToken)
	pages := []struct{ name, path, want string }{
		{"first page", "/instances", `data-id=`},
		{"failed of one kind", "/instances?kind=pay&state=terminated", `card declined`},
		{"search in errors, failed only", "/instances?text=DECLINED&state=terminated", `card declined`},
		{"search in errors, all (one scan limit)", "/instances?text=DECLINED", `id="search-info"`},
	}
	// The search continued from where the one above stopped (its "continue
	// searching" link: the next scan limit's worth, older instances).
	if m := moreRE.FindStringSubmatch(get(t, c, e.console+"/instances?text=DECLINED").body); m != nil {
		pages = append(pages, struct{ name, path, want string }{"search in errors, all, continued", strings.TrimPrefix(html.UnescapeString(m[1]), "/console"), `id="search-info"`})
	} else {
		t.Error(`the search among all offers no "continue searching" link`)
	}
	for _, p := range pages {
		var ttfb, total []time.Duration
		for range 30 {
			f, l, body := timeGet(t, c, e.console+p.path)
			if !strings.Contains(body, p.want) {
				t.Fatalf("%s: the page lacks %q:\n%.2000s", p.name, p.want, body)
			}
			ttfb, total = append(ttfb, f), append(total, l)
		}
		t.Logf("HTTP %-40s first byte p50 %7.1f ms p90 %7.1f ms; last byte p50 %7.1f ms p90 %7.1f ms", p.name,
			ms(pct(ttfb, 50)), ms(pct(ttfb, 90)), ms(pct(total, 50)), ms(pct(total, 90)))
		if strings.Contains(p.path, "text=") {
			body := get(t, c, e.console+p.path).body
			if m := searchInfoRE.FindStringSubmatch(body); m != nil {
				t.Logf("     %s says: %s", p.name, strings.Join(strings.Fields(m[1]), " "))
			}
		}
	}

	b := newBrowser(t)
	b.signIn(e, viewerToken)
	for _, p := range pages {
		var first, rendered []time.Duration
		for range 10 {
			b.do("load "+p.path, chromedp.Navigate(e.console+p.path))
			b.until("the table", `document.querySelector("#instances") !== null || document.querySelector("#no-instances") !== null`)
			at := eval[[]float64](b, `(() => { const n = performance.getEntriesByType("navigation")[0]; return [n.responseStart - n.startTime, n.domContentLoadedEventEnd - n.startTime]; })()`)
			first = append(first, time.Duration(at[0]*float64(time.Millisecond)))
			rendered = append(rendered, time.Duration(at[1]*float64(time.Millisecond)))
		}
		t.Logf("Chromium %-36s first byte p50 %7.1f ms p90 %7.1f ms; table rendered p50 %7.1f ms p90 %7.1f ms", p.name,
			ms(pct(first, 50)), ms(pct(first, 90)), ms(pct(rendered, 50)), ms(pct(rendered, 90)))
	}
}

// fill stores n finished instances in st: kind "pay" with arguments
// ["order-<i>"], completing with ["paid order-<i>"], except one in 1,000
// that fails for good with "card declined for order-<i>".
func fill(t *testing.T, st store.Store, n int) {
	t.Helper()
	ctx := context.Background()
	m, err := job.NewManager(job.WithStore(st), job.WithWorkers(64), job.WithNodeID("filler"), job.WithRetention(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	pay, err := job.NewJob(job.WithKind("pay"), job.WithMaxRetries(0), job.WithExecutor(func(order string) (string, error) {
		if strings.HasSuffix(order, "000") {
			return "", errors.New("card declined for " + order)
		}
		return "paid " + order, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterJob(pay); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	items := make([]job.BatchItem, 0, 1000)
	for i := 0; i < n; {
		items = items[:0]
		for ; len(items) < 1000 && i < n; i++ {
			items = append(items, job.BatchItem{Kind: "pay", Options: []job.ScheduleOption{job.WithArguments(fmt.Sprintf("order-%07d", i))}})
		}
		res, err := m.ScheduleJobs(ctx, items...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	scheduled := time.Since(start)
	deadline := time.Now().Add(40 * time.Minute)
	for {
		rows, err := m.Admin().CountInstances(ctx, "", "pay")
		if err != nil {
			t.Fatal(err)
		}
		var done int64
		for _, r := range rows {
			done += r.States[job.Completed] + r.States[job.Terminated]
		}
		if done == int64(n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d finished after 40 minutes", done, n)
		}
		time.Sleep(time.Second) // a fill of minutes: polled once a second
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := m.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %d finished instances: scheduled in %v, all finished after %v", n, scheduled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// timeGet GETs u and returns the time to the first byte of the answer and
// to its last byte, and the body.
func timeGet(t *testing.T, c *http.Client, u string) (first, last time.Duration, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got time.Time
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotFirstResponseByte: func() { got = time.Now() }}))
	start := time.Now()
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", u, res.StatusCode, err)
	}
	return got.Sub(start), time.Since(start), string(b)
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p+99)/100 - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pgStore opens a store on the test binary's PostgreSQL ($JOBKIT_PG_URL,
// or one it starts), in a namespace of its own of a migrated schema.
func pgStore(t *testing.T, ns string) store.Store {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testserver.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.New(ctx, pool, pgstore.WithNamespace(fmt.Sprintf("console-%d-%d-%s", os.Getpid(), redisSeq.Add(1), ns)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
