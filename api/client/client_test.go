package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	job "github.com/jobkit/job"
	jobkitv1 "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestScheduleOptionsBuildTheRequest pins the request each option sends:
// the server reads these fields, so a wrong one would schedule something
// else than asked.
func TestScheduleOptionsBuildTheRequest(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	got, err := buildSchedule("sum", []ScheduleOption{
		WithArguments(1, "a", []int{2}),
		WithScheduleAt(at),
		WithJitter(time.Second),
		WithIdempotencyKey("order-7"),
		WithUniqueKey("u", time.Hour),
		WithPriority(job.HighPriority),
		WithMaxRetries(job.RetryForever),
		WithTimeout(30 * time.Second),
		WithQueue("mail"),
		WithMetadata(map[string]string{"a": "1"}),
		WithMetadata(map[string]string{"b": "2"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	prio, retries := int32(10), int32(-1)
	want := &jobkitv1.ScheduleRequest{
		Kind: "sum", ArgsJson: `[1,"a",[2]]`, RunAt: timestamppb.New(at),
		Jitter: durationpb.New(time.Second), IdempotencyKey: "order-7",
		UniqueKey: "u", UniqueTtl: durationpb.New(time.Hour),
		Priority: &prio, MaxRetries: &retries, Timeout: durationpb.New(30 * time.Second),
		Queue: "mail", Metadata: map[string]string{"a": "1", "b": "2"},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("request\n got %v\nwant %v", got, want)
	}

	// The later of WithScheduleAt and WithScheduleAfter wins, as the
	// server takes one of them.
	got, err = buildSchedule("sum", []ScheduleOption{WithScheduleAt(at), WithScheduleAfter(time.Minute)})
	if err != nil || got.RunAt != nil || got.Delay.AsDuration() != time.Minute {
		t.Fatalf("after at: %v, %v", got, err)
	}
	got, err = buildSchedule("sum", []ScheduleOption{WithScheduleRequest(&jobkitv1.ScheduleRequest{Kind: "other", ArgsJson: "[3]"}), WithQueue("q")})
	if err != nil || got.Kind != "sum" || got.ArgsJson != "[3]" || got.Queue != "q" {
		t.Fatalf("merged request: %v, %v", got, err)
	}
}

// TestScheduleOptionsRefuseBadValues checks the client refuses, before
// sending anything, what the in-process API refuses, with an error that
// wraps job.ErrInvalidOption and has CodeInvalidArgument.
func TestScheduleOptionsRefuseBadValues(t *testing.T) {
	t.Parallel()
	c, err := New("http://127.0.0.1:1") // nothing listens: a call that got sent would be Unavailable
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]ScheduleOption{
		"zero time":       WithScheduleAt(time.Time{}),
		"negative delay":  WithScheduleAfter(-time.Second),
		"negative jitter": WithJitter(-1),
		"empty idem key":  WithIdempotencyKey(""),
		"empty unique":    WithUniqueKey("", time.Hour),
		"negative ttl":    WithUniqueKey("k", -1),
		"retries":         WithMaxRetries(-2),
		"timeout":         WithTimeout(-1),
		"queue":           WithQueue(""),
		"args json":       WithArgumentsJSON(`{"a":1}`),
		"args func":       WithArguments(func() {}),
		"nil option":      nil,
	} {
		_, err := c.ScheduleJob(t.Context(), "sum", o)
		if CodeOf(err) != CodeInvalidArgument || !errors.Is(err, job.ErrInvalidOption) {
			t.Errorf("%s: %v (code %v)", name, err, CodeOf(err))
		}
	}
	if _, err := c.ScheduleJob(t.Context(), ""); CodeOf(err) != CodeInvalidArgument {
		t.Errorf("empty kind: %v", err)
	}
	_, err = c.ScheduleJob(t.Context(), "sum")
	if CodeOf(err) != CodeUnavailable {
		t.Errorf("no server: %v (code %v), want unavailable", err, CodeOf(err))
	}
}

func TestErrorsMapCodesToSentinels(t *testing.T) {
	t.Parallel()
	nf := wrap("get instance x", connect.NewError(connect.CodeNotFound, errors.New(`instance "x" not found`)))
	if !errors.Is(nf, job.ErrNotFound) || CodeOf(nf) != CodeNotFound {
		t.Fatalf("not found: %v", nf)
	}
	// The message names the instance: the call is named without it.
	if got, want := nf.Error(), `jobkit: get instance: not_found: instance "x" not found`; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	ch := wrap(`create channel "ops"`, connect.NewError(connect.CodeInvalidArgument, errors.New(`alert: invalid: channel "ops": url "ftp://x"; give an http:// or https:// address`)))
	if got, want := ch.Error(), `jobkit: create channel: invalid_argument: alert: invalid: channel "ops": url "ftp://x"; give an http:// or https:// address`; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	exists := wrap(`create channel "ops"`, connect.NewError(connect.CodeAlreadyExists, errors.New(`exists already; update it, or delete it first`)))
	if got, want := exists.Error(), `jobkit: create channel "ops": already_exists: exists already; update it, or delete it first`; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	// The engine's messages name the call themselves: it is named once.
	retry := wrap("retry 0194", connect.NewError(connect.CodeFailedPrecondition, errors.New("job: retry 0194: the instance is scheduled, not finished; cancel it first, or wait for it to finish")))
	if got, want := retry.Error(), `jobkit: retry 0194: failed_precondition: the instance is scheduled, not finished; cancel it first, or wait for it to finish`; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	dup := wrap("schedule", connect.NewError(connect.CodeAlreadyExists, errors.New("held")))
	if !errors.Is(dup, job.ErrDuplicate) || errors.Is(dup, job.ErrNotFound) {
		t.Fatalf("already exists: %v", dup)
	}
	other := wrap("schedule", connect.NewError(connect.CodePermissionDenied, errors.New("no")))
	if errors.Is(other, job.ErrNotFound) || errors.Is(other, job.ErrDuplicate) || CodeOf(other) != CodePermissionDenied {
		t.Fatalf("permission denied: %v", other)
	}
	var ce *connect.Error
	if !errors.As(fmt.Errorf("wrapped: %w", other), &ce) || ce.Code() != connect.CodePermissionDenied {
		t.Fatalf("errors.As *connect.Error: %v", ce)
	}
	if CodeOf(nil) != 0 || wrap("x", nil) != nil {
		t.Fatal("nil error")
	}
	item := itemError("batch: item 1", &jobkitv1.ItemError{Code: "already_exists", Message: "held"})
	if CodeOf(item) != CodeAlreadyExists || !errors.Is(item, job.ErrDuplicate) {
		t.Fatalf("item error: %v", item)
	}
	if CodeOf(itemError("x", &jobkitv1.ItemError{Code: "bogus"})) != CodeUnknown {
		t.Fatal("unknown item code")
	}
}

func TestInstanceAccessors(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	in := newInstance(&jobkitv1.Instance{
		Id: "id1", Kind: "sum", Queue: "q", State: jobkitv1.State_STATE_COMPLETED,
		ArgsJson: `[1,"a"]`, ResultJson: `[3]`, Priority: 10, Attempt: 1, MaxRetries: -1,
		Timeout: durationpb.New(time.Second), RunAt: timestamppb.New(now),
		Labels: []string{"gpu"}, Metadata: map[string]string{"k": "v"}, Error: "",
	})
	if in.ID() != "id1" || in.Kind() != "sum" || in.Queue() != "q" || in.State() != job.Completed ||
		in.Priority() != job.HighPriority || in.Attempt() != 1 || in.MaxRetries() != job.RetryForever ||
		in.Timeout() != time.Second || !in.RunAt().Equal(now) || !in.CreatedAt().IsZero() ||
		in.Labels()[0] != "gpu" || in.Metadata()["k"] != "v" || in.Error() != nil {
		t.Fatalf("accessors of %v", in.Proto())
	}
	var n int
	var s string
	if err := in.ArgumentsInto(&n, &s); err != nil || n != 1 || s != "a" {
		t.Fatalf("ArgumentsInto: %d %q %v", n, s, err)
	}
	if err := in.ArgumentsInto(&n); !errors.Is(err, job.ErrInvalidArguments) {
		t.Fatalf("ArgumentsInto with one pointer: %v", err)
	}
	if err := in.ArgumentsInto(&s, nil); !errors.Is(err, job.ErrInvalidArguments) {
		t.Fatalf("ArgumentsInto a number into a string: %v", err)
	}
	var sum int
	if err := in.ResultsInto(&sum); err != nil || sum != 3 {
		t.Fatalf("ResultsInto: %d %v", sum, err)
	}
	if a := in.Arguments(); len(a) != 2 || a[0].(fmt.Stringer).String() != "1" || a[1] != "a" {
		t.Fatalf("Arguments: %#v", a)
	}
	failed := newInstance(&jobkitv1.Instance{State: jobkitv1.State_STATE_TERMINATED, Error: "boom"})
	if failed.Error() == nil || failed.Error().Error() != "boom" {
		t.Fatal("Error")
	}
	if err := failed.ResultsInto(&sum); !errors.Is(err, job.ErrInvalidResults) {
		t.Fatalf("results of a terminated instance: %v", err)
	}
}

// TestStateNumbersMatch pins that the API numbers states and levels as
// package job does: the client converts by number.
func TestStateNumbersMatch(t *testing.T) {
	t.Parallel()
	for _, s := range []job.State{job.Created, job.Scheduled, job.Processing, job.Completed, job.Terminated, job.Canceled, job.TimedOut} {
		name := jobkitv1.State(s).String()
		want := "STATE_" + map[job.State]string{job.TimedOut: "TIMED_OUT"}[s]
		if s != job.TimedOut {
			want = "STATE_" + upper(s.String())
		}
		if name != want {
			t.Errorf("state %d: api %s, job %s", s, name, s)
		}
	}
	for _, l := range []job.LogLevel{job.LogDebug, job.LogInfo, job.LogWarn, job.LogError} {
		if got, want := jobkitv1.LogLevel(l).String(), "LOG_LEVEL_"+upper(l.String()); got != want {
			t.Errorf("level %d: api %s, want %s", l, got, want)
		}
	}
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func TestNewRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := New("http://x", WithProtocol("soap")); err == nil {
		t.Error("protocol soap accepted")
	}
	if _, err := New("http://x", WithToken("abc\n")); err == nil {
		t.Error("token with a newline accepted")
	}
	for _, p := range []string{"connect", "grpc", "grpcweb", "GRPC-Web"} {
		if _, err := ParseProtocol(p); err != nil {
			t.Errorf("ParseProtocol(%q): %v", p, err)
		}
	}
}
