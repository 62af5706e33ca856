"""Logical replication: a FOR ALL TABLES publication carries tsmove.job.

The documented way (README, "Logical replication"): install pg_tsmove on
the subscriber too (pg_dump --schema-only does, with CREATE EXTENSION).  A
REPLICA trigger there discards the publisher's job rows, so replication
keeps running, the subscriber's own job table holds only its own jobs, and
both sides can move relations while replication runs.
"""

import time

import pytest

from moves import start_move, tablespace_of, wait_for, wait_job

SCALE = 5


def subscription_caught_up(publisher, subscriber):
    """True once the subscriber has applied everything the publisher wrote."""
    target = publisher.sql_scalar("SELECT pg_current_wal_lsn()")
    return subscriber.sql_scalar(
        "SELECT bool_and(latest_end_lsn >= %s::pg_lsn) FROM pg_stat_subscription",
        (target,))


def table_hashes(cluster):
    return {table: cluster.row_hash(table, order)
            for table, order in (("pgbench_accounts", "aid"), ("pgbench_branches", "bid"),
                                 ("pgbench_tellers", "tid"),
                                 ("pgbench_history", "tid, bid, aid, mtime, delta"))}


@pytest.mark.pg_conf("wal_level = logical")
def test_move_on_a_publisher_for_all_tables(primary, clusters):
    subscriber = clusters.new("subscriber")
    subscriber.create_tablespace("ts_b")
    subscriber.sql("CREATE EXTENSION pg_tsmove")
    primary.pgbench_init(SCALE, extra_args=["--tablespace=ts_a", "--index-tablespace=ts_a"])
    subscriber.pgbench_init(SCALE, extra_args=["-I", "dtp"])   # tables and keys, no rows

    primary.sql("CREATE PUBLICATION everything FOR ALL TABLES")
    assert primary.sql_scalar("SELECT count(*) FROM pg_publication_tables "
                              "WHERE schemaname = 'tsmove' AND tablename = 'job'") == 1
    subscriber.sql("CREATE SUBSCRIPTION from_primary CONNECTION '%s' PUBLICATION everything"
                   % primary.conninfo())
    wait_for(lambda: subscriber.sql_scalar(
        "SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate <> 'r'"),
        60, what="the initial table synchronisation")

    # moves on the publisher under load, one on the subscriber meanwhile
    bench = primary.pgbench_run_background(clients=2, jobs=2, seconds=12)
    time.sleep(1)
    job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=16, with_indexes=True)
    own = start_move(subscriber, "pgbench_tellers", "ts_b", max_rate_mb=0)
    assert wait_job(subscriber, own, 60) == "done"
    for each in [job] + [r[0] for r in primary.sql(
            "SELECT job_id FROM tsmove.job WHERE parent_job = %s", (job,))]:
        assert wait_job(primary, each, 60) == "done"
    result = bench.wait()
    assert result.failed_transactions == 0
    again = start_move(primary, "pgbench_branches", "ts_b", max_rate_mb=0)
    assert wait_job(primary, again, 60) == "done"

    wait_for(lambda: subscription_caught_up(primary, subscriber), 60,
             what="the subscriber to catch up")
    assert subscriber.sql_scalar("SELECT count(*) FROM pg_stat_subscription "
                                 "WHERE pid IS NOT NULL") >= 1
    assert table_hashes(subscriber) == table_hashes(primary)
    assert primary.balance_invariant() == [] and subscriber.balance_invariant() == []
    # the subscriber's job table holds its own job only
    assert subscriber.sql("SELECT job_id, relname, state FROM tsmove.job") == \
        [(own, "public.pgbench_tellers", "done")]
    assert "could not" not in "".join(
        line for line in subscriber.log_contents().splitlines() if "ERROR" in line)
    assert tablespace_of(primary, "pgbench_accounts") == "ts_b"
    assert tablespace_of(subscriber, "pgbench_accounts") == "pg_default"
    assert primary.amcheck() == [] and subscriber.amcheck() == []
    assert primary.orphan_files() == [] and subscriber.orphan_files() == []
