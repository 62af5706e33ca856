"""Moves that stay out of the way (issue 9): pause and resume under load,
one byte budget for all jobs, VACUUM and autovacuum beside a move, resume
after kill -9, DDL that needs no AccessExclusiveLock, and a wait that
holds no snapshot.

Every test that moves data under load checks it afterwards: the pgbench
balance invariant, amcheck, pg_visibility's pg_check_visible(), no orphan
files, no replication slot left behind.
"""

import os
import threading
import time

import psycopg
import pytest

from moves import (assert_intact_in, assert_moved_cleanly, job_row, make_table,
                   start_move, wait_for, wait_for_state, wait_job)


def progress(cluster, job):
    """Blocks written for the job so far: the bulk copy and the re-copies."""
    row = job_row(cluster, job)
    return row["blocks_copied"] + row["blocks_recopied"]


def assert_visibility_clean(cluster, rel):
    """pg_visibility: no all-visible page holds a tuple that is not, and no
    all-frozen page one that is not frozen."""
    cluster.sql("CREATE EXTENSION IF NOT EXISTS pg_visibility")
    assert cluster.sql("SELECT * FROM pg_check_visible(%s::regclass)", (rel,)) == []
    assert cluster.sql("SELECT * FROM pg_check_frozen(%s::regclass)", (rel,)) == []


def assert_no_job_slots(cluster):
    assert cluster.sql("SELECT slot_name FROM pg_replication_slots") == []
    assert os.listdir(os.path.join(cluster.data_dir, "pg_tsmove")) == []


def assert_pgbench_data_clean(cluster):
    assert cluster.balance_invariant() == []
    assert cluster.amcheck() == []
    assert_visibility_clean(cluster, "pgbench_accounts")
    assert cluster.orphan_files() == []


@pytest.mark.pg_conf("pg_tsmove.pacing = fixed")
def test_pause_and_resume_under_load(primary):
    """A paused job copies nothing while pgbench runs, shows 'paused', keeps
    little WAL; resumed, it goes on and finishes with the data intact."""
    primary.pgbench_init(10, extra_args=["--tablespace=ts_a"])
    bench = primary.pgbench_run_background(clients=4, jobs=2, seconds=30)
    job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=8)
    wait_for(lambda: job_row(primary, job)["blocks_copied"] > 100, 60,
             what="some blocks copied")
    assert primary.sql_scalar("SELECT tsmove.pause(%s)", (job,)) is True
    wait_for_state(primary, job, ("paused",), 10)
    # wait() returns: a paused job cannot progress
    assert wait_job(primary, job, 60) == "paused"

    held = progress(primary, job)
    time.sleep(3)
    assert progress(primary, job) == held, "blocks were copied while paused"
    retained = primary.sql_scalar(
        "SELECT wal_retained_bytes FROM tsmove.jobs WHERE job_id = %s", (job,))
    assert retained is not None and retained < 256 * 1024 * 1024
    assert job_row(primary, job)["dirty_backlog"] > 0, \
        "the paused job should still follow the writes"

    assert primary.sql_scalar("SELECT tsmove.resume(%s)", (job,)) is True
    wait_for(lambda: progress(primary, job) > held, 30, what="progress after resume")
    assert primary.sql_scalar("SELECT tsmove.set_rate(%s, 0)", (job,)) is True
    assert wait_job(primary, job, 300) == "done", job_row(primary, job)
    bench.wait()
    assert "job %d paused" % job in primary.log_contents()
    assert_moved_cleanly(primary, "pgbench_accounts", "ts_b")
    assert_pgbench_data_clean(primary)
    assert_no_job_slots(primary)


@pytest.mark.pg_conf("pg_tsmove.pacing = fixed", "pg_tsmove.total_max_rate_mb = 4",
                     "pg_tsmove.max_workers = 2")
