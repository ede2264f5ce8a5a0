package console

import (
	"net/http"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// Limits (issue 36): a page listing each concurrency limit with its use
// now (running of max) and the work waiting for it, refreshed live like
// every other page (a start or an end is an event). Other kinds of limit
// get sections of their own.

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
	Running, Waiting int64
	Full             bool
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
		rows = append(rows, limitRow{Kind: l.GetKind(), Queue: l.GetQueue(), Max: l.GetMax(),
			Running: u.GetRunning(), Waiting: u.GetWaiting(), Full: u.GetRunning() >= int64(l.GetMax())})
	}
	c.render(w, r, s, "limits", http.StatusOK, map[string]any{"Concurrency": rows})
}
