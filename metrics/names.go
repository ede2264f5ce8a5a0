package metrics

// Naming chooses the names of a Collector's metrics (WithNaming).
type Naming uint8

const (
	// JobkitNaming names every metric jobkit_...: the default.
	JobkitNaming Naming = iota
	// GoJobNaming gives the metrics go-job exports the names go-job gives
	// them (go_job_registered, go_job_queued, go_job_executed_total,
	// go_job_timedout_total, go_job_duration_seconds, ...) with the same
	// kind label, so dashboards built on go-job keep working; the metrics
	// go-job lacks are named go_job_... after the jobkit_... ones.
	GoJobNaming
)

// names holds the name of each metric under one Naming.
type names struct {
	registered, workers, workersBusy, queued                            string
	executed, completed, terminated, canceled, timedOut                 string
	duration, scheduled, retries, wait                                  string
	queueDepth, queueLag, kindLag, queuedNoNode                         string
	leaseLost, rescued, storeDuration, storeErrors, nodes, scrapeErrors string
}

func namesFor(n Naming) names {
	switch n {
	case GoJobNaming:
		x := extras("go_job_")
		x.registered = "go_job_registered"
		x.workers = "go_job_workers"
		x.queued = "go_job_queued"
		x.executed = "go_job_executed_total"
		x.completed = "go_job_completed_total"
		x.terminated = "go_job_terminated_total"
		x.canceled = "go_job_canceled_total"
		x.timedOut = "go_job_timedout_total"
		x.duration = "go_job_duration_seconds"
		return x
	default:
		x := extras("jobkit_")
		x.registered = "jobkit_registered_jobs"
		x.workers = "jobkit_workers"
		x.queued = "jobkit_queued"
		x.executed = "jobkit_executed_total"
		x.completed = "jobkit_completed_total"
		x.terminated = "jobkit_terminated_total"
		x.canceled = "jobkit_canceled_total"
		x.timedOut = "jobkit_timed_out_total"
		x.duration = "jobkit_execution_duration_seconds"
		return x
	}
}

// extras are the metrics go-job has no name for, under prefix.
func extras(prefix string) names {
	return names{
		workersBusy:   prefix + "workers_busy",
		scheduled:     prefix + "scheduled_total",
		retries:       prefix + "retries_total",
		wait:          prefix + "wait_duration_seconds",
		queueDepth:    prefix + "queue_depth",
		queuedNoNode:  prefix + "queued_no_node",
		queueLag:      prefix + "queue_lag_seconds",
		kindLag:       prefix + "kind_lag_seconds",
		leaseLost:     prefix + "lease_lost_total",
		rescued:       prefix + "rescued_total",
		storeDuration: prefix + "store_call_duration_seconds",
		storeErrors:   prefix + "store_call_errors_total",
		nodes:         prefix + "nodes",
		scrapeErrors:  prefix + "scrape_errors_total",
	}
}
