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

// StateRecord is one state transition of one instance, as history keeps it.
type StateRecord = store.HistoryRecord

// LogRecord is one message an executor wrote through its Instance.
type LogRecord = store.LogRecord

// LogLevel is the severity of a LogRecord.
type LogLevel = store.LogLevel

// The log levels.
const (
	LogDebug = store.LevelDebug
	LogInfo  = store.LevelInfo
	LogWarn  = store.LevelWarn
	LogError = store.LevelError
)
