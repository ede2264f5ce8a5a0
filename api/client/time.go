package client

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// asTime returns ts as a time.Time, or the zero time when it is unset.
func asTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// tsOrNil returns t as a Timestamp, or nil for the zero time.
func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
