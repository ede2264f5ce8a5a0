#!/usr/bin/env bash
# Benchmarks jobkit side by side with asynq and River and writes the table
# into doc/benchmarks.md (between <!-- bench:begin --> and <!-- bench:end -->).
#
#   scripts/bench.sh quick [flags]   a few minutes (~5–10 on 2 loaded cores): small sizes,
#                                    1 recovery run; checks that everything works
#   scripts/bench.sh full  [flags]   the figures to publish, ~30–45 minutes on 2 cores;
#                                    run it on a quiet machine
#
# Extra flags go to the bench program (bench/main.go), e.g.
#   -systems jobkit-redis,asynq,asynq-tuned   -only burndown,idle   -runs 5   -out ''
#
# What it does: installs what is missing (redis-server, etcd-server,
# postgresql) when run as root on Debian; builds the bench module (bench/,
# its own go.mod, so the library never depends on asynq or River); runs it.
# The program starts redis-server, etcd and PostgreSQL itself on free
# loopback ports in temporary directories, applies River's migrations, and
# stops every server by its PID when it ends (they are also tied to it with
# PR_SET_PDEATHSIG, so none outlives it). PostgreSQL refuses to run as root:
# as root, the program runs initdb and postgres with the uid/gid of Debian's
# "postgres" user (as `runuser -u postgres -- postgres ...` would), still as
# its own child so it can stop it by PID. Not root: they run as you.
# Debian may also start its packaged services; the benchmark never uses them.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

mode=${1:-quick}
case $mode in
quick | full) shift || true ;;
-*) mode=quick ;;
*)
	echo "usage: $0 [quick|full] [bench flags]" >&2
	exit 2
	;;
esac

need_pkgs=()
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || command -v postgres >/dev/null || need_pkgs+=(postgresql)
ensure_packages ${need_pkgs[@]+"${need_pkgs[@]}"}

tmp=$(mktemp -d -t jobkit-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The etcd the tests use (issue 34): 3.6, built from the Go module pinned
# in tools/etcd/go.mod; testserver starts $JOBKIT_ETCD_BIN.
log "etcd: building the server pinned in tools/etcd/go.mod (cached after the first run)"
JOBKIT_ETCD_BIN=${JOBKIT_ETCD_BIN:-$(cd tools/etcd && GOWORK=off go tool -n go.etcd.io/etcd/server/v3)}
export JOBKIT_ETCD_BIN

log "building bench/ ($(go version | awk '{print $3}'))"
(cd bench && go build -o "$tmp/bench" .)

log "$mode mode; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s)
BENCH_COMMAND="scripts/bench.sh $mode${*:+ $*}" "$tmp/bench" -mode "$mode" -out doc/benchmarks.md "$@"
log "done in $(($(date +%s) - start)) s; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
