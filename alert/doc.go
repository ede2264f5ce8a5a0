// Package alert tells operators when jobs fail, run long, miss their
// schedule, lag, or have no node to run them (issue 23).
//
// Rules, silences, channels, incidents and the notification history are
// documents of the namespace's store (store.Documents), so every store
// keeps them and they survive restarts. A Service serves one namespace:
// its methods store and list them (checking what a rule names against the
// namespace), and Run evaluates the rules and delivers the
// notifications.
//
// # Conditions
//
// A Rule watches one Condition within a kind, a trigger, a queue or the
// whole namespace:
//
//   - Failed: an instance ended Terminated or TimedOut (Rule.Failures in a
//     row of one kind), from the store's event feed; clears on a success.
//   - LongRun: an attempt has run longer than Rule.Threshold, while it
//     runs; clears when it ends.
//   - MissedTick: a stored trigger skipped a tick (overlap policy forbid)
//     or did not fire one because no scheduler ran; clears when it fires
//     on time again.
//   - QueueLag: a queue's (or a kind's) oldest ready instance has waited
//     longer than Rule.Threshold for Rule.For; clears below it.
//   - NoNode: a kind has work (instances scheduled, or a trigger) and no
//     live node runs it; clears when one does.
//   - WorkflowFailed: a workflow ended failed, one incident per workflow
//     name (the rule takes no scope); clears when a workflow of that name
//     completes.
//
// # Once per cluster, with no leader
//
// Every jobd runs Run on the shared store. Each evaluation step is a
// compare-and-set on one state document (the event cursor, counters and
// the set of conditions that hold), and each incident transition (open,
// repeat, resolve) a compare-and-set on the incident, whose ID derives
// from the rule and what it is about. The notifications of a transition
// are named by it, so an evaluator that repeats the work of one that
// crashed writes nothing twice; deliveries are claimed one by one. Each
// notification is sent once in the cluster (at least once across a crash
// in the middle of a send).
//
// # Channels
//
// Webhook posts a Payload signed as package webhook signs; Chat posts
// {"text": ...}; Email sends over SMTP with STARTTLS. Webhook and chat
// addresses pass Config.Guard, the webhook executor's SSRF rules.
// Secrets are references (env:NAME, file:/path) resolved where the
// notification is sent. A failed delivery is retried with backoff; each
// channel's status (consecutive failures, last error) says whether it is
// failing. Config.Observer counts what happens (module metrics implements
// it for Prometheus).
package alert
