#!/usr/bin/env bash
# Runs every test of the repository against real servers.
#
# Installs what is missing (redis-server, etcd-server) when running as root
# on Debian, starts one redis-server and one etcd on free loopback ports in
# a temporary directory, runs gofmt, go vet and `go test -race ./...` with
# JOBKIT_REDIS_ADDR and JOBKIT_ETCD_ENDPOINTS pointing at them (the fault
# tests last, on their own), and stops both by PID on the way out. Tests
# that must kill or restart a server start their own.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

need_pkgs=()
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v etcd >/dev/null || need_pkgs+=(etcd-server)
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
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
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

etcd_port=$(free_port)
peer_port=$(free_port)
ETCD_UNSUPPORTED_ARCH=${ETCD_UNSUPPORTED_ARCH:-} etcd --name jobkit-test --data-dir "$tmp/etcd" \
	--listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
	--listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
	--initial-cluster "jobkit-test=http://127.0.0.1:$peer_port" --log-level error >"$tmp/etcd.log" 2>&1 &
pids+=($!)
wait_port "$etcd_port" 20 "$!" etcd
export JOBKIT_ETCD_ENDPOINTS="127.0.0.1:$etcd_port"
log "etcd $(etcd --version | awk 'NR==1{print $3}') on $JOBKIT_ETCD_ENDPOINTS (pid ${pids[-1]})"

log "gofmt"
unformatted=$(gofmt -l .)
if [[ -n $unformatted ]]; then
	log "not gofmt-ed (run gofmt -w .):"
	echo "$unformatted" >&2
	exit 1
fi
log "go vet ./..."
go vet ./...
# The fault tests bound how fast crashed work runs again (lease + 1 s) with
# real worker processes; they run after the other packages, so those do not
# starve them of the machine's CPUs and of the shared servers.
fault=github.com/jobkit/job/internal/faulttest
log "go test -race ./... (all but $fault)"
go test -race -timeout 12m "$@" $(go list ./... | grep -vx "$fault")
log "go test -race $fault"
go test -race -timeout 12m "$@" "$fault"