def test_total_budget_caps_the_sum_of_jobs(primary):
    """Two unthrottled jobs share pg_tsmove.total_max_rate_mb: no 5 s window
    of their summed bytes (pages and WAL) is above it."""
    for name in ("budget_a", "budget_b"):
        primary.sql("CREATE TABLE %s TABLESPACE ts_a AS SELECT g AS id, "
                    "repeat('x', 200) AS pad FROM generate_series(1, 150000) g" % name)
    hashes = {name: primary.row_hash(name, "id") for name in ("budget_a", "budget_b")}
    jobs = [start_move(primary, name, "ts_b", max_rate_mb=0)
            for name in ("budget_a", "budget_b")]
    wait_for(lambda: all(job_row(primary, j)["state"] == "copying" for j in jobs), 30,
             what="both jobs copying")

    def written():
        return primary.sql_scalar(
            "SELECT sum(bytes_written + wal_bytes)::bigint FROM tsmove.jobs "
            "WHERE job_id = ANY(%s)", (jobs,))

    samples = []
    start = time.monotonic()
    while time.monotonic() - start < 16:
        samples.append((time.monotonic(), written()))
        time.sleep(0.5)
    assert all(job_row(primary, j)["state"] in ("copying", "catching_up") for j in jobs), \
        "both jobs should still run: the budget holds them back"
    limit = 4 * 1024 * 1024
    worst = 0
    for i, (t0, b0) in enumerate(samples):
        for t1, b1 in samples[i + 1:]:
            if t1 - t0 >= 5:
                worst = max(worst, (b1 - b0) / (t1 - t0))
                break
    # slack: each worker charges after writing, up to a 256 kB chunk at each
    # window edge, and the view's counters lag by up to 200 ms (4 % of 5 s);
    # unthrottled, the two jobs write well over 10 times the budget
    slack = 2 * 256 * 1024 / 5 + limit * 0.2 / 5
    assert 0 < worst <= limit + slack, "%.2f MB/s" % (worst / 1048576)
    assert worst > limit * 0.6, "the jobs ran well below the budget: %.2f MB/s" % (
        worst / 1048576)

    primary.sql("ALTER SYSTEM SET pg_tsmove.total_max_rate_mb = 0")
    primary.sql("SELECT pg_reload_conf()")
    for job, name in zip(jobs, ("budget_a", "budget_b")):
        assert wait_job(primary, job, 120) == "done", job_row(primary, job)
        assert primary.row_hash(name, "id") == hashes[name]
        assert_moved_cleanly(primary, name, "ts_b")


@pytest.mark.pg_conf("pg_tsmove.pacing = fixed", "autovacuum_naptime = 1",
                     "autovacuum_vacuum_scale_factor = 0",
                     "autovacuum_vacuum_threshold = 500",
                     "autovacuum_vacuum_cost_delay = 0",
                     "log_autovacuum_min_duration = 0")
def test_vacuum_and_autovacuum_run_beside_a_move(primary):
    """VACUUM and autovacuum of the table being moved run and remove dead
    tuples while the move copies; the moved table is sound afterwards."""
    primary.pgbench_init(10, extra_args=["--tablespace=ts_a"])
    bench = primary.pgbench_run_background(clients=4, jobs=2, seconds=40)
    job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=4)
    wait_for_state(primary, job, ("copying",), 30)

    def vacuum_stats():
        return primary.sql("SELECT vacuum_count, autovacuum_count FROM "
                           "pg_stat_user_tables WHERE relname = 'pgbench_accounts'")[0]

    before = vacuum_stats()
    started = time.monotonic()
    primary.sql("VACUUM (VERBOSE) pgbench_accounts")
    assert time.monotonic() - started < 60
    assert job_row(primary, job)["state"] in ("copying", "catching_up"), \
        "VACUUM should have run while the move copied"
    wait_for(lambda: vacuum_stats()[1] > before[1], 60, interval_s=0.5,
             what="an autovacuum of pgbench_accounts during the move")
    assert vacuum_stats()[0] > before[0]
    assert job_row(primary, job)["state"] in ("copying", "catching_up")
    log = primary.log_contents()
    assert "automatic vacuum of table \"postgres.public.pgbench_accounts\"" in log

    bench.wait()
    primary.sql("SELECT tsmove.set_rate(%s, 0)", (job,))
    assert wait_job(primary, job, 300) == "done", job_row(primary, job)
    assert_moved_cleanly(primary, "pgbench_accounts", "ts_b")
    assert_pgbench_data_clean(primary)
    # vacuum after the move finds the moved pages sound too
    primary.sql("VACUUM pgbench_accounts")
    assert_visibility_clean(primary, "pgbench_accounts")


