package server

import (
	"slices"

	job "github.com/jobkit/job"
	"github.com/jobkit/job/store"
)

// recordMetadata returns the metadata a record carries.
func recordMetadata(r *store.Instance) map[string]string {
	return store.CloneMetadata(r.Metadata)
}

// setRecordMetadata sets a record's metadata.
func setRecordMetadata(r *store.Instance, md map[string]string) {
	r.Metadata = store.CloneMetadata(md)
}

// metadataOptions returns the schedule options that carry md: one
// job.WithMetadata per pair, in key order. The engine checks the limits
// (store.MaxMetadataPairs, store.MaxMetadataBytes) when it stores them.
func metadataOptions(md map[string]string) []job.ScheduleOption {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	opts := make([]job.ScheduleOption, len(keys))
	for i, k := range keys {
		opts[i] = job.WithMetadata(k, md[k])
	}
	return opts
}
