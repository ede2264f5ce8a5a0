package metrics

import "github.com/prometheus/client_golang/prometheus"

// Alerts counts what alerting (module alert, issue 23) does, for
// Prometheus: it is an alert.Observer (the interface's methods, with no
// import of the alert module) and a prometheus.Collector. One serves
// every namespace; each series carries a namespace label.
//
//	jobkit_alerts_fired_total{namespace,rule,condition}          incidents opened, once per cluster
//	jobkit_alert_deliveries_total{namespace,channel,type}        notifications a channel accepted
//	jobkit_alert_delivery_failures_total{namespace,channel,type} delivery attempts that failed
type Alerts struct {
	fired, delivered, failed *prometheus.CounterVec
}

// NewAlerts returns an Alerts with no series yet.
func NewAlerts() *Alerts {
	return &Alerts{
		fired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobkit_alerts_fired_total",
			Help: "Alert incidents opened, by rule and condition; counted by the jobd that opened each (once per cluster).",
		}, []string{"namespace", "rule", "condition"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobkit_alert_deliveries_total",
			Help: "Alert notifications a channel accepted.",
		}, []string{"namespace", "channel", "type"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobkit_alert_delivery_failures_total",
			Help: "Alert notification delivery attempts that failed (each retry counts).",
		}, []string{"namespace", "channel", "type"}),
	}
}

// AlertFired counts an incident opened.
func (a *Alerts) AlertFired(namespace, rule, condition string) {
	a.fired.WithLabelValues(namespace, rule, condition).Inc()
}

// Delivered counts a notification a channel accepted.
func (a *Alerts) Delivered(namespace, channel, typ string) {
	a.delivered.WithLabelValues(namespace, channel, typ).Inc()
}

// DeliveryFailed counts a failed delivery attempt.
func (a *Alerts) DeliveryFailed(namespace, channel, typ string) {
	a.failed.WithLabelValues(namespace, channel, typ).Inc()
}

// Describe implements prometheus.Collector.
func (a *Alerts) Describe(ch chan<- *prometheus.Desc) {
	a.fired.Describe(ch)
	a.delivered.Describe(ch)
	a.failed.Describe(ch)
}

// Collect implements prometheus.Collector.
func (a *Alerts) Collect(ch chan<- prometheus.Metric) {
	a.fired.Collect(ch)
	a.delivered.Collect(ch)
	a.failed.Collect(ch)
}

// ChannelKnown exports the delivery series of a channel at 0, before its
// first notification (see alert.ChannelObserver).
func (a *Alerts) ChannelKnown(namespace, channel, typ string) {
	a.delivered.WithLabelValues(namespace, channel, typ)
	a.failed.WithLabelValues(namespace, channel, typ)
}
