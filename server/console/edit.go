package console

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// triggerEditPage shows a stored trigger in a form to change its kind,
// arguments, schedule and policies, with the next fire times previewed as
// the spec is typed.
func (c *Console) triggerEditPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	got, err := s.api.triggers.GetTrigger(r.Context(), connect.NewRequest(&pb.GetTriggerRequest{Name: r.PathValue("name")}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	t := got.Msg.GetTrigger()
	c.render(w, r, s, "trigger", http.StatusOK, map[string]any{
		"T": t, "Was": triggerDigest(t), "Interval": durText(t.GetInterval()), "CatchUp": durText(t.GetCatchUpWithin()),
		"Overlap": strings.ToLower(strings.TrimPrefix(t.GetOverlap().String(), "OVERLAP_POLICY_")),
		"Missed":  strings.ToLower(strings.TrimPrefix(t.GetMissed().String(), "MISSED_TICK_POLICY_")),
	})
}

// triggerDigest is a digest of what a person edits in a trigger (not the
// scheduler's own fields, which change at every tick): the edit form
// carries it, so a save over another person's change is refused.
func triggerDigest(t *pb.Trigger) string {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%q %q %q %q %v %v %v %v %v", t.GetKind(), t.GetArgsJson(), t.GetCron(), t.GetTimeZone(),
		t.GetInterval().AsDuration(), t.GetPaused(), t.GetOverlap(), t.GetMissed(), t.GetCatchUpWithin().AsDuration())
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// durText shows a duration as the forms read it ("" for none).
func durText(d *durationpb.Duration) string {
	if d == nil || d.AsDuration() == 0 {
		return ""
	}
	return d.AsDuration().String()
}

// errChanged is the refusal of a save over another person's change.
var errChanged = errors.New("changed by someone else since this form was opened")

// updateTrigger saves the trigger edit form. It reads the trigger, refuses
// when a person changed it since the form was shown (the form's digest),
// and updates at the version read; a tick recorded by the scheduler in
// between only makes it read again.
func (c *Console) updateTrigger(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	name, ctx := r.PathValue("name"), r.Context()
	args := r.PostFormValue("args")
	if err := checkArgs(args); err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	interval, err := parseDelay("interval", r.PostFormValue("interval"))
	if err == nil && interval == nil && strings.TrimSpace(r.PostFormValue("cron")) == "" {
		err = errors.New("give a cron spec or an interval")
	}
	var catchUp *durationpb.Duration
	if err == nil {
		catchUp, err = parseDelay("catch up within", r.PostFormValue("catchup"))
	}
	overlap, ok := pb.OverlapPolicy_value["OVERLAP_POLICY_"+strings.ToUpper(r.PostFormValue("overlap"))]
	if err == nil && !ok {
		err = fmt.Errorf("overlap %q; choose allow, forbid or replace", r.PostFormValue("overlap"))
	}
	missed, ok := pb.MissedTickPolicy_value["MISSED_TICK_POLICY_"+strings.ToUpper(r.PostFormValue("missed"))]
	if err == nil && !ok {
		err = fmt.Errorf("missed ticks %q; choose skip or catch_up_once", r.PostFormValue("missed"))
	}
	if err != nil {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err))
		return
	}
	for try := 0; ; try++ {
		got, err := s.api.triggers.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: name}))
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		t := got.Msg.GetTrigger()
		if triggerDigest(t) != r.PostFormValue("was") {
			c.fail(w, r, s, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("trigger %s was %w: open it again to see the change, then edit", name, errChanged)))
			return
		}
		t.Kind, t.ArgsJson = strings.TrimSpace(r.PostFormValue("kind")), args
		t.Cron, t.TimeZone, t.Interval = strings.TrimSpace(r.PostFormValue("cron")), strings.TrimSpace(r.PostFormValue("tz")), interval
		t.Overlap, t.Missed, t.CatchUpWithin = pb.OverlapPolicy(overlap), pb.MissedTickPolicy(missed), catchUp
		t.NextFireTimes = nil
		_, err = s.api.triggers.UpdateTrigger(ctx, connect.NewRequest(&pb.UpdateTriggerRequest{Trigger: t, IfVersion: t.GetVersion()}))
		if connect.CodeOf(err) == connect.CodeFailedPrecondition && try < 3 {
			continue // a tick in between: read again
		}
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		c.bus.publish(s.ns)
		c.back(w, r, "/jobs", "Trigger "+name+" saved.")
		return
	}
}