def resume_job_at_half(primary, resume_on):
    """Move pgbench_accounts under pgbench, kill -9 the server at half the
    copy, restart.  Returns (job, blocks copied before the kill)."""
    primary.sql("ALTER SYSTEM SET pg_tsmove.resume_after_restart = %s"
                % ("on" if resume_on else "off"))
    primary.sql("ALTER SYSTEM SET pg_tsmove.resume_interval = '1s'")
    primary.sql("ALTER SYSTEM SET pg_tsmove.pacing = fixed")
    primary.sql("SELECT pg_reload_conf()")
    primary.pgbench_init(20, extra_args=["--tablespace=ts_a"])
    bench = primary.pgbench_run_background(clients=2, jobs=1, seconds=20)
    job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=24)
    half = wait_for(lambda: (lambda r: r if r["blocks_copied"] >= r["blocks_total"] // 2
                             else None)(job_row(primary, job)), 120,
                    what="half of the copy")
    time.sleep(1.5)        # a resume point past the half
    primary.kill9()
    try:
        bench.wait()
    except Exception:
        pass               # its connections died with the server
    primary.start()
    return job, half["blocks_copied"]


@pytest.mark.matrix
def test_resume_after_kill9(primary):
    """kill -9 at half of a move under pgbench: after restart the move goes
    on from its last resume point, not from block 0, and finishes; the data
    are intact and nothing is left behind."""
    job, copied_before = resume_job_at_half(primary, resume_on=True)
    # the recovery pass queues it again; the view never shows it back at 0
    seen = []

    def resumed():
        row = job_row(primary, job)
        if row["state"] not in ("queued", "preparing"):
            seen.append(row["blocks_copied"])
        return row["state"] in ("copying", "catching_up", "switching", "warming", "done")

    wait_for(resumed, 60, interval_s=0.02, what="the job to resume")
    assert primary.sql_scalar("SELECT restarts FROM tsmove.job WHERE job_id = %s",
                              (job,)) == 1
    assert min(seen) >= copied_before // 2, (seen[:5], copied_before)
    # the worker may show "copying" a moment before its LOG line reaches the file
    wait_for(lambda: "resumes the move of \"public.pgbench_accounts\""
             in primary.log_contents(), 10, what="the resume's LOG line")
    bench = primary.pgbench_run_background(clients=2, jobs=1, seconds=8)
    assert wait_job(primary, job, 300) == "done", job_row(primary, job)
    bench.wait()
    assert_moved_cleanly(primary, "pgbench_accounts", "ts_b")
    assert_pgbench_data_clean(primary)
    assert_no_job_slots(primary)


def test_no_resume_after_kill9_when_off(primary):
    """With pg_tsmove.resume_after_restart off, the interrupted move's new
    files, slot and resume point are removed and the job fails."""
    job, _ = resume_job_at_half(primary, resume_on=False)
    row = wait_for_state(primary, job, ("failed",), 30)
    assert "resume_after_restart is off" in row["error"]
    assert primary.sql_scalar("SELECT tablespace FROM pg_tables "
                              "WHERE tablename = 'pgbench_accounts'") == "ts_a"
    assert_pgbench_data_clean(primary)
    assert_no_job_slots(primary)


