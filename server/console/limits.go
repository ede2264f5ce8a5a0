package console

import (
	"net/http"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Limits (issue 36): a page listing each concurrency limit with its use
// now (running of max) and the work waiting for it, then each rate limit
// (rate per period, burst) with the work it matches running and waiting,
// refreshed live like every other page (a start or an end is an event).

func init() {
	pageNames = append(pageNames, "limits")
}

// limitRoutes adds the limits page to m.
func (c *Console) limitRoutes(m *http.ServeMux) {
	m.HandleFunc("GET /limits", c.limitsPage)
}

// limitRow is one concurrency limit of the limits page.
type limitRow struct {
	Kind, Queue      string
	Max              int32
	PerKey           bool
	Running, Waiting int64
	Full             bool
}

// rateRow is one rate limit of the limits page.
type rateRow struct {
	Kind, Queue      string
	Rate, Burst      int32
	Period           string
	Running, Waiting int64
}

func (c *Console) limitsPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	res, err := s.api.limits.ListLimits(r.Context(), connect.NewRequest(&pb.ListLimitsRequest{}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var rows []limitRow
	for _, u := range res.Msg.GetConcurrencyLimits() {
		l := u.GetLimit()
		// A per-key limit's running count spans every key, so it is not
		// full when it reaches max.
		rows = append(rows, limitRow{Kind: l.GetKind(), Queue: l.GetQueue(), Max: l.GetMax(), PerKey: l.GetPerKey(),
			Running: u.GetRunning(), Waiting: u.GetWaiting(), Full: !l.GetPerKey() && u.GetRunning() >= int64(l.GetMax())})
	}
	var rates []rateRow
	for _, u := range res.Msg.GetRateLimits() {
		l := u.GetLimit()
		rates = append(rates, rateRow{Kind: l.GetKind(), Queue: l.GetQueue(), Rate: l.GetRate(), Burst: l.GetBurst(),
			Period: l.GetPeriod().AsDuration().String(), Running: u.GetRunning(), Waiting: u.GetWaiting()})
	}
	c.render(w, r, s, "limits", http.StatusOK, map[string]any{"Concurrency": rows, "Rate": rates})
}
