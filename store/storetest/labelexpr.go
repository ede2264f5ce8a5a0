package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobkit/job/store"
)

// Label requirement expressions (store.LabelRequirement): equality, set
// membership, not-equal, exists, not exists, applied inside the claim.

// labelExprTests are the suite's checks of label requirement expressions.
var labelExprTests = []struct {
	name string
	fn   func(t *testing.T, h Harness)
}{
	{"ClaimNoLabelsSkipsRequirements", testClaimNoLabels},
	{"ClaimLabelExpressions", testClaimLabelExpressions},
	{"ClaimLabelExpressionsOrder", testClaimLabelExprOrder},
	{"ClaimLabelExpressionsConcurrent", testClaimLabelExprConcurrent},
	{"LabelExpressionsInvalid", testLabelExprInvalid},
}

// testClaimNoLabels: a claimer with no kinds and no labels takes what
// needs no label ("!gpu" and "region!=eu" included), never an instance
// that requires one, and is not told to come back for those.
func testClaimNoLabels(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "q-nolabels"
	mk := func(id string, labels ...string) *store.Instance {
		in := inst(id, q)
		in.Labels = labels
		return in
	}
	e.enqueue(e.s, base,
		mk("gpu", "gpu"),
		mk("plain"),
		mk("eu", "region=eu"),
		mk("not-gpu", "!gpu"),
		mk("eu-or-us", "region in (eu,us)"),
		mk("not-eu", "region!=eu"),
	)
	res := e.claim(e.s, q, "w-bare", 10, at(time.Second))
	checkIDs(t, "claim with no kinds and no labels", res.Instances, "plain", "not-gpu", "not-eu")
	res = e.claim(e.open(), q, "w-bare", 10, at(time.Minute))
	checkIDs(t, "second claim with no kinds and no labels", res.Instances)
	if !res.NextRunAt.IsZero() {
		t.Fatalf("claim with no labels: NextRunAt %v, want zero (what waits requires labels)", res.NextRunAt)
	}
	res = e.claimWith(e.s, q, "w-kinds", 10, at(time.Minute), []string{"kind-a"}, nil)
	checkIDs(t, "claim naming kinds with no labels", res.Instances)
	for _, id := range []string{"gpu", "eu", "eu-or-us"} {
		if st := e.get(e.s, id).State; st != store.Scheduled {
			t.Fatalf("%s is %v after claims without labels, want scheduled", id, st)
		}
	}
}

// testClaimLabelExpressions: each operator, and mixes of them, against
// claimers with different labels; the set form is stored compact.
func testClaimLabelExpressions(t *testing.T, h Harness) {
	e := setup(t, h)
	reqs := map[string][]string{
		"eq-eu":        {"region=eu"},
		"in-eu-us":     {"region=eu|us"},
		"in-k8s":       {"region in (us,eu)"},
		"ne-eu":        {"region!=eu"},
		"notin-eu-us":  {"region notin (eu,us)"},
		"has-gpu":      {"gpu"},
		"no-gpu":       {"!gpu"},
		"gpu-in-eu-us": {"gpu", "region=eu|us"},
		"eu-no-gpu":    {"!gpu", "region=eu"},
		"gpu-a100":     {"gpu=a100"},
		"plain":        nil,
	}
	claimers := []struct {
		name   string
		labels []string
	}{
		{"eu", []string{"region=eu"}},
		{"us-gpu", []string{"gpu", "region=us"}},
		{"ap-a100", []string{"gpu=a100", "region=ap"}},
		{"none", nil},
		{"eu-gpu", []string{"gpu=t4", "region=eu"}},
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for id := range reqs {
			if !yield(id) {
				return
			}
		}
	})
	for _, c := range claimers {
		q := "q-expr-" + c.name
		var ins []*store.Instance
		var want []string
		for _, id := range names {
			in := inst(c.name+"/"+id, q) // IDs are unique in a namespace
			in.Labels = reqs[id]
			ins = append(ins, in)
			if store.LabelsSatisfy(reqs[id], c.labels) {
				want = append(want, id)
			}
		}
		e.enqueue(e.s, base, ins...)
		res := e.claimWith(e.open(), q, "w-"+c.name, 100, at(time.Second), nil, c.labels)
		var got []string
		for _, in := range res.Instances {
			got = append(got, in.ID[len(c.name)+1:])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("claimer %s with labels %q took %q; want %q", c.name, c.labels, got, want)
		}
	}
	// The set form is kept compact, values sorted: one lane with the
	// compact spelling.
	for id, want := range map[string][]string{
		"in-k8s":       {"region=eu|us"},
		"notin-eu-us":  {"region!=eu|us"},
		"gpu-in-eu-us": {"gpu", "region=eu|us"},
		"eu-no-gpu":    {"!gpu", "region=eu"},
	} {
		if got := e.get(e.s, "eu/"+id).Labels; !slices.Equal(got, want) {
			t.Errorf("stored labels of %s: %q, want %q", id, got, want)
		}
	}
}