def test_cancel_and_drop_extension_of_jobs_waiting_to_resume(primary):
    """A job queued to resume that no worker takes yet: cancel() removes its
    files, slot and resume point; a second one is left when pg_tsmove is
    dropped, and the next start-up's recovery removes what it left."""
    expected = make_table(primary)
    primary.sql("CREATE TABLE second TABLESPACE ts_a AS SELECT g AS id, "
                "repeat('s', 300) AS pad FROM generate_series(1, 100000) g")
    second_hash = primary.row_hash("second", "id")
    primary.sql("ALTER SYSTEM SET pg_tsmove.pacing = fixed")
    primary.sql("SELECT pg_reload_conf()")
    jobs = [start_move(primary, "victim", "ts_b", max_rate_mb=2),
            start_move(primary, "second", "ts_b", max_rate_mb=2)]
    for job in jobs:
        wait_for(lambda: job_row(primary, job)["blocks_copied"] > 20, 30,
                 what="copying")
    primary.kill9()
    primary.append_conf(["pg_tsmove.max_workers = 0"])
    primary.start()
    for job in jobs:
        wait_for_state(primary, job, ("queued",), 30)
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 2

    assert primary.sql_scalar("SELECT tsmove.cancel(%s)", (jobs[0],)) is True
    row = job_row(primary, jobs[0])
    assert row["state"] == "cancelled"
    assert "waited to resume" in row["error"]
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 1
    assert primary.row_hash("victim", "id") == expected
    assert list(primary.relation_files("victim")) == ["ts_a"]
    assert primary.amcheck(relations=["victim"]) == []
    # the only files of no relation are the waiting job's
    waiting = primary.sql("SELECT unnest(new_relfilenodes)::bigint FROM tsmove.job "
                          "WHERE job_id = %s", (jobs[1],))
    orphans = primary.orphan_files()
    assert len(orphans) == len(waiting) and all(
        any("filenode %d " % node in o for o in orphans) for (node,) in waiting), orphans

    primary.sql("DROP EXTENSION pg_tsmove")
    primary.restart()
    wait_for(lambda: primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 0,
             30, what="the orphan slot to be dropped")
    assert primary.row_hash("second", "id") == second_hash
    assert primary.orphan_files() == []
    assert os.listdir(os.path.join(primary.data_dir, "pg_tsmove")) == []


def test_concurrent_index_ddl_makes_the_move_yield(primary):
    """REINDEX CONCURRENTLY and DROP INDEX CONCURRENTLY drop the old index
    under AccessExclusiveLock at their end (its deletion lock, index_drop's
    last step), which conflicts with the move's AccessShareLock: with
    yield_to_ddl the move of that index gives way and leaves nothing."""
    expected = make_table(primary)
    primary.sql("CREATE INDEX victim_pad ON victim (pad, id) TABLESPACE ts_a")
    for statement in ("REINDEX INDEX CONCURRENTLY victim_pad",
                      "DROP INDEX CONCURRENTLY victim_pad"):
        job = start_move(primary, "victim_pad", "ts_b", max_rate_mb=1)
        wait_for_state(primary, job, ("copying",), 30)
        primary.sql(statement)
        assert wait_job(primary, job, 60) == "cancelled", statement
        assert "another session waits for a lock" in job_row(primary, job)["error"]
        assert_intact_in(primary, "ts_a", expected)
        assert_no_job_slots(primary)
    assert primary.sql_scalar("SELECT count(*) FROM pg_indexes "
                              "WHERE indexname = 'victim_pad'") == 0


def test_ddl_without_access_exclusive_runs_beside_a_move(primary):
    """ANALYZE, CREATE INDEX CONCURRENTLY and VACUUM do not wait for an
    online move, nor make it yield."""
    expected = make_table(primary)
    job = start_move(primary, "victim", "ts_b", max_rate_mb=2)
    wait_for_state(primary, job, ("copying",), 30)
    with primary.conn() as conn:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute("ANALYZE victim")
        conn.execute("CREATE INDEX CONCURRENTLY victim_pad ON victim (pad)")
        conn.execute("VACUUM victim")
    assert job_row(primary, job)["state"] in ("copying", "catching_up")
    primary.sql("SELECT tsmove.set_rate(%s, 0)", (job,))
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert primary.row_hash("victim", "id") == expected
    assert_moved_cleanly(primary, "victim", "ts_b")


