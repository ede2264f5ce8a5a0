package job

import "github.com/jobkit/job/store"

// State is the lifecycle state of an instance:
//
//	Created → Scheduled → Processing → Completed | Terminated | Canceled | TimedOut
//
// A failed or timed-out attempt with retries left goes from Processing back
// to Scheduled, with its next attempt due after the job's backoff.
type State = store.State

// The states an instance passes through.
const (
	Created    = store.Created
	Scheduled  = store.Scheduled
	Processing = store.Processing
	Completed  = store.Completed
	Terminated = store.Terminated
	Canceled   = store.Canceled
	TimedOut   = store.TimedOut
)