// testClaimLabelExprOrder: among the instances a claimer may take, over
// many lanes of requirements, the order is priority, then RunAt, then
// FIFO; those it may not take, interleaved, are skipped.
func testClaimLabelExprOrder(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "q-expr-order"
	type spec struct {
		id     string
		prio   int
		runAt  time.Duration
		labels []string
	}
	specs := []spec{
		{"low-early", -5, 0, []string{"region=eu|us"}},
		{"x-high", 10, 0, []string{"gpu"}},
		{"mid-late", 1, 3 * time.Second, []string{"!gpu"}},
		{"high-late", 10, 5 * time.Second, []string{"region!=ap"}},
		{"mid-fifo-1", 1, time.Second, nil},
		{"x-mid", 1, 0, []string{"region=ap"}},
		{"high-early", 10, time.Second, []string{"region in (eu)"}},
		{"mid-fifo-2", 1, time.Second, []string{"region=eu", "!gpu"}},
		{"zero", 0, 0, []string{"region"}},
		{"x-zero", 0, 0, []string{"region notin (eu)"}},
		{"mid-early", 1, 0, []string{"region=us|eu"}},
		{"mid-fifo-3", 1, time.Second, []string{"!tpu"}},
	}
	order := []string{"high-early", "high-late", "mid-early", "mid-fifo-1", "mid-fifo-2", "mid-fifo-3", "mid-late", "zero", "low-early"}
	for _, s := range specs {
		in := inst(s.id, q)
		in.Priority, in.RunAt, in.Labels = s.prio, at(s.runAt), s.labels
		e.enqueue(e.s, base, in) // one call each so Seq follows specs order
	}
	mine := []string{"region=eu"}
	now := at(time.Minute)
	var got []*store.Instance
	for range order {
		got = append(got, e.claimWith(e.open(), q, "w-eu", 1, now, nil, mine).Instances...)
	}
	checkIDs(t, "claims one at a time with region=eu", got, order...)
	res := e.claimWith(e.s, q, "w-eu", 10, now, nil, mine)
	checkIDs(t, "claim with region=eu once drained", res.Instances)
	if !res.NextRunAt.IsZero() {
		t.Fatalf("claim with region=eu once drained: NextRunAt %v, want zero", res.NextRunAt)
	}
	// What is left is the other claimers', in order too.
	res = e.claimWith(e.s, q, "w-ap-gpu", 10, now, nil, []string{"gpu", "region=ap"})
	checkIDs(t, "claim with gpu and region=ap", res.Instances, "x-high", "x-mid", "x-zero")
}

