// Package client is the Go client of jobkit's network API (jobkit.v1), for
// services that schedule and inspect jobs through jobd instead of sharing
// its store.
//
// Its options have the names of the in-process API of package job, so code
// moves between the two with its import changed:
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(secret))
//	ji, err := c.ScheduleJob(ctx, "sum",
//		client.WithArguments(1, 2),
//		client.WithScheduleAfter(time.Minute),
//		client.WithMaxRetries(5),
//	)
//	page, err := c.ListInstances(ctx, client.NewQuery(
//		client.WithQueryKind("sum"),
//		client.WithQueryState(job.Terminated),
//	))
//
// Instances come back as *Instance, whose accessors are those of
// job.Instance that make sense away from the executor (no logging).
// Definitions, triggers, queues, nodes, history and log records, and
// events are the generated jobkit.v1 messages (package jobkitv1).
//
// Client holds what an application calls every day (schedule, get, list
// and watch instances, cancel, retry or delete one); c.Admin() holds the
// operator's calls (definitions, triggers, calendars, queues, kinds,
// nodes, bulk operations, alerts), as job.Manager and job.Admin split
// them. Every paged call returns a job.Page.
//
// Errors carry the API's status code: CodeOf(err) returns it, and the
// codes that have a sentinel in package job match it with errors.Is
// (NotFound: job.ErrNotFound; AlreadyExists: job.ErrDuplicate). The client
// imports package job only for its State, Priority and error values; it
// pulls in no engine or store dependency.
package client
