package metrics_test

import (
	"strings"
	"testing"

	"github.com/jobkit/job/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestAlertsCounts(t *testing.T) {
	a := metrics.NewAlerts()
	reg := prometheus.NewRegistry()
	reg.MustRegister(a)
	a.AlertFired("prod", "export-fails", "failed")
	a.AlertFired("prod", "export-fails", "failed")
	a.DeliveryFailed("prod", "pager", "webhook")
	a.Delivered("prod", "pager", "webhook")
	want := `
# HELP jobkit_alert_delivery_failures_total Alert notification delivery attempts that failed (each retry counts).
# TYPE jobkit_alert_delivery_failures_total counter
jobkit_alert_delivery_failures_total{channel="pager",namespace="prod",type="webhook"} 1
# HELP jobkit_alerts_fired_total Alert incidents opened, by rule and condition; counted by the jobd that opened each (once per cluster).
# TYPE jobkit_alerts_fired_total counter
jobkit_alerts_fired_total{condition="failed",namespace="prod",rule="export-fails"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "jobkit_alerts_fired_total", "jobkit_alert_delivery_failures_total"); err != nil {
		t.Fatal(err)
	}
}
