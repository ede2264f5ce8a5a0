// Package tools holds nothing but this module's go.mod: the code
// generators of jobkit's API pinned as Go tools (buf, protoc-gen-go,
// protoc-gen-connect-go), so `go tool -modfile=../tools/go.mod buf ...`
// builds them from the module cache at these versions, offline, with no
// downloaded binaries. See ../api/doc.go for how they run.
package tools
