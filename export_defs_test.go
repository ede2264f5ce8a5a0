package job

import "github.com/jobkit/job/store"

// BackoffOf exposes the backoff built from a definition's data.
func BackoffOf(b store.Backoff) Backoff { return backoffOf(b) }
