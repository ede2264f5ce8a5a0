package main

import (
	"context"

	"google.golang.org/protobuf/proto"
)

// Short names for the signatures of command helpers.
type (
	ctxT     = context.Context
	protoMsg = proto.Message
)
