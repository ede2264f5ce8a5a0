package main_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"testing"
	"time"
)

// TestOverviewChartsTheClustersAttempts: jobd runs no kind, a worker
// process on the same Redis runs them; jobd's console Overview counts the
// attempts the worker completed (Stats.Follow on the change feed), which
// an observer of jobd's own manager never sees.
func TestOverviewChartsTheClustersAttempts(t *testing.T) {
	t.Parallel()
	ns := uniqueNS(t)
	newRedisWorker(t, ns, 2, nil)
	p := startJobd(t, jobdBin(), nil, "--store", "redis", "--redis-addr", redisAddr(t), "--namespace", ns, "--node-id", "jobd-charts")

	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	res, err := c.PostForm(p.api+"/console/signin", url.Values{"token": {""}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	overview := func() string {
		res, err := c.Get(p.api + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	if page := overview(); !regexp.MustCompile(`Throughput: attempts per minute \(all nodes\)`).MatchString(page) {
		t.Fatalf("the Overview does not chart all nodes' attempts:\n%.3000s", page)
	}
	var ids []string
	for range 3 {
		in := scheduleJSON(t, p.api, `{"kind":"add","argsJson":"[1, 2]"}`, nil)
		ids = append(ids, in.ID)
	}
	for _, id := range ids {
		waitFor(t, 10*time.Second, "the worker to complete "+id, func() (bool, string) {
			got, _, raw := getInstanceJSON(t, p.api, id, nil)
			return got.State == "STATE_COMPLETED", raw
		})
	}
	// The legend of the completed line: "completed (now N/min, peak M/min)".
	counted := regexp.MustCompile(`completed <span class="muted">\(now ([0-9]+)/min, peak ([0-9]+)/min\)`)
	waitFor(t, 10*time.Second, "the Overview to count the worker's 3 attempts", func() (bool, string) {
		page := overview()
		m := counted.FindStringSubmatch(page)
		return m != nil && (m[1] == "3" || m[2] == "3"), page
	})
}
