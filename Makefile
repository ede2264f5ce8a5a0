# The two commands the README starts with:
#   go run ./examples/quickstart   runs an example on the embedded store
#   make test                      runs every test against real servers

.PHONY: test vet bench example

test:
	./scripts/test.sh

vet:
	gofmt -l . && go vet ./...

example:
	go run ./examples/quickstart

# Benchmarks of the embedded store (see doc/benchmarks.md).
bench:
	go test -run '^$$' -bench . -benchmem ./store/memdbstore/
	go run ./cmd/jobkit-bench -store memdb
