// Package metrics exports a jobkit Manager's metrics to Prometheus.
//
// A Collector is made per Manager and does two jobs: as a job.Observer
// (job.WithObserver) it counts what the manager does (instances
// scheduled, attempts started and how long they waited, outcomes and how
// long they ran, retries, lost leases, rescues, store-call latency), and
// as a prometheus.Collector it exports those counts together with figures
// read from the manager when scraped (workers, registered jobs, queue
// depth by state, lag, nodes). Register it on a registry you own; the
// package registers nothing by itself:
//
//	col, err := metrics.New()
//	if err != nil { ... }
//	mgr, err := job.NewManager(job.WithStore(st), job.WithObserver(col))
//	if err != nil { ... }
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(col)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Metric names start with jobkit_; WithNaming(GoJobNaming) gives go-job's
// metrics go-job's names (go_job_...) so dashboards built on go-job keep
// working. No label ever holds an instance ID: labels are kinds, queues,
// states, store operations and reasons, which a deployment has few of.
// doc/metrics.md in the repository lists every metric with example
// alerts.
//
// Counters count what this manager did; a cluster's totals are the sum
// over its managers (sum by (kind) in PromQL). The store figures (depth,
// queued, lag, nodes) are the cluster's, the same from every manager: take
// max, not sum, across managers.
package metrics
