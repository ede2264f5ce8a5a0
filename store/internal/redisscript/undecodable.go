package redisscript

import (
	"fmt"

	"github.com/jobkit/job/store"
)

// undecodable reports the queued instances whose record could not be
// decoded. The claim script claimed them as attempt 1 under the caller's
// lease (see lua/claim.lua), so the caller can finish them as Terminated.
func (c *Core) undecodable(res *store.ClaimResult, queue string, ids []any) {
	for _, v := range ids {
		id := asString(v)
		res.Undecodable = append(res.Undecodable, store.UndecodableRecord{
			LeaseRef: store.LeaseRef{ID: id, Attempt: 1},
			Err:      fmt.Errorf("%w: instance %s in queue %s: its stored record could not be decoded (written by something else or damaged); its bytes are kept as the instance's args", store.ErrCorrupt, id, queue),
		})
	}
}
