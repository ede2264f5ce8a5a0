package server

import (
	"errors"

	"connectrpc.com/connect"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// Metadata support waits for the tracing work of this session, which adds
// store.Instance.Metadata and a schedule option that sets it. Until it is
// on main, these three functions are the only place that knows.

// recordMetadata returns the metadata a record carries (none yet: see
// above; then r.Metadata).
func recordMetadata(r *store.Instance) map[string]string {
	_ = r
	return nil
}

// setRecordMetadata sets a record's metadata (see recordMetadata).
func setRecordMetadata(r *store.Instance, md map[string]string) {
	_, _ = r, md
}

// metadataOption returns the schedule option that carries md.
func metadataOption(md map[string]string) (job.ScheduleOption, error) {
	_ = md
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("metadata is not supported by this server's engine yet; schedule without metadata"))
}