// testClaimLabelExprConcurrent: claimers with different labels on several
// handles claim at once; none ever takes an instance its labels do not
// satisfy, none is taken twice, and what is left is what no claimer
// satisfies.
func testClaimLabelExprConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "q-expr-conc"
	reqSets := [][]string{
		nil, {"region=eu"}, {"region=eu|us"}, {"region!=eu"}, {"gpu"}, {"!gpu"},
		{"gpu", "region in (eu,ap)"}, {"!gpu", "region notin (us)"}, {"tpu"}, {"region=eu", "region=us"},
	}
	claimers := [][]string{
		{"region=eu"}, {"gpu", "region=us"}, {"gpu=t4", "region=ap"}, nil, {"region=eu", "gpu"},
	}
	n := min(h.concurrentInstances(), 1000)
	ins := make([]*store.Instance, n)
	reqOf := make(map[string][]string, n)
	for i := range ins {
		in := inst(fmt.Sprintf("lc-%05d", i), q)
		in.Labels = reqSets[i%len(reqSets)]
		in.Priority = i % 3
		ins[i] = in
		reqOf[in.ID] = in.Labels
	}
	for start := 0; start < n; start += 200 {
		e.enqueue(e.s, base, ins[start:min(start+200, n)]...)
	}
	var (
		mu      sync.Mutex
		claimed = map[string]int{} // id -> claimer
		errs    []error
		wg      sync.WaitGroup
	)
	now := at(time.Second)
	for c, labels := range claimers {
		for w := range 2 {
			s := e.open()
			wg.Go(func() {
				owner := fmt.Sprintf("w-%d-%d", c, w)
				for {
					res, err := s.Claim(e.ctx, &store.ClaimParams{Queue: q, Owner: owner, Limit: 7, Now: now, LeaseUntil: now.Add(lease), Labels: labels})
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: Claim: %w", owner, err))
						mu.Unlock()
						return
					}
					for _, in := range res.Instances {
						if prev, ok := claimed[in.ID]; ok {
							errs = append(errs, fmt.Errorf("%s claimed by claimers %d and %d", in.ID, prev, c))
						}
						claimed[in.ID] = c
						if !store.LabelsSatisfy(reqOf[in.ID], labels) {
							errs = append(errs, fmt.Errorf("%s requiring %q claimed by %s with labels %q", in.ID, reqOf[in.ID], owner, labels))
						}
					}
					mu.Unlock()
					if len(res.Instances) == 0 {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var left []*store.Instance
	for _, in := range e.instances(e.s, &store.Query{Queue: q, States: []store.State{store.Scheduled}}) {
		left = append(left, in)
		for _, labels := range claimers {
			if store.LabelsSatisfy(reqOf[in.ID], labels) {
				t.Fatalf("%s requiring %q is left Scheduled, though claimer labels %q satisfy it", in.ID, reqOf[in.ID], labels)
			}
		}
	}
	if len(claimed)+len(left) != n {
		t.Fatalf("%d claimed and %d left of %d instances", len(claimed), len(left), n)
	}
}

// testLabelExprInvalid: a malformed requirement is refused at enqueue,
// and a claimer's labels are node labels: an expression there is refused.
func testLabelExprInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	now := at(time.Second)
	for i, bad := range []string{"region in (eu,us", "region in ()", "region=eu||us", "!gpu=x", "region = eu", "=eu"} {
		in := inst(fmt.Sprintf("bad-%d", i), "q")
		in.Labels = []string{"gpu", bad}
		if _, err := e.s.Enqueue(e.ctx, &store.EnqueueParams{Instances: []*store.Instance{in}, Now: now}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Enqueue of an instance requiring %q: %v, want ErrInvalid", bad, err)
		}
	}
	if got := e.instances(e.s, &store.Query{Queue: "q"}); len(got) != 0 {
		t.Fatalf("instances refused for bad requirements were stored: %v", ids(got))
	}
	for _, bad := range []string{"!gpu", "region=eu|us", "region!=eu", "region in (eu)"} {
		p := &store.ClaimParams{Queue: "q", Owner: "w", Limit: 1, Now: now, LeaseUntil: now.Add(lease), Labels: []string{bad}}
		if _, err := e.s.Claim(e.ctx, p); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Claim with node label %q: %v, want ErrInvalid", bad, err)
		}
	}
}
