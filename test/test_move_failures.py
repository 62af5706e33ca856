"""Moves that do not finish: crash, cancel, DROP, refusals that need a
cluster of their own.  After each: the table intact and in exactly one
tablespace, no orphan file, the job says what happened, moving again works.
"""

import threading
import time

import psycopg
import pytest

from moves import (assert_moved_cleanly, job_row, start_move, tablespace_of,
                   wait_for, wait_for_state, wait_job)


def make_table(cluster, rows=200000):
    """A table of about 30 MB in ts_a, with an index and TOASTed rows."""
    cluster.sql("""
        CREATE TABLE victim (id int PRIMARY KEY, pad text, doc text) TABLESPACE ts_a;
        INSERT INTO victim SELECT g, repeat('v', 100),
            CASE WHEN g %% 1000 = 0 THEN (SELECT string_agg(md5(g::text || i), '')
                                         FROM generate_series(1, 150) i) END
        FROM generate_series(1, %d) g""" % rows)
    return cluster.row_hash("victim", "id")


def move_victim_while_copying(cluster, max_rate_mb=4, **move_args):
    """Start a throttled move of victim to ts_b and return its job id once
    it is copying: the moment most failure tests interrupt."""
    job = start_move(cluster, "victim", "ts_b", max_rate_mb=max_rate_mb, **move_args)
    wait_for_state(cluster, job, ("copying",), 30)
    return job


def assert_intact_in(cluster, tablespace, expected_hash):
    assert cluster.row_hash("victim", "id") == expected_hash
    assert tablespace_of(cluster, "victim") == tablespace
    assert list(cluster.relation_files("victim")) == [tablespace]
    assert cluster.amcheck(relations=["victim"]) == []
    assert cluster.orphan_files() == []


def move_again_succeeds(cluster, expected_hash):
    job = start_move(cluster, "victim", "ts_b", max_rate_mb=0)
    assert wait_job(cluster, job, 120) == "done", job_row(cluster, job)
    assert cluster.row_hash("victim", "id") == expected_hash
    assert_moved_cleanly(cluster, "victim", "ts_b")


@pytest.mark.parametrize("phase", ["copying", "catching_up"])
def test_crash_mid_move(primary, phase):
    """kill -9 of the postmaster while copying, or while catching up (a
    reader holds the lock the switch needs); after restart the launcher's
    recovery removes the new files and marks the job failed."""
    expected = make_table(primary)
    blocker = None
    if phase == "catching_up":
        blocker = primary.conn(autocommit=False)
        blocker.execute("SELECT count(*) FROM victim")
        job = start_move(primary, "victim", "ts_b", max_rate_mb=0)
        wait_for(lambda: job_row(primary, job)["switch_attempts"] >= 2, 60,
                 what="failed switch attempts")
    else:
        job = start_move(primary, "victim", "ts_b", max_rate_mb=4)
        wait_for(lambda: (lambda r: r["state"] == "copying"
                          and r["blocks_copied"] > 50)(job_row(primary, job)),
                 60, what="copying")
    # the new file exists now, in ts_b
    assert "ts_b" in primary.sql_scalar(
        "SELECT string_agg(spcname, ',') FROM tsmove.job j "
        "JOIN pg_tablespace t ON t.oid = j.target_tablespace WHERE job_id = %s", (job,))
    primary.kill9()
    if blocker is not None:
        blocker.close()
    primary.start()

    row = wait_for_state(primary, job, ("failed",), 30)
    assert "interrupted by a server crash" in row["error"]
    assert_intact_in(primary, "ts_a", expected)
    move_again_succeeds(primary, expected)


def test_cancel_mid_copy(primary):
    expected = make_table(primary)
    job = move_victim_while_copying(primary)
    time.sleep(0.5)
    assert primary.sql_scalar("SELECT tsmove.cancel(%s)", (job,)) is True
    assert wait_job(primary, job, 30) == "cancelled"
    row = job_row(primary, job)
    assert row["error"] == "move cancelled by tsmove.cancel()"
    assert 0 < row["blocks_copied"] < row["blocks_total"]
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 0
    assert_intact_in(primary, "ts_a", expected)
    move_again_succeeds(primary, expected)


