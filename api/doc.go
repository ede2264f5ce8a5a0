// Package api is the home of jobkit's network API, jobkit.v1: the protobuf
// sources (proto/jobkit/v1), the code generated from them (gen/jobkit/v1,
// with the connect-go services in gen/jobkit/v1/jobkitv1connect) and the Go
// client (package client).
//
// The generated code is committed. After changing a .proto file, run
//
//	go generate .
//
// in this directory: it lints the sources with buf and regenerates the code
// with buf, protoc-gen-go and protoc-gen-connect-go, all built from the
// versions pinned in ../tools/go.mod (go tool), so it needs nothing but Go
// and the module cache. The test command regenerates and fails when the
// committed code differs.
package api

//go:generate go tool -modfile=../tools/go.mod buf lint
//go:generate go tool -modfile=../tools/go.mod buf format --diff --exit-code
//go:generate go tool -modfile=../tools/go.mod buf generate
