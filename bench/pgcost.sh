#!/usr/bin/env bash
# Issues 17 and 39: what a job costs PostgreSQL, per system, in figures the
# machine's load cannot change. Starts a private PostgreSQL (the settings
# of bench/postgres.go, plus pg_stat_statements) on a free loopback port in
# a temp dir, as the postgres user when run as root, and for each system
# runs one burn-down (or batch, or steady run) of the bench program against
# it with the statistics reset before, then prints per job: statement
# calls, transactions (pg_stat_database: commits and rollbacks of every
# connection, the script's few included), buffers (shared hit + read), WAL
# records and bytes (pg_stat_statements, and the whole server's from
# pg_stat_wal, autovacuum included), the server's CPU (the postmaster's
# and its children's) and rows written (pg_stat_user_tables: inserts,
# updates, HOT updates, deletes), and each statement's planning
# (pg_stat_statements.track_planning: plans and planning time per job; a
# prepared statement that keeps its generic plan is planned a few times
# per connection, one planned at each call as often as it runs). The
# server is stopped by its PID.
#
#   bench/pgcost.sh JKBENCH N SYSTEM... [-- extra bench flags]
#   e.g. bench/pgcost.sh /tmp/jkbench 100000 jobkit-pg river-tuned
#
# JKBENCH is a built bench program (cd bench && go build -o /tmp/jkbench .).
# PGCOST_ONLY=schedule measures the schedule workload instead; give its
# sizes after "--" (-rate-calls R -batch-jobs B) and N = 2R + B, the jobs
# it stores (R one call each from 1 goroutine, R from 8, B 1,000 per call).
# PGCOST_ONLY=steady measures steady low rates (issue 39): give
# -- -steady-rate R -steady-dur D [-steady-workers W] and N = R * D in
# seconds, the jobs it inserts; the idle workers' polling is in the figures.
# PGCOST_ONLY=rest measures a system with no jobs at all: give
# -- -steady-dur D [-steady-workers W] and N = D in seconds; every "per
# job" figure is then per second of rest.
set -euo pipefail
bench=$1 n=$2
shift 2
systems=()
while [[ $# -gt 0 && $1 != -- ]]; do systems+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
extra=("$@")
only=${PGCOST_ONLY:-burndown}

bin=$(dirname "$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n1)")
tmp=$(mktemp -d /tmp/pgcost.XXXXXX)
chmod 755 "$tmp"
as_pg=()
if [[ $(id -u) -eq 0 ]]; then
	chown postgres:postgres "$tmp"
	as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups)
fi
"${as_pg[@]}" "$bin/initdb" -D "$tmp/data" -U bench --auth=trust -E UTF8 --no-sync >"$tmp/initdb.log" 2>&1
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as_pg[@]}" "$bin/postgres" -D "$tmp/data" -p "$port" -k "$tmp" -c listen_addresses=127.0.0.1 \
	-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=256MB -c max_connections=200 \
	-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.track_planning=on >"$tmp/pg.log" 2>&1 &
pgpid=$!
trap 'kill -INT $pgpid 2>/dev/null; wait $pgpid 2>/dev/null; rm -rf "$tmp"' EXIT
url="postgres://bench@127.0.0.1:$port/postgres?sslmode=disable"
for ((i = 0; i < 600; i++)); do "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U bench -d postgres && break; sleep 0.05; done
psql() { command psql -X -q -v ON_ERROR_STOP=1 "$url" "$@"; }
# utime + stime + cutime + cstime of the postmaster, in clock ticks.
cpu_ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$pgpid/stat"; }
psql -c 'CREATE EXTENSION pg_stat_statements'

for sys in "${systems[@]}"; do
	# A first, unmeasured run creates the schemas (migrations) so the
	# measured one counts only the jobs' work.
	"$bench" -mode quick -pg-url "$url" -systems "$sys" -only "$only" -runs 1 -burn-sizes 1000 -out '' \
		"${extra[@]}" >/dev/null 2>&1 || true
	psql -c 'VACUUM ANALYZE' -c 'CHECKPOINT'
	psql -c "SELECT pg_stat_statements_reset(), pg_stat_reset(), pg_stat_reset_shared('wal')" >/dev/null
	lsn0=$(psql -At -c 'SELECT pg_current_wal_lsn()')
	load0=$(cut -d' ' -f1-3 /proc/loadavg)
	t0=$(date -u +%H:%M:%S)
	# PGCOST_SAMPLE=1: what the client backends wait on, sampled every
	# 50 ms during the run (one line per active backend per sample). Each
	# sample is a connection of its own, whose CPU the server's includes.
	: >"$tmp/waits"
	sampler=
	if [[ ${PGCOST_SAMPLE:-} == 1 ]]; then
		(while :; do
			command psql -X -At "$url" -c "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
				WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_backend_pid()" 2>/dev/null
			sleep 0.05
		done >"$tmp/waits") &
		sampler=$!
	fi
	# CPU: the server's (the postmaster's own and its exited children's:
	# the bench's connections end when it exits, autovacuum workers when
	# done) and the bench program's, in clock ticks.
	srv0=$(cpu_ticks)
	out=$(/usr/bin/time -f 'client-cpu %U %S' "$bench" -mode quick -pg-url "$url" -systems "$sys" -only "$only" -runs 1 -burn-sizes "$n" \
		-burn-limit 10m -out '' "${extra[@]}" 2>&1) || { [[ -n $sampler ]] && kill $sampler; echo "$out"; exit 1; }
	if [[ -n $sampler ]]; then
		kill $sampler
		wait $sampler 2>/dev/null || true
	fi
	sleep 1
	srv1=$(cpu_ticks)
	load1=$(cut -d' ' -f1-3 /proc/loadavg)
	echo "=== $sys, $only of $n jobs, $t0 UTC, load before $load0, after $load1"
	echo "$out" | grep -E '^\| *(jobkit|river|system|burn|batch)|jobs/s' | head -8 || true
	read -r _ cu cs <<<"$(echo "$out" | grep '^client-cpu')"
	python3 -c "import sys; n=$n; t=$(getconf CLK_TCK)
