package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// chartWindow is a time window the queue and kind pages chart.
type chartWindow struct {
	Name   string        // in the URL: ?window=24h
	Label  string        // on the selector
	Span   time.Duration // how far back
	Bucket time.Duration // one point of the charts
	Axis   string        // the x axis's start ("−24 h")
	Per    string        // a bucket, in words ("per 15 min")
}

// chartWindows are the windows offered, the first the default.
var chartWindows = []chartWindow{
	{"1h", "1 hour", time.Hour, time.Minute, "−60 min", "per minute"},
	{"24h", "24 hours", 24 * time.Hour, 15 * time.Minute, "−24 h", "per 15 min"},
	{"7d", "7 days", 7 * 24 * time.Hour, time.Hour, "−7 d", "per hour"},
}

// windowNamed returns the window called name, or an error naming those
// there are.
func windowNamed(name string) (chartWindow, error) {
	if name == "" {
		return chartWindows[0], nil
	}
	for _, w := range chartWindows {
		if w.Name == name {
			return w, nil
		}
	}
	return chartWindow{}, fmt.Errorf("unknown window %q; use 1h, 24h or 7d", name)
}

// seriesScanLimit bounds the instances one chart page reads: the newest
// of the window, and the charts say where they stop.
const seriesScanLimit = 20_000

// finalStates are the states an instance ends in, which the charts count.
var finalStates = []pb.State{pb.State_STATE_COMPLETED, pb.State_STATE_TERMINATED, pb.State_STATE_TIMED_OUT, pb.State_STATE_CANCELED}

// bucketFigures are the figures of one bucket of a window.
type bucketFigures struct {
	completed, failed, canceled int
	latency                     []time.Duration // ready (RunAt) to finished
}

// windowSeries is what a queue's or kind's charts show.
type windowSeries struct {
	buckets []bucketFigures
	// read is how many finished instances were read; cut, when not zero,
	// is the creation time of the oldest read, before which the window
	// was not read (seriesScanLimit reached).
	read int
	cut  time.Time
}

// collectSeries reads the instances filter selects that were created in
// window w before now and finished, newest first, up to seriesScanLimit,
// and counts each in the bucket of its finish time.
func collectSeries(ctx context.Context, api *clients, filter *pb.InstanceFilter, w chartWindow, now time.Time) (*windowSeries, error) {
	start := now.Add(-w.Span)
	n := int(w.Span / w.Bucket)
	out := &windowSeries{buckets: make([]bucketFigures, n)}
	f := &pb.InstanceFilter{Kind: filter.GetKind(), Queue: filter.GetQueue(), States: finalStates, CreatedAfter: timestamppb.New(start)}
	token := ""
	for {
		res, err := api.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: f, PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, err
		}
		for _, in := range res.Msg.GetInstances() {
			out.read++
			fin := in.GetFinishedAt()
			if fin == nil {
				continue
			}
			at := fin.AsTime()
			if at.Before(start) || at.After(now) {
				continue
			}
			i := min(int(at.Sub(start)/w.Bucket), n-1)
			b := &out.buckets[i]
			switch in.GetState() {
			case pb.State_STATE_COMPLETED:
				b.completed++
			case pb.State_STATE_CANCELED:
				b.canceled++
				continue
			default:
				b.failed++
			}
			if ready := in.GetRunAt(); ready != nil {
				b.latency = append(b.latency, max(at.Sub(ready.AsTime()), 0))
			}
		}
		token = res.Msg.GetNextPageToken()
		if token == "" {
			return out, nil
		}
		if out.read >= seriesScanLimit {
			if last := res.Msg.GetInstances(); len(last) > 0 {
				out.cut = last[len(last)-1].GetCreatedAt().AsTime()
			}
			return out, nil
		}
	}
}

// charts draws the throughput, failure and latency charts of s.
func (s *windowSeries) charts(w chartWindow) []template.HTML {
	var done, failed, rate, p50, p95 []float64
	var totalDone, totalFailed int
	for _, b := range s.buckets {
		done = append(done, float64(b.completed))
		failed = append(failed, float64(b.failed))
		totalDone += b.completed
		totalFailed += b.failed
		r := 0.0
		if n := b.completed + b.failed; n > 0 {
			r = 100 * float64(b.failed) / float64(n)
		}
		rate = append(rate, r)
		q50, q95 := quantiles95(b.latency)
		p50 = append(p50, q50.Seconds())
		p95 = append(p95, q95.Seconds())
	}
	rateTotal := "—"
	if n := totalDone + totalFailed; n > 0 {
		rateTotal = fmt.Sprintf("%.1f%% overall", 100*float64(totalFailed)/float64(n))
	}
	perFormat := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
	return []template.HTML{
		spanChart("chart-throughput", "Throughput: instances finished "+w.Per, w.Axis,
			[]chartSeries{{Name: "completed", Values: done, Total: "total " + strconv.Itoa(totalDone)}, {Name: "failed", Values: failed, Total: "total " + strconv.Itoa(totalFailed)}}, perFormat),
		spanChart("chart-failures", "Failure rate: failed of finished, "+w.Per, w.Axis,
			[]chartSeries{{Name: "failed %", Values: rate, Total: rateTotal}}, func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) + "%" }),
		spanChart("chart-latency", "Latency: ready to finished (last attempt)", w.Axis,
			[]chartSeries{{Name: "p50", Values: p50}, {Name: "p95", Values: p95}}, secondsFormat),
	}
}

// quantiles95 returns the p50 and p95 of samples (0 for none), nearest
// rank.
func quantiles95(samples []time.Duration) (p50, p95 time.Duration) {
	if len(samples) == 0 {
		return 0, 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.95)
}

// seriesPage shows one queue (what "queue") or kind (what "kind"): its
// counts and its charts over the window the URL names.
func (c *Console) seriesPage(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := c.session(w, r)
		if s == nil {
			return
		}
		name := r.PathValue("name")
		win, err := windowNamed(r.URL.Query().Get("window"))
		if err != nil {
			c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
			return
		}
		ctx := r.Context()
		data := map[string]any{"What": what, "Name": name, "Window": win, "Windows": chartWindows}
		filter := &pb.InstanceFilter{}
		found := false
		if what == "queue" {
			filter.Queue = name
			res, err := s.api.queues.ListQueues(ctx, connect.NewRequest(&pb.ListQueuesRequest{}))
			if err != nil {
				c.fail(w, r, s, err)
				return
			}
			for _, q := range res.Msg.GetQueues() {
				if q.GetName() == name {
					data["Queue"], data["Counts"], data["Lag"], found = q, q.GetCounts(), q, true
				}
			}
		} else {
			filter.Kind = name
			res, err := s.api.queues.ListKinds(ctx, connect.NewRequest(&pb.ListKindsRequest{}))
			if err != nil {
				c.fail(w, r, s, err)
				return
			}
			for _, k := range res.Msg.GetKinds() {
				if k.GetName() == name {
					data["Counts"], data["Lag"], found = k.GetCounts(), k, true
				}
			}
		}
		if !found {
			c.fail(w, r, s, connect.NewError(connect.CodeNotFound, fmt.Errorf("no %s %q has instances in namespace %s: check the name on the Queues page", what, name, s.ns)))
			return
		}
		series, err := collectSeries(ctx, s.api, filter, win, time.Now())
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		data["Charts"], data["Read"] = series.charts(win), series.read
		if !series.cut.IsZero() {
			data["Cut"] = timestamppb.New(series.cut)
		}
		data["Instances"] = c.path("/instances?" + url.Values{what: {name}}.Encode())
		c.render(w, r, s, "series", http.StatusOK, data)
	}
}