def test_terminated_worker_cleans_up(primary):
    """pg_terminate_backend() of the worker ends the job like a cancel."""
    expected = make_table(primary)
    job = move_victim_while_copying(primary)
    pid = primary.sql_scalar("SELECT pid FROM tsmove.jobs WHERE job_id = %s", (job,))
    primary.sql("SELECT pg_terminate_backend(%s)", (pid,))
    assert wait_job(primary, job, 30) == "failed"
    assert "pg_terminate_backend" in job_row(primary, job)["error"]
    assert_intact_in(primary, "ts_a", expected)


def drop_in_background(cluster, statement="DROP TABLE victim"):
    """Run statement in a thread; returns (thread, event set when done)."""
    done = threading.Event()

    def run():
        with cluster.conn() as conn:
            conn.execute(statement)
        done.set()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def test_drop_table_cancels_the_move(primary):
    """pg_tsmove.yield_to_ddl (default on): a DROP TABLE that waits for the
    move's session lock makes the move cancel itself, so neither the DROP
    nor the queries queued behind it wait for the rest of the copy."""
    make_table(primary)
    job = move_victim_while_copying(primary)
    started = time.monotonic()
    thread, dropped = drop_in_background(primary)
    assert wait_job(primary, job, 30) == "cancelled"
    thread.join(30)
    assert dropped.is_set() and time.monotonic() - started < 5
    row = job_row(primary, job)
    assert row["error"] == 'move cancelled: another session waits for a lock on "public.victim"'
    assert primary.sql_scalar("SELECT to_regclass('victim')") is None
    assert primary.orphan_files() == []


@pytest.mark.pg_conf("pg_tsmove.yield_to_ddl = off")
def test_drop_table_waits_for_the_move(primary):
    """With yield_to_ddl off, DROP TABLE waits for the move; the move still
    switches (the waiting DROP does not block its exclusive lock, which it
    requests while holding a conflicting lock) and then the DROP removes the
    new files: nothing is left anywhere."""
    make_table(primary)
    job = move_victim_while_copying(primary, max_rate_mb=16)
    thread, dropped = drop_in_background(primary)
    time.sleep(0.5)
    assert not dropped.is_set(), "DROP TABLE did not wait for the move"
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    thread.join(30)
    assert dropped.is_set()
    assert primary.sql_scalar("SELECT to_regclass('victim')") is None
    assert primary.orphan_files() == []


def test_truncate_cancels_the_move_and_data_stays_right(primary):
    """TRUNCATE would give the relation a new relfilenode: it waits, the
    move yields, the TRUNCATE runs; the table is empty, in ts_a, intact."""
    make_table(primary)
    job = move_victim_while_copying(primary)
    thread, done = drop_in_background(primary, "TRUNCATE victim")
    assert wait_job(primary, job, 30) == "cancelled"
    thread.join(30)
    assert done.is_set()
    assert primary.sql_scalar("SELECT count(*) FROM victim") == 0
    assert tablespace_of(primary, "victim") == "ts_a"
    assert primary.amcheck(relations=["victim"]) == []
    assert primary.orphan_files() == []


def test_shutdown_mid_copy_then_restart(primary):
    """A fast shutdown stops the worker, which removes its files itself."""
    expected = make_table(primary)
    job = move_victim_while_copying(primary)
    primary.stop("fast")
    primary.start()
    row = job_row(primary, job)
    assert row["state"] == "failed"
    assert "server shutdown" in row["error"]
    assert_intact_in(primary, "ts_a", expected)


def test_wal_level_minimal_refused(clusters):
    plain = clusters.new("minimal", extra_conf=["wal_level = minimal",
                                                "max_wal_senders = 0"])
    plain.create_tablespace("ts_b")
    plain.sql("CREATE EXTENSION pg_tsmove; CREATE TABLE t (i int)")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as err:
        plain.sql("SELECT tsmove.move('t', 'ts_b')")
    assert "wal_level" in str(err.value)
    assert err.value.diag.message_hint == \
        "Set wal_level = replica in postgresql.conf and restart the server."
    assert plain.sql_scalar("SELECT count(*) FROM tsmove.job") == 0


