#!/usr/bin/env bash
# Runs every check and every test of every Go module in the repository
# against real servers.
#
# The modules are the directories holding a go.mod (found, not listed,
# so a new module cannot skip the checks). Each module
# is checked on its own, outside the workspace (GOWORK=off), as a user of
# it would build it: go vet, `go mod tidy -diff`, staticcheck (run with
# `go run` at the version pinned below, so a machine needs only Go) and
# `go test -race`. gofmt runs once over the whole tree, which holds every
# module. internal/leancore, in the core module, fails if a heavy client
# (gRPC, protobuf, etcd, Redis, Valkey, pgx, Prometheus) reaches the
# module graph of a program that imports only github.com/jobkit/job.
#
# Installs what is missing (redis-server, etcd-server) when running as root
# on Debian, builds etcd 3.6 from its Go module (tools/etcd; Debian's etcd
# 3.4 is the oldest supported, and store/etcdstore's tests run against it
# too), starts one redis-server and one etcd 3.6 on free loopback ports in
# a temporary directory, runs the tests with JOBKIT_REDIS_ADDR and
# JOBKIT_ETCD_ENDPOINTS pointing at them (the fault tests last, on their
# own), and stops both by PID on the way out. Tests that must kill or
# restart a server start their own. Extra arguments go to every go test.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_pkgs=()
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
# The Redis Cluster tests join their nodes with redis-cli --cluster create.
command -v redis-cli >/dev/null || need_pkgs+=(redis-tools)
# >>> cli (issue 16): doc/api.md's examples run with curl (server/cmd/jobctl)
command -v curl >/dev/null || need_pkgs+=(curl)
# <<< cli
ensure_packages ${need_pkgs[@]+"${need_pkgs[@]}"}
# Debian starts the packaged services; the tests never use them.

tmp=$(mktemp -d -t jobkit-test.XXXXXX)
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# The servers' ports come from below the kernel's range of ephemeral
# ports, where no outgoing connection can hold one between the check and
# the server's bind (a fresh-clone run lost PostgreSQL's port that way).
ephemeral_low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((ephemeral_low > 21024)) || ephemeral_low=32768
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % (ephemeral_low - 20000)))
		if port_free "$p"; then
			echo "$p"
			return
		fi
	done
}
wait_port() { # port seconds pid name
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		port_free "$1" || return 0
		kill -0 "$3" 2>/dev/null || { log "$4 exited; its output:"; cat "$tmp/$4.log" >&2; return 1; }
		sleep 0.05
	done
	log "$4 did not listen on port $1 within $2 s; its output:"
	cat "$tmp/$4.log" >&2
	return 1
}

redis_port=$(free_port)
mkdir -p "$tmp/redis"
redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$tmp/redis" --save '' --appendonly no \
	--daemonize no >"$tmp/redis.log" 2>&1 &
pids+=($!)
wait_port "$redis_port" 10 "$!" redis
export JOBKIT_REDIS_ADDR="127.0.0.1:$redis_port"
log "redis-server $(redis-server --version | awk '{print $3}') on $JOBKIT_REDIS_ADDR (pid ${pids[-1]})"

# >>> etcd36 (issue 34): the tests run against etcd 3.6, built from its Go
# module at the version pinned in tools/etcd/go.mod (go tool -n builds it
# into Go's build cache once and prints its path; later runs find it
# there). testserver starts the same program for the tests that start
# their own etcd ($JOBKIT_ETCD_BIN). Debian's etcd-server (3.4) is the
# oldest etcd the store supports: store/etcdstore's tests run once more
# against it, after the other modules.
log "etcd: building the server pinned in tools/etcd/go.mod (cached after the first run)"
JOBKIT_ETCD_BIN=$(cd tools/etcd && GOWORK=off go tool -n go.etcd.io/etcd/server/v3)
export JOBKIT_ETCD_BIN
etcd_oldest=$(command -v etcd)
# <<< etcd36
etcd_port=$(free_port)
peer_port=$(free_port)
ETCD_UNSUPPORTED_ARCH=${ETCD_UNSUPPORTED_ARCH:-} "$JOBKIT_ETCD_BIN" --name jobkit-test --data-dir "$tmp/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
	--initial-cluster "jobkit-test=http://127.0.0.1:$peer_port" --log-level error >"$tmp/etcd.log" 2>&1 &