print(f'CPU per job: server {($srv1 - $srv0) / t / n * 1e6:.0f} µs, bench program {($cu + $cs) / n * 1e6:.0f} µs')"
	if [[ -n $sampler ]]; then
		echo "active client backends by wait (samples every 50 ms; their connections are in the server CPU):"
		sort "$tmp/waits" | uniq -c | sort -rn | head -6
	fi
	sleep 1 # pg_stat_wal and the table counters are flushed at most once a second
	psql -c "SELECT pg_stat_force_next_flush()" >/dev/null 2>&1 || true
	psql -v n="$n" -v lsn0="$lsn0" <<'SQL'
\pset footer off
-- The bench program's cleanup (DELETE FROM river_job / the namespace's
-- rows after the run) is left out of every figure.
WITH st AS (SELECT * FROM pg_stat_statements
	WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())),
clean AS (SELECT coalesce(sum(wal_records), 0) AS rec, coalesce(sum(wal_bytes), 0) AS b FROM st WHERE query LIKE 'DELETE FROM %')
SELECT round(sum(calls)::numeric / :n, 3) AS "calls/job",
	(SELECT round((xact_commit + xact_rollback)::numeric / :n, 3) FROM pg_stat_database WHERE datname = current_database()) AS "xacts/job",
	round(sum(shared_blks_hit + shared_blks_read)::numeric / :n, 1) AS "buffers/job",
	round(sum(wal_records)::numeric / :n, 1) AS "stmt WAL rec/job",
	round(sum(wal_bytes)::numeric / :n, 0) AS "stmt WAL B/job",
	round(sum(total_exec_time)::numeric * 1000 / :n, 0) AS "server µs/job",
	round(sum(total_plan_time)::numeric * 1000 / :n, 0) AS "plan µs/job",
	(SELECT round((wal_records - clean.rec)::numeric / :n, 1) FROM pg_stat_wal, clean) AS "server WAL rec/job",
	(SELECT round((wal_bytes - clean.b)::numeric / :n, 0) FROM pg_stat_wal, clean) AS "server WAL B/job",
	(SELECT round((pg_wal_lsn_diff(pg_current_wal_lsn(), :'lsn0') - clean.b) / :n, 0) FROM clean) AS "LSN B/job"
FROM st WHERE query NOT LIKE 'DELETE FROM %';
SELECT relname, round((n_tup_ins)::numeric / :n, 2) AS ins, round(n_tup_upd::numeric / :n, 2) AS upd,
	round(n_tup_hot_upd::numeric / :n, 2) AS hot, round(n_tup_del::numeric / :n, 2) AS "del (cleanup included)"
FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd > 0 ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC LIMIT 8;
SELECT round(calls::numeric / :n, 4) AS "calls/job", round((shared_blks_hit + shared_blks_read)::numeric / :n, 1) AS "buf/job",
	round(wal_records::numeric / :n, 2) AS "WAL rec/job", round(wal_bytes::numeric / :n, 0) AS "WAL B/job",
	round(rows::numeric / greatest(calls, 1), 1) AS "rows/call", round(total_exec_time::numeric * 1000 / :n, 0) AS "µs/job",
	round(plans::numeric / :n, 4) AS "plans/job", round(total_plan_time::numeric * 1000 / :n, 0) AS "plan µs/job",
	left(regexp_replace(query, '\s+', ' ', 'g'), 70) AS statement
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY wal_bytes + shared_blks_hit DESC LIMIT 8;
-- The statements each job pays for most often (read-only ones included:
-- each outside a transaction is one).
SELECT round(calls::numeric / :n, 4) AS "calls/job", round(rows::numeric / greatest(calls, 1), 1) AS "rows/call",
	round(total_exec_time::numeric * 1000 / :n, 0) AS "µs/job", left(regexp_replace(query, '\s+', ' ', 'g'), 90) AS statement
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY calls DESC LIMIT 10;
SQL
done