def test_no_background_worker_slot(clusters):
    """max_worker_processes used up (launcher + logical replication
    launcher): the move waits in the queue, which says why; cancelling it
    leaves nothing behind."""
    small = clusters.new("small", extra_conf=["max_worker_processes = 2"])
    small.create_tablespace("ts_b")
    small.sql("CREATE EXTENSION pg_tsmove; CREATE TABLE t (i int)")
    wait_for(lambda: small.sql_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_tsmove launcher'"),
        10, what="the launcher")
    job = start_move(small, "t", "ts_b")
    row = wait_for(lambda: (lambda r: r if "max_worker_processes" in (r["error"] or "")
                            else None)(job_row(small, job)),
                   30, what="the queue to say why the job waits")
    assert row["state"] == "queued"
    assert small.sql_scalar("SELECT tsmove.cancel(%s)", (job,)) is True
    assert job_row(small, job)["state"] == "cancelled"
    assert tablespace_of(small, "t") == "pg_default"
    assert small.orphan_files() == []


def test_drop_extension_during_move_leaves_no_files(primary):
    """DROP EXTENSION takes the job table away from a running move: the
    switch fails, and the worker still removes the new files."""
    expected = make_table(primary, rows=60000)
    job = move_victim_while_copying(primary, max_rate_mb=8)
    primary.sql("DROP EXTENSION pg_tsmove")
    wait_for(lambda: primary.sql_scalar(
        "SELECT count(*) = 0 FROM pg_stat_activity "
        "WHERE backend_type = 'pg_tsmove worker'"), 60, what="the worker to exit")
    assert "could not record the end of job" in primary.log_contents()
    assert primary.row_hash("victim", "id") == expected
    assert tablespace_of(primary, "victim") == "ts_a"
    assert primary.orphan_files() == []


@pytest.mark.parametrize("phase, survivor", [("switching", "ts_a"), ("warming", "ts_b")])
def test_crash_at_the_switch(primary, phase, survivor):
    """kill -9 while the switch holds its exclusive lock with the catalog
    changed but not committed (the table stays where it was, the new files
    go), or just after the switch committed (the table is in its new place,
    the old files go).  pg_tsmove.debug_pause_at holds the worker there."""
    expected = make_table(primary)
    primary.sql("ALTER SYSTEM SET pg_tsmove.debug_pause_at = '%s'" % phase)
    primary.sql("SELECT pg_reload_conf()")
    time.sleep(0.3)
    job = start_move(primary, "victim", "ts_b", max_rate_mb=0)
    wait_for(lambda: "job %d pauses at %s" % (job, phase) in primary.log_contents(),
             60, what="the worker to pause at " + phase)
    primary.kill9()
    primary.start()
    primary.sql("ALTER SYSTEM RESET pg_tsmove.debug_pause_at")
    primary.sql("SELECT pg_reload_conf()")

    row = wait_for_state(primary, job, ("failed", "done"), 30)
    assert row["state"] == ("failed" if phase == "switching" else "done"), row
    assert_intact_in(primary, survivor, expected)
    if phase == "switching":
        move_again_succeeds(primary, expected)


def test_cancel_table_job_cancels_its_queued_index_jobs(primary):
    """with_indexes queues one job per index behind the table's; cancelling
    the table's job cancels them too, and nothing moves."""
    expected = make_table(primary)
    index_home = tablespace_of(primary, "victim_pkey")
    job = start_move(primary, "victim", "ts_b", max_rate_mb=4, with_indexes=True)
    index_jobs = [r[0] for r in primary.sql(
        "SELECT job_id FROM tsmove.job WHERE parent_job = %s", (job,))]
    assert len(index_jobs) == 1
    wait_for_state(primary, job, ("copying",), 30)
    assert primary.sql_scalar("SELECT tsmove.cancel(%s)", (job,)) is True
    assert wait_job(primary, job, 30) == "cancelled"
    assert wait_job(primary, index_jobs[0], 30) == "cancelled"
    assert job_row(primary, index_jobs[0])["error"] == \
        "not started: job %d, which it was queued behind, was cancelled" % job
    assert tablespace_of(primary, "victim_pkey") == index_home != "ts_b"
    assert_intact_in(primary, "ts_a", expected)