pids+=($!)
wait_port "$etcd_port" 20 "$!" etcd
export JOBKIT_ETCD_ENDPOINTS="127.0.0.1:$etcd_port"
log "etcd $("$JOBKIT_ETCD_BIN" --version | awk 'NR==1{print $3}') on $JOBKIT_ETCD_ENDPOINTS (pid ${pids[-1]})"

# >>> pg (issue 17): a private PostgreSQL for store/pgstore and its fault
# tests, exported as JOBKIT_PG_URL. Debian's postgresql is installed when
# missing. PostgreSQL refuses to run as root: as root, initdb and postgres
# run with the uid/gid of Debian's "postgres" user through setpriv, which
# execs, so the PID kept is the server's own and cleanup stops it by PID.
# Durability is off (fsync, full_page_writes): a test server.
pg_bin=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1 || true)
if [[ -z $pg_bin ]] && ! command -v postgres >/dev/null; then
	ensure_packages postgresql
	pg_bin=$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1 || true)
fi
pg_bin=$(dirname "${pg_bin:-$(command -v postgres)}")
as_pg=()
mkdir -p "$tmp/pg"
if [[ $(id -u) -eq 0 ]]; then
	chown postgres:postgres "$tmp/pg"
	chmod 755 "$tmp"
	as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
fi
"${as_pg[@]}" "$pg_bin/initdb" -D "$tmp/pg/data" -U jobkit --auth=trust -E UTF8 --no-sync >"$tmp/pg.log" 2>&1 ||
	{ log "initdb failed; its output:"; cat "$tmp/pg.log" >&2; exit 1; }
pg_port=$(free_port)
"${as_pg[@]}" "$pg_bin/postgres" -D "$tmp/pg/data" -p "$pg_port" -k "$tmp/pg" -c listen_addresses=127.0.0.1 \
	-c fsync=off -c full_page_writes=off -c max_connections=400 >>"$tmp/pg.log" 2>&1 &
pids+=($!)
wait_port "$pg_port" 30 "$!" pg
# It listens before it accepts queries ("the database system is starting up").
for ((i = 0; i < 600; i++)); do
	"$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -U jobkit -d postgres && break
	sleep 0.05
done
"$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" -U jobkit -d postgres ||
	{ log "postgres on port $pg_port is not ready after 30 s; its output:"; cat "$tmp/pg.log" >&2; exit 1; }
export JOBKIT_PG_URL="postgres://jobkit@127.0.0.1:$pg_port/postgres?sslmode=disable"
log "postgres $("$pg_bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$pg_port (pid ${pids[-1]})"
# <<< pg

# staticcheck 2026.2.2; its go.mod requires Go 1.26, the Go of this repository.
staticcheck=honnef.co/go/tools/cmd/staticcheck@v0.8.2

# >>> console (issue 20): the web console's browser test drives Debian's
# headless chromium (server/console/browser_test.go) and fails, naming the
# fix, when chromium is missing: install it here when we can. The console
# has no JavaScript build step and no npm dependency (its few lines of
# script and style under server/console/web are written by hand and
# embedded as they are), so there is no generated asset to check.
if [[ -z ${JOBKIT_CHROMIUM:-} ]] && ! command -v chromium >/dev/null; then
	ensure_packages chromium
fi
# <<< console

# The modules: every directory with a go.mod (core first), relative to the
# root. The committed dev/go.work (make work) is for development; every go
# command below runs with GOWORK=off, each module as its users build it.
mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sed 's#^\./##; s#^\.$#.#' | sort)
log "${#modules[@]} modules: ${modules[*]}"
# A module's zip holds only its own directory: each carries the licence.
for m in "${modules[@]}"; do
	if [[ $m != . ]] && ! cmp -s LICENSE "$m/LICENSE"; then
		log "$m/LICENSE is missing or differs from LICENSE (cp LICENSE $m/)"
		exit 1
	fi
done

# in_module DIR CMD...: runs CMD in module DIR outside the workspace.
in_module() {
	local dir=$1
	shift
	(cd "$dir" && GOWORK=off "$@")
}

log "gofmt"
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
	log "not gofmt-ed (run gofmt -w .):"
	echo "$unformatted" >&2
	exit 1
