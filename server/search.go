package server

import (
	"context"
	"fmt"

	job "github.com/jobkit/job"
)

// searchInstances answers ListInstances for a filter with text: the
// engine's bounded scan (job.Manager.SearchInstances) over what the rest
// of the filter selects, with the labels matched in the same pass so a
// page holds up to its size of instances matching both.
func searchInstances(ctx context.Context, q *job.Query, text string, labels []string, scanLimit int32) (*job.Page[*job.InstanceInfo], int, error) {
	if scanLimit < 0 || scanLimit > job.MaxSearchScan {
		return nil, 0, invalid(fmt.Sprintf("scan_limit %d is out of range; use 1 to %d, or 0 for %d", scanLimit, job.MaxSearchScan, job.DefaultSearchScan))
	}
	p := job.SearchParams{Text: text, ScanLimit: int(scanLimit)}
	if len(labels) > 0 {
		p.Match = func(ji *job.InstanceInfo) bool { return hasLabels(instanceToProto(ji), labels) }
	}
	res, err := managerOf(ctx).SearchInstances(ctx, q, p)
	if err != nil {
		return nil, 0, err
	}
	return &res.Page, res.Scanned, nil
}
