# The two commands the README starts with:
#   go run ./examples/quickstart   runs an example on the embedded store
#   make test                      runs every check and test of every module
#                                  (go.work lists them) against real servers

.PHONY: test vet bench bench-quick bench-memdb example

test:
	./scripts/test.sh

# gofmt and go vet over every module of go.work, in the workspace.
vet:
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	go vet $$(go list -m -f '{{.Dir}}/...')

example:
	go run ./examples/quickstart

# Side by side with asynq and River on servers the run starts itself;
# writes doc/benchmarks.md. bench-quick checks it works in a few minutes,
# bench takes about 40 minutes: run it on a quiet machine.
bench:
	./scripts/bench.sh full

bench-quick:
	./scripts/bench.sh quick

# jobkit alone on the embedded store: go test benchmarks and the program.
bench-memdb:
	go test -run '^$$' -bench . -benchmem ./store/memdbstore/
	go run ./bench/cmd/jobkit-bench -store memdb
