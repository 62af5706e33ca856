"""The queue: no job stays queued without the queue that will run it.

tsmove.move() only records a job; the launcher starts workers for queued
jobs, up to pg_tsmove.max_workers.  Whatever stops a worker before its
queue is empty (a database it cannot connect to, pg_terminate_backend, a
crash), the jobs still queued run later, and every moved table is intact.
"""

import time

import pytest

from moves import (assert_intact_in, job_row, make_table, move_victim_while_copying,
                   start_move, tablespace_of, wait_for, wait_for_state, wait_job)


def make_small_table(cluster, name, dbname="postgres"):
    cluster.sql("CREATE TABLE %s (id int PRIMARY KEY, pad text) TABLESPACE ts_a;"
                "INSERT INTO %s SELECT g, repeat('s', 50) FROM generate_series(1, 5000) g"
                % (name, name), dbname=dbname)
    return cluster.row_hash(name, "id", dbname=dbname)


def assert_small_table_moved(cluster, name, expected, dbname="postgres"):
    assert cluster.row_hash(name, "id", dbname=dbname) == expected
    assert cluster.sql_scalar("SELECT spcname FROM pg_class c JOIN pg_tablespace t "
                              "ON t.oid = c.reltablespace WHERE c.oid = %s::regclass",
                              (name,), dbname=dbname) == "ts_b"
    assert cluster.amcheck(dbname=dbname, relations=[name]) == []
    assert cluster.orphan_files(dbname=dbname) == []


def test_worker_that_cannot_connect_is_retried(primary):
    """The database stops accepting connections between move() and its
    commit: the worker the launcher starts dies at connect, the job stays
    queued and says the queue is retrying; once connections are allowed
    again, it runs."""
    primary.sql("CREATE DATABASE qdb")
    primary.sql("CREATE EXTENSION pg_tsmove", dbname="qdb")
    expected = make_small_table(primary, "small", dbname="qdb")
    with primary.conn("qdb", autocommit=False) as submitter:
        job = submitter.execute("SELECT tsmove.move('small', 'ts_b')").fetchone()[0]
        primary.sql("ALTER DATABASE qdb ALLOW_CONNECTIONS false")
        submitter.commit()
        wait_for(lambda: "retrying" in (submitter.execute(
            "SELECT error FROM tsmove.jobs WHERE job_id = %s", (job,)).fetchone()[0] or ""),
            30, what="the queue to say it retries")
        assert submitter.execute("SELECT state FROM tsmove.jobs WHERE job_id = %s",
                                 (job,)).fetchone()[0] == "queued"
        submitter.rollback()
    assert 'database "qdb" is not currently accepting connections' in primary.log_contents()
    primary.sql("ALTER DATABASE qdb ALLOW_CONNECTIONS true")
    assert wait_job(primary, job, 120, dbname="qdb") == "done"
    assert_small_table_moved(primary, "small", expected, dbname="qdb")


@pytest.mark.pg_conf("pg_tsmove.max_workers = 1", "pg_tsmove.resume_after_restart = off")
def test_queued_job_runs_after_its_worker_is_terminated(primary):
    """With one worker, a second job waits; pg_terminate_backend() of the
    worker fails the running job, and the queued one still runs."""
    expected = make_table(primary)
    small = make_small_table(primary, "small")
    job = move_victim_while_copying(primary)
    queued = start_move(primary, "small", "ts_b", max_rate_mb=0)
    row = job_row(primary, queued)
    assert row["state"] == "queued"
    assert row["error"] == "waiting for a free worker (1 of pg_tsmove.max_workers = 1 running)"
    pid = primary.sql_scalar("SELECT pid FROM tsmove.jobs WHERE job_id = %s", (job,))
    primary.sql("SELECT pg_terminate_backend(%s)", (pid,))
    assert wait_job(primary, job, 30) == "failed"
    assert wait_job(primary, queued, 60) == "done"
    assert_intact_in(primary, "ts_a", expected)
    assert_small_table_moved(primary, "small", small)


@pytest.mark.pg_conf("pg_tsmove.max_workers = 1", "pg_tsmove.resume_after_restart = off")
def test_queue_survives_a_crash(primary):
    """kill -9 while one job runs and another is queued: after restart the
    recovery pass fails the interrupted one and the queued one runs."""
    expected = make_table(primary)
    small = make_small_table(primary, "small")
    job = move_victim_while_copying(primary)
    queued = start_move(primary, "small", "ts_b", max_rate_mb=0)
    assert job_row(primary, queued)["state"] == "queued"
    primary.kill9()
    primary.start()
    assert wait_job(primary, job, 60) == "failed"
    assert "interrupted by a server crash" in job_row(primary, job)["error"]
    assert wait_job(primary, queued, 60) == "done"
    assert_intact_in(primary, "ts_a", expected)
    assert_small_table_moved(primary, "small", small)
    assert tablespace_of(primary, "victim") == "ts_a"


def test_max_workers_zero_keeps_jobs_queued_and_cancellable(primary):
    """pg_tsmove.max_workers = 0 stops the queue: a job waits and says why,
    cancel() ends it at once, and raising the limit runs the next one."""
    small = make_small_table(primary, "small")
    primary.sql("ALTER SYSTEM SET pg_tsmove.max_workers = 0")
    primary.sql("SELECT pg_reload_conf()")
    wait_for(lambda: primary.sql_scalar("SHOW pg_tsmove.max_workers") == "0", 10,
             what="the reload")
    job = start_move(primary, "small", "ts_b")
    row = wait_for_state(primary, job, ("queued",))
    assert row["error"] == "pg_tsmove.max_workers is 0: no job starts"
    assert primary.sql_scalar("SELECT tsmove.cancel(%s)", (job,)) is True
    assert job_row(primary, job)["state"] == "cancelled"
    job = start_move(primary, "small", "ts_b")
    primary.sql("ALTER SYSTEM RESET pg_tsmove.max_workers")
    primary.sql("SELECT pg_reload_conf()")
    assert wait_job(primary, job, 60) == "done"
    assert_small_table_moved(primary, "small", small)


@pytest.mark.pg_conf("pg_tsmove.max_workers = 0")
def test_job_whose_row_was_locked_when_a_worker_looked_still_runs(primary):
    """A worker claims jobs with FOR UPDATE SKIP LOCKED: while another
    transaction has updated a queued job's row (set_rate(); pause() of a
    job queued to resume), a worker passes over it, finds nothing else and
    exits.  The commit of that transaction must bring a worker back."""
    expected = make_small_table(primary, "small")
    job = start_move(primary, "small", "ts_b")
    time.sleep(1)
    assert job_row(primary, job)["state"] == "queued"     # max_workers = 0
    with primary.conn(autocommit=False) as steering:
        steering.execute("SELECT tsmove.set_rate(%s, 0)", (job,))
        primary.sql("ALTER SYSTEM SET pg_tsmove.max_workers = 2")
        primary.sql("SELECT pg_reload_conf()")
        time.sleep(2)   # the worker started for the job finds its row locked
        assert job_row(primary, job)["state"] == "queued"
        steering.commit()
    assert wait_job(primary, job, 30) == "done", job_row(primary, job)
    assert_small_table_moved(primary, "small", expected)
