package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestListInstancesSearchesText: filter.text finds instances by their
// arguments, results and errors, with the other filters and labels,
// through pages that say how many instances they searched; scan_limit
// bounds each call; bulk operations refuse text.
func TestListInstancesSearchesText(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, protocols[3], "", "")
		ctx := context.Background()
		schedule := func(kind, args string, delay time.Duration) string {
			req := &pb.ScheduleRequest{Kind: kind, ArgsJson: args}
			if delay > 0 {
				req.Delay = durationpb.New(delay)
			}
			res, err := c.jobs.Schedule(ctx, connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			return res.Msg.GetInstance().GetId()
		}
		// In arguments (and the result "hi Zed"), in a result alone, in an
		// error ("boom").
		byResult := schedule("greet", `["Zed"]`, 0)
		waitState(t, c, byResult, pb.State_STATE_COMPLETED)
		sum := schedule("add", "[400,20]", 0) // result [420], only there
		waitState(t, c, sum, pb.State_STATE_COMPLETED)
		failed := schedule("fail", "", 0)
		waitState(t, c, failed, pb.State_STATE_TERMINATED)
		var hay []string
		for i := range 30 {
			hay = append(hay, schedule("add", fmt.Sprintf("[%d,%d]", i, 1000+i), time.Hour))
		}
		byArgs := schedule("greet", `["zed's friend"]`, time.Hour)
		tagged := schedule("tagged", "", time.Hour) // requires label gpu; its args are []

		type result struct {
			ids     []string
			calls   int
			scanned int64
		}
		search := func(f *pb.InstanceFilter, size, scan int32) result {
			var r result
			token := ""
			for {
				res, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: f, PageSize: size, PageToken: token, ScanLimit: scan}))
				if err != nil {
					t.Fatal(err)
				}
				r.calls++
				if r.calls > 100 {
					t.Fatal("the search does not end")
				}
				if scan > 0 && res.Msg.GetScanned() > int64(scan) {
					t.Fatalf("a call scanned %d, scan_limit %d", res.Msg.GetScanned(), scan)
				}
				r.scanned += res.Msg.GetScanned()
				for _, in := range res.Msg.GetInstances() {
					r.ids = append(r.ids, in.GetId())
				}
				if token = res.Msg.GetNextPageToken(); token == "" {
					return r
				}
			}
		}
		if got := search(&pb.InstanceFilter{Text: "ZED"}, 10, 0); !slices.Equal(got.ids, []string{byArgs, byResult}) || got.scanned != 35 {
			t.Fatalf(`text "ZED": %v (scanned %d), want %v, scanned 35`, got.ids, got.scanned, []string{byArgs, byResult})
		}
		if got := search(&pb.InstanceFilter{Text: "420"}, 10, 0); !slices.Equal(got.ids, []string{sum}) {
			t.Fatalf(`text "420": %v, want the instance whose result is [420] %s`, got.ids, sum)
		}
		if got := search(&pb.InstanceFilter{Text: "boom"}, 10, 0); !slices.Equal(got.ids, []string{failed}) {
			t.Fatalf(`text "boom": %v, want the failed instance %s`, got.ids, failed)
		}
		if got := search(&pb.InstanceFilter{Text: "1017"}, 10, 0); !slices.Equal(got.ids, []string{hay[17]}) {
			t.Fatalf(`text "1017": %v, want %s`, got.ids, hay[17])
		}
		// Narrowed by the store (kind, state) and by labels on the server.
		if got := search(&pb.InstanceFilter{Text: "zed", States: []pb.State{pb.State_STATE_COMPLETED}}, 10, 0); !slices.Equal(got.ids, []string{byResult}) || got.scanned != 2 {
			t.Fatalf(`completed, text "zed": %v scanned %d`, got.ids, got.scanned)
		}
		if got := search(&pb.InstanceFilter{Text: "[]", Labels: []string{"gpu"}}, 10, 0); !slices.Equal(got.ids, []string{tagged}) {
			t.Fatalf(`labels gpu, text "[]": %v, want %s`, got.ids, tagged)
		}
		// A scan limit of 5 takes 7 calls over 35 instances, every match once.
		if got := search(&pb.InstanceFilter{Text: "zed"}, 10, 5); !slices.Equal(got.ids, []string{byArgs, byResult}) || got.calls != 7 || got.scanned != 35 {
			t.Fatalf(`scan_limit 5: %v in %d calls, %d scanned; want 2 matches, 7 calls, 35 scanned`, got.ids, got.calls, got.scanned)
		}
		_, err := c.jobs.ListInstances(ctx, connect.NewRequest(&pb.ListInstancesRequest{Filter: &pb.InstanceFilter{Text: "x"}, ScanLimit: 100_001}))
		wantCode(t, err, connect.CodeInvalidArgument, "scan_limit")
		_, err = c.jobs.CancelInstances(ctx, connect.NewRequest(&pb.CancelInstancesRequest{Filter: &pb.InstanceFilter{Text: "zed"}}))
		wantCode(t, err, connect.CodeInvalidArgument, "text cannot narrow")
		waitState(t, c, byArgs, pb.State_STATE_SCHEDULED)
	})
}
