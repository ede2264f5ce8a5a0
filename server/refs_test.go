package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/jobkit/job/api/gen/jobkit/v1"
)

// TestTriggerReferencesOverTheAPI: a trigger of a kind nothing runs or
// defines is refused (NotFound, naming the kind and how to define it), and
// the definition of a kind a trigger fires cannot be deleted
// (FailedPrecondition, naming the trigger) until the trigger is gone.
func TestTriggerReferencesOverTheAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, Config{})
		c := e.dial(t, connectJSON, "", "")
		ctx := context.Background()
		_, err := c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "bad2", Kind: "nosuch", Cron: "* * * * *"}}))
		wantCode(t, err, connect.CodeNotFound, `"nosuch"`, "CreateDefinition")
		_, err = c.trigs.GetTrigger(ctx, connect.NewRequest(&pb.GetTriggerRequest{Name: "bad2"}))
		wantCode(t, err, connect.CodeNotFound)

		if _, err := c.defs.CreateDefinition(ctx, connect.NewRequest(&pb.CreateDefinitionRequest{Definition: &pb.Definition{Kind: "slowjob"}})); err != nil {
			t.Fatal(err)
		}
		if _, err := c.trigs.CreateTrigger(ctx, connect.NewRequest(&pb.CreateTriggerRequest{Trigger: &pb.Trigger{Name: "slow-min", Kind: "slowjob", Cron: "* * * * *"}})); err != nil {
			t.Fatal(err)
		}
		_, err = c.defs.DeleteDefinition(ctx, connect.NewRequest(&pb.DeleteDefinitionRequest{Kind: "slowjob"}))
		wantCode(t, err, connect.CodeFailedPrecondition, `trigger "slow-min"`)
		if _, err := c.trigs.DeleteTrigger(ctx, connect.NewRequest(&pb.DeleteTriggerRequest{Name: "slow-min"})); err != nil {
			t.Fatal(err)
		}
		if _, err := c.defs.DeleteDefinition(ctx, connect.NewRequest(&pb.DeleteDefinitionRequest{Kind: "slowjob"})); err != nil {
			t.Fatalf("delete once no trigger fires it: %v", err)
		}
	})
}
