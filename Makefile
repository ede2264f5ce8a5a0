# The two commands the README starts with:
#   go run ./examples/quickstart   runs an example on the embedded store
#   make test                      runs every check and test of every module
#                                  (each directory with a go.mod) against real servers

.PHONY: test vet work bench bench-quick bench-memdb example

test:
	./scripts/test.sh

# gofmt and go vet over every module, each on its own.
vet:
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	for m in $$(find . -name go.mod -not -path './.git/*' -printf '%h\n'); do (cd $$m && GOWORK=off go vet ./...) || exit 1; done

# dev/go.work lists every module but tools/ (whose etcd server build pins
# etcd versions of its own), for development: export
# GOWORK=$$PWD/dev/go.work and commands run from the root see the modules
# as one workspace. It is not at the root, where every go command would
# read it and `go list -m all` would show every module's graph in the
# core's. Run after adding or removing a module. Checks and tests run each
# module on its own (GOWORK=off), as its users build it.
work:
	rm -f dev/go.work dev/go.work.sum
	cd dev && go work init
	cd dev && go work edit -go=1.26.0
	for m in $$(find . -name go.mod -not -path './.git/*' -not -path './tools/*' -not -path './tools' -printf '%h\n' | sort); do (cd dev && go work use ../$$m); done

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
	go -C bench run ./cmd/jobkit-bench -store memdb
