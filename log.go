package job

import (
	"context"
	"fmt"

	"github.com/jobkit/job/store"
)

// LookupInstanceLogs returns the log records q selects, oldest first.
func (m *Manager) LookupInstanceLogs(ctx context.Context, q *Query) ([]*LogRecord, error) {
	sq, err := q.store()
	if err != nil {
		return nil, err
	}
	recs, err := m.store.LookupLogs(ctx, sq)
	if err != nil {
		return recs, fmt.Errorf("job: lookup logs: %w", err)
	}
	return recs, nil
}

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
