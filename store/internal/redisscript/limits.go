package redisscript

import "github.com/jobkit/job/store"

// EnforcesConcurrencyLimits implements store.LimitEnforcer: the claim
// script enforces ClaimParams.Limits (claim.lua).
func (c *Core) EnforcesConcurrencyLimits() bool { return true }

// appendLimits appends the claim script's limit arguments: how many, then
// kind, queue and max of each.
func appendLimits(args []string, ls []store.ConcurrencyLimit) []string {
	args = append(args, itoa(len(ls)))
	for _, l := range ls {
		args = append(args, l.Kind, l.Queue, itoa(l.Max))
	}
	return args
}