def test_quiesce_move_runs_at_its_ceiling_under_adaptive_pacing(primary):
    """A quiesce move's lock holds the writers of its table for the whole
    copy whatever its pace, so adaptive pacing, which would slow the copy
    for the other sessions' sake, would only make those writers wait
    longer: it runs at its ceiling, and the view shows no pace."""
    expected = make_table(primary)
    primary.pgbench_init(5)
    bench = primary.pgbench_run_background(clients=2, jobs=2, seconds=30)
    time.sleep(2)
    job = start_move(primary, "victim", "ts_b", mode="quiesce", max_rate_mb=8)
    wait_for_state(primary, job, ("copying",), 30)
    samples = []
    while True:
        row = primary.sql("SELECT state, pace_mb_s, rate_mb_s FROM tsmove.jobs "
                          "WHERE job_id = %s", (job,))[0]
        if row[0] != "copying":
            break
        samples.append(row)
        time.sleep(0.2)
    assert wait_job(primary, job, 60) == "done", job_row(primary, job)
    result = bench.wait()
    assert len(samples) >= 5, samples          # 30 MB at 8 MB/s: about 4 s
    assert all(pace is None for _, pace, _ in samples), samples
    assert max(rate for _, _, rate in samples if rate is not None) > 4, samples
    assert result.failed_transactions == 0
    assert_pgbench_data_clean(primary)
    assert_intact_in(primary, "ts_b", expected)


class Waiter(threading.Thread):
    """One waiting statement in a session of its own; keeps its rows, or
    the SQLSTATE it ended with."""

    def __init__(self, cluster, statement, job):
        super().__init__(daemon=True)
        self.conn = cluster.conn()
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.statement, self.job = statement, job
        self.rows, self.sqlstate = None, None

    def run(self):
        try:
            self.rows = self.conn.execute(self.statement, (self.job,)).fetchall()
        except psycopg.Error as error:
            self.sqlstate = error.sqlstate
        self.conn.close()


def dead_rows_vacuum_leaves(cluster):
    """Update every row of churn, commit, VACUUM it: the dead row versions
    VACUUM had to keep, because some snapshot may still see them."""
    cluster.sql("UPDATE churn SET v = v + 1")
    time.sleep(0.2)
    cluster.sql("VACUUM churn")
    return cluster.sql_scalar("SELECT n_dead_tup FROM pg_stat_user_tables "
                              "WHERE relname = 'churn'")


@pytest.mark.pg_conf("pg_tsmove.pacing = fixed")
def test_wait_for_holds_no_snapshot_while_it_waits(primary):
    """SELECT tsmove.wait() holds its statement's snapshot for the whole
    move, so VACUUM keeps every row version that died meanwhile, in any
    table; CALL tsmove.wait_for() commits between polls and holds none, and
    still returns the job's state when it ends."""
    expected = make_table(primary)
    primary.sql("CREATE TABLE churn (id int PRIMARY KEY, v int) "
                "WITH (autovacuum_enabled = off);"
                "INSERT INTO churn SELECT g, 0 FROM generate_series(1, 1000) g")
    job = start_move(primary, "victim", "ts_b", max_rate_mb=1)
    wait_for_state(primary, job, ("copying",), 30)

    def started(waiter):
        wait_for(lambda: primary.sql_scalar(
            "SELECT state FROM pg_stat_activity WHERE pid = %s", (waiter.pid,)) == "active",
            10, what="the waiter to start")
        time.sleep(0.3)

    holder = Waiter(primary, "SELECT tsmove.wait(%s)", job)
    holder.start()
    started(holder)
    assert dead_rows_vacuum_leaves(primary) == 1000
    assert primary.sql_scalar("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                              (holder.pid,)) is not None
    primary.sql("SELECT pg_cancel_backend(%s)", (holder.pid,))
    holder.join(10)
    assert holder.sqlstate == "57014"

    waiter = Waiter(primary, "CALL tsmove.wait_for(%s)", job)
    waiter.start()
    started(waiter)
    assert dead_rows_vacuum_leaves(primary) == 0
    xmins = [primary.sql_scalar("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                (waiter.pid,)) for _ in range(20)]
    # a poll holds a snapshot for microseconds; a sample may catch one
    assert xmins.count(None) >= 15, xmins
    assert job_row(primary, job)["state"] == "copying"
    assert waiter.is_alive()

    primary.sql("SELECT tsmove.set_rate(%s, 0)", (job,))
    waiter.join(120)
    assert waiter.rows == [("done",)], (waiter.rows, waiter.sqlstate, job_row(primary, job))
    assert primary.row_hash("victim", "id") == expected
    assert_moved_cleanly(primary, "victim", "ts_b")
