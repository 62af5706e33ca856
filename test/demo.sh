#!/bin/bash
# pg_tsmove demo:  sudo bash test/demo.sh
#
# Builds and installs the extension, creates a throwaway cluster under /tmp
# (pg_tsmove preloaded, tablespaces ts_a on a "fast" and ts_b on a "slow"
# directory), loads pgbench at scale 20 into ts_a, and while 4 pgbench
# clients run, moves pgbench_accounts to ts_b with tsmove.move(), showing
# tsmove.jobs every second.  Then prints pgbench's result, the TPC-B balance
# check and where the table's files are.  The cluster is removed on exit,
# whether the move succeeded or not.
#
# Environment: DEMO_SCALE (20), DEMO_SECONDS of pgbench (60), DEMO_RATE_MB
# (max_rate_mb of the move; default pg_tsmove.max_rate_mb).

set -u
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_DIR/test/install_deps.sh"
PG_BIN=$("$PG_CONFIG" --bindir)
SCALE=${DEMO_SCALE:-20}
SECONDS_OF_LOAD=${DEMO_SECONDS:-60}
RATE=${DEMO_RATE_MB:-NULL}

install_deps "$REPO_DIR" || exit 1
make -C "$REPO_DIR" PG_CONFIG="$PG_CONFIG" >/dev/null \
    && make -C "$REPO_DIR" install PG_CONFIG="$PG_CONFIG" >/dev/null \
    || { echo "demo: building pg_tsmove failed" >&2; exit 1; }

DEMO_DIR=$(mktemp -d /tmp/pg_tsmove_demo.XXXXXX)
DATA=$DEMO_DIR/data
SOCK=$DEMO_DIR/sock
PORT=5499
PGBENCH_PID=

as_postgres() { runuser -u postgres -- "$@"; }
psql_demo() { "$PG_BIN/psql" -X -q -h "$SOCK" -p "$PORT" -U postgres -d postgres "$@"; }

cleanup() {
    if [ -n "$PGBENCH_PID" ] && kill -0 "$PGBENCH_PID" 2>/dev/null; then
        kill "$PGBENCH_PID"
        wait "$PGBENCH_PID" 2>/dev/null
    fi
    if [ -f "$DATA/postmaster.pid" ]; then
        as_postgres "$PG_BIN/pg_ctl" stop -D "$DATA" -m immediate -w >/dev/null
    fi
    rm -rf "$DEMO_DIR"
    echo "demo: cluster stopped and $DEMO_DIR removed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$SOCK" "$DEMO_DIR/fast" "$DEMO_DIR/slow"
chown -R postgres:postgres "$DEMO_DIR"
as_postgres "$PG_BIN/initdb" -D "$DATA" -A trust -U postgres --no-sync >/dev/null || exit 1
cat >> "$DATA/postgresql.conf" <<EOF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$SOCK'
shared_preload_libraries = 'pg_tsmove'
wal_level = replica
max_worker_processes = 16
EOF
as_postgres "$PG_BIN/pg_ctl" start -D "$DATA" -l "$DEMO_DIR/server.log" -w >/dev/null \
    || { cat "$DEMO_DIR/server.log"; exit 1; }

psql_demo -v ON_ERROR_STOP=1 <<EOF || exit 1
CREATE TABLESPACE ts_a LOCATION '$DEMO_DIR/fast';
CREATE TABLESPACE ts_b LOCATION '$DEMO_DIR/slow';
CREATE EXTENSION pg_tsmove;
EOF
echo "demo: loading pgbench scale $SCALE into ts_a"
"$PG_BIN/pgbench" -i -q -s "$SCALE" --tablespace=ts_a --index-tablespace=ts_a \
    -h "$SOCK" -p "$PORT" -U postgres postgres 2>&1 | tail -1
psql_demo -c "SELECT pg_size_pretty(pg_relation_size('pgbench_accounts')) AS pgbench_accounts_size"

# -n: no pre-run TRUNCATE of pgbench_history, which the balance check needs.
"$PG_BIN/pgbench" -n -c 4 -j 2 -T "$SECONDS_OF_LOAD" -P 5 \
    -h "$SOCK" -p "$PORT" -U postgres postgres > "$DEMO_DIR/pgbench.out" 2>&1 &
PGBENCH_PID=$!
sleep 2

echo "demo: SELECT tsmove.move('pgbench_accounts', 'ts_b', max_rate_mb => $RATE)"
if JOB=$(psql_demo -At -v ON_ERROR_STOP=1 \
         -c "SELECT tsmove.move('pgbench_accounts', 'ts_b', max_rate_mb => $RATE)" 2>&1); then
    lines='1,3p'            # the column header, then only the row
    while :; do
        psql_demo -c "SELECT job_id, state, blocks_copied, blocks_total,
                             blocks_recopied, dirty_backlog,
                             round(rate_mb_s::numeric, 1) AS rate_mb_s,
                             eta, round(lock_wait_ms::numeric, 1) AS lock_wait_ms,
                             round(switch_ms::numeric, 1) AS switch_ms
                      FROM tsmove.jobs WHERE job_id = $JOB" | sed -n "$lines"
        lines='3p'
        STATE=$(psql_demo -At -c "SELECT state FROM tsmove.jobs WHERE job_id = $JOB")
        case $STATE in done|failed|cancelled|'') break ;; esac
        sleep 1
    done
    echo "demo: job $JOB ended: ${STATE:-vanished}"
    psql_demo -c "SELECT error FROM tsmove.jobs WHERE job_id = $JOB AND error IS NOT NULL"
else
    echo "demo: tsmove.move failed: $JOB"
fi

echo "demo: waiting for pgbench (-T $SECONDS_OF_LOAD) to finish"
wait "$PGBENCH_PID"
pgbench_rc=$?
PGBENCH_PID=
grep -E '^(tps|number of (transactions actually processed|failed transactions)|latency average)' \
    "$DEMO_DIR/pgbench.out"
[ $pgbench_rc -eq 0 ] || { echo "demo: pgbench exited with $pgbench_rc:"; tail -5 "$DEMO_DIR/pgbench.out"; }

psql_demo -c "
SELECT (SELECT sum(abalance) FROM pgbench_accounts) AS accounts,
       (SELECT sum(bbalance) FROM pgbench_branches) AS branches,
       (SELECT sum(tbalance) FROM pgbench_tellers) AS tellers,
       (SELECT sum(delta) FROM pgbench_history) AS history,
       (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(delta) FROM pgbench_history)
   AND (SELECT sum(bbalance) FROM pgbench_branches) = (SELECT sum(delta) FROM pgbench_history)
   AND (SELECT sum(tbalance) FROM pgbench_tellers) = (SELECT sum(delta) FROM pgbench_history)
       AS balances_agree"
psql_demo -c "
SELECT c.relname, coalesce(t.spcname, 'pg_default') AS tablespace,
       pg_relation_filepath(c.oid) AS file
FROM pg_class c LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname IN ('pgbench_accounts', 'pgbench_accounts_pkey')"