// definitionEditPage shows a stored definition's policy in a form.
func (c *Console) definitionEditPage(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil {
		return
	}
	got, err := s.api.defs.GetDefinition(r.Context(), connect.NewRequest(&pb.GetDefinitionRequest{Kind: r.PathValue("kind")}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	d := got.Msg.GetDefinition()
	b := d.GetBackoff()
	c.render(w, r, s, "definition", http.StatusOK, map[string]any{
		"D": d, "Timeout": durText(d.GetTimeout()), "Labels": strings.Join(d.GetLabels(), ", "),
		"Backoff":     strings.ToLower(strings.TrimPrefix(b.GetKind().String(), "BACKOFF_KIND_")),
		"BackoffBase": durText(b.GetBase()), "BackoffLimit": durText(b.GetLimit()), "Jitter": strconv.FormatFloat(b.GetJitter(), 'f', -1, 64),
	})
}

// updateDefinition saves the definition form: the policy fields it shows
// replace the stored ones, the rest (unique policy, and whatever else the
// definition holds) is kept as read, and the update is a compare-and-set
// on the version the form was built from.
func (c *Console) updateDefinition(w http.ResponseWriter, r *http.Request) {
	s := c.session(w, r)
	if s == nil || !c.checkPost(w, r, s) {
		return
	}
	kind, ctx := r.PathValue("kind"), r.Context()
	version, err := strconv.ParseInt(r.PostFormValue("version"), 10, 64)
	if err != nil || version <= 0 {
		c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, errors.New("the form carries no version: open the definition again")))
		return
	}
	bad := func(err error) { c.fail(w, r, s, connect.NewError(connect.CodeInvalidArgument, err)) }
	prio, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("priority")), 10, 32)
	if err != nil {
		bad(fmt.Errorf("priority %q is not a whole number", r.PostFormValue("priority")))
		return
	}
	retries, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("retries")), 10, 32)
	if err != nil || retries < -1 {
		bad(fmt.Errorf("retries %q: give 0 or more, or -1 to retry forever", r.PostFormValue("retries")))
		return
	}
	timeout, err := parseDelay("timeout", r.PostFormValue("timeout"))
	if err != nil {
		bad(err)
		return
	}
	backoffKind, ok := pb.BackoffKind_value["BACKOFF_KIND_"+strings.ToUpper(r.PostFormValue("backoff"))]
	if !ok {
		bad(fmt.Errorf("backoff %q; choose unspecified, constant or exponential", r.PostFormValue("backoff")))
		return
	}
	base, err := parseDelay("backoff base", r.PostFormValue("backoff_base"))
	if err != nil {
		bad(err)
		return
	}
	limit, err := parseDelay("backoff limit", r.PostFormValue("backoff_limit"))
	if err != nil {
		bad(err)
		return
	}
	jitter := 0.0
	if j := strings.TrimSpace(r.PostFormValue("jitter")); j != "" {
		if jitter, err = strconv.ParseFloat(j, 64); err != nil {
			bad(fmt.Errorf("jitter %q is not a number from 0 to 1", j))
			return
		}
	}
	got, err := s.api.defs.GetDefinition(ctx, connect.NewRequest(&pb.GetDefinitionRequest{Kind: kind}))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	d := got.Msg.GetDefinition()
	d.Queue, d.Priority, d.MaxRetries, d.Timeout = strings.TrimSpace(r.PostFormValue("queue")), int32(prio), int32(retries), timeout
	d.Description = strings.TrimSpace(r.PostFormValue("description"))
	d.Labels = nil
	for l := range strings.SplitSeq(r.PostFormValue("labels"), ",") {
		if l = strings.TrimSpace(l); l != "" {
			d.Labels = append(d.Labels, l)
		}
	}
	d.Backoff = nil
	if backoffKind != 0 || base != nil || limit != nil || jitter != 0 {
		d.Backoff = &pb.Backoff{Kind: pb.BackoffKind(backoffKind), Base: base, Limit: limit, Jitter: jitter}
	}
	if _, err := s.api.defs.UpdateDefinition(ctx, connect.NewRequest(&pb.UpdateDefinitionRequest{Definition: d, IfVersion: version})); err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			err = connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("definition %s was %w (version %d is no longer the stored one): open it again to see the change, then edit", kind, errChanged, version))
		}
		c.fail(w, r, s, err)
		return
	}
	c.bus.publish(s.ns)
	c.back(w, r, "/jobs", "Definition "+kind+" saved.")
}