fi
# >>> codegen (issue 16): the API's generated code is committed; lint the
# .proto sources and regenerate with the tools pinned in tools/go.mod (go
# tool: built from the module cache, no downloaded binaries), then fail
# when anything differs from what is committed.
log "api: buf lint, buf format, buf generate"
in_module api go generate .
if [[ -n $(git status --porcelain --untracked-files=all -- api/gen) ]]; then
	log "api/gen differs from the .proto sources: run 'go generate .' in api/ and commit"
	git status --porcelain --untracked-files=all -- api/gen >&2
	git diff --stat -- api/gen >&2
	exit 1
fi
# <<< codegen
for m in "${modules[@]}"; do
	log "$m: go vet, go mod tidy -diff, staticcheck"
	in_module "$m" go vet ./...
	if ! in_module "$m" go mod tidy -diff; then
		log "$m: go.mod or go.sum is not tidy (run: cd $m && GOWORK=off go mod tidy)"
		exit 1
	fi
	in_module "$m" go run "$staticcheck" ./...
done

# The tests run in a pool of JOBKIT_TEST_JOBS modules at once (default 2):
# most of a module's test time is spent waiting on servers, timers and a
# browser rather than on the CPUs, so modules side by side finish sooner
# than one after another (the suite took 23-31 min serially). Each
# module's output goes to a log printed whole when it ends, so the output
# stays readable; every module runs even after one fails, and the failed
# ones are named at the end. The fault tests bound how fast crashed work
# runs again (lease + 1 s) with real worker processes; they run after
# every other module, alone, so those do not starve them of the machine's
# CPUs and of the shared servers.
fault=internal/faulttest
jobs=${JOBKIT_TEST_JOBS:-2}
mkdir -p "$tmp/logs"
declare -A running=() # pid -> unit name
failed=()
# unit_done PID STATUS: prints the unit's log and records a failure.
unit_done() {
	local name=${running[$1]}
	unset "running[$1]"
	cat "$tmp/logs/${name//\//_}.log" >&2
	if (($2)); then
		log "$name: FAILED (exit $2)"
		failed+=("$name")
	else
		log "$name: ok"
	fi
}
# pool_wait: waits for one unit of the pool to end.
pool_wait() {
	local pid status=0
	wait -n -p pid "${!running[@]}" || status=$?
	unit_done "$pid" "$status"
}
# pool_run NAME CMD...: runs CMD as a unit of the pool, once a place is free.
pool_run() {
	local name=$1
	shift
	while ((${#running[@]} >= jobs)); do pool_wait; done
	log "$name: started"
	("$@") >"$tmp/logs/${name//\//_}.log" 2>&1 &
	running[$!]=$name
}
# test_module DIR ARGS...: go test -race of module DIR, with its name on top.
test_module() {
	local m=$1
	shift
	log "$m: go test -race ./..."
	in_module "$m" go test -race -timeout 12m "$@" ./...
}
# >>> etcd36 (issue 34): store/etcdstore (its own tests, storetest and
# jobtest, its fault tests) against Debian's etcd 3.4, the oldest supported,
# which testserver starts for the test binary. Without -race: the race
# detector runs over the same code against etcd 3.6, and this pass checks
# only what the server does; it keeps the suite's wall time down.
test_etcd_oldest() {
	log "store/etcdstore: go test ./... against Debian's etcd $("$etcd_oldest" --version | awk 'NR==1{print $3}') (the oldest supported)"
	JOBKIT_ETCD_BIN=$etcd_oldest JOBKIT_ETCD_ENDPOINTS='' in_module store/etcdstore go test -timeout 12m "$@" ./...
}
# <<< etcd36
log "tests: $jobs modules at a time (JOBKIT_TEST_JOBS)"
for m in "${modules[@]}"; do
	[[ $m == "$fault" ]] && continue
	pool_run "$m" test_module "$m" "$@"
done
pool_run "store/etcdstore (etcd 3.4)" test_etcd_oldest "$@"
while ((${#running[@]})); do pool_wait; done
if ((${#failed[@]})); then
	log "failed: ${failed[*]}"
	exit 1
fi
log "$fault: go test -race ./..."
in_module "$fault" go test -race -timeout 12m "$@" ./...

# >>> fuzz (issue 13 item 13): a brief run of each fuzz target of the root
# module's package; its seed corpus already ran with the tests above. A
# failing input is written to testdata/fuzz/<target>/ for `go test -run`
# to replay.
for target in FuzzCronSpec FuzzScheduleJob; do
	log ".: go test -fuzz $target (10 s)"
	in_module . go test -run '^$' -fuzz "^$target\$" -fuzztime 10s .
done
# <<< fuzz
