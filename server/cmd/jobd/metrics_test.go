package main_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads /metrics of the jobd at base with the Prometheus text
// parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpClient.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mfs
}

// value returns the value of the sample of family name whose labels
// include want, and whether there is one.
func value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	mf, ok := mfs[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics: /metrics of a jobd serving two namespaces counts the work
// done in each, labelled by namespace, with the Go runtime's figures
// beside them; --metrics-naming go-job gives go-job's names.
func TestMetrics(t *testing.T) {
	t.Parallel()
	p := startJobd(t, testjobdBin(), nil, "--workers", "2", "--namespace", "blue", "--namespace", "green",
		"--metrics-listen", "127.0.0.1:0")
	blue := map[string]string{"Jobkit-Namespace": "blue"}
	for i := range 3 {
		in := scheduleJSON(t, p.api, fmt.Sprintf(`{"kind":"echo","argsJson":"[\"%d\"]"}`, i), blue)
		waitStateJSON(t, p.api, in.ID, "STATE_COMPLETED", blue)
	}
	in := scheduleJSON(t, p.api, `{"kind":"echo","argsJson":"[\"g\"]"}`, map[string]string{"Jobkit-Namespace": "green"})
	waitStateJSON(t, p.api, in.ID, "STATE_COMPLETED", map[string]string{"Jobkit-Namespace": "green"})

	var last string
	waitFor(t, 10*time.Second, "the completed counts in /metrics", func() (bool, string) {
		mfs := scrape(t, p.health)
		b, okb := value(mfs, "jobkit_completed_total", map[string]string{"namespace": "blue", "kind": "echo"})
		g, okg := value(mfs, "jobkit_completed_total", map[string]string{"namespace": "green", "kind": "echo"})
		_, goOK := mfs["go_goroutines"]
		last = fmt.Sprintf("blue %v (%v), green %v (%v), go_goroutines %v", b, okb, g, okg, goOK)
		return okb && okg && b == 3 && g == 1 && goOK, last
	})
	mfs := scrape(t, p.health)
	if w, ok := value(mfs, "jobkit_workers", map[string]string{"namespace": "blue"}); !ok || w != 2 {
		t.Errorf("jobkit_workers{namespace=blue} = %v (%v); want 2 (--workers 2)", w, ok)
	}
	if n, ok := value(mfs, "jobkit_scheduled_total", map[string]string{"namespace": "blue", "kind": "echo"}); !ok || n != 3 {
		t.Errorf("jobkit_scheduled_total{namespace=blue,kind=echo} = %v (%v); want 3", n, ok)
	}

	q := startJobd(t, jobdBin(), nil, "--metrics-naming", "go-job")
	if _, ok := scrape(t, q.health)["go_job_workers"]; !ok {
		t.Errorf("--metrics-naming go-job: no go_job_workers in /metrics")
	}
}
