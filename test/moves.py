"""Helpers for tests that move relations with pg_tsmove.

    job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=64)
    assert wait_job(primary, job) == "done"
    assert_moved_cleanly(primary, "pgbench_accounts", "ts_b")

Every test that moves data checks it afterwards; assert_moved_cleanly()
bundles what every such test owes: amcheck, the relation's files only in
the target tablespace, no orphan files anywhere.
"""

import time

JOB_COLUMNS = ("state", "blocks_total", "blocks_copied", "blocks_recopied",
               "dirty_backlog", "bytes_written", "wal_bytes", "switch_attempts",
               "lock_wait_ms", "switch_ms", "error")


def start_move(cluster, rel, target, mode="online", max_rate_mb=None,
               with_indexes=False):
    """tsmove.move() in its own transaction; returns the job id."""
    return cluster.sql_scalar(
        "SELECT tsmove.move(%s, %s, mode => %s, max_rate_mb => %s, "
        "with_indexes => %s)", (rel, target, mode, max_rate_mb, with_indexes))


def wait_job(cluster, job, timeout_s=300):
    """tsmove.wait() with a timeout; returns the state."""
    return cluster.sql_scalar("SELECT tsmove.wait(%s, make_interval(secs => %s))",
                              (job, timeout_s))


def job_row(cluster, job):
    """The job's row of tsmove.jobs as a dict."""
    row = cluster.sql("SELECT " + ", ".join(JOB_COLUMNS)
                      + " FROM tsmove.jobs WHERE job_id = %s", (job,))
    assert row, "job %s not in tsmove.jobs" % job
    return dict(zip(JOB_COLUMNS, row[0]))


def wait_for(condition, timeout_s=60, interval_s=0.05, what="condition"):
    """Poll condition() until it returns a true value; return that value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s"
                                 % (timeout_s, what))
        time.sleep(interval_s)


def wait_for_state(cluster, job, states, timeout_s=60):
    """Wait until the job is in one of states; returns its row."""
    return wait_for(lambda: (lambda r: r if r["state"] in states else None)(
        job_row(cluster, job)), timeout_s, what="job %s to reach %s" % (job, states))


def tablespace_of(cluster, rel):
    """Name of the tablespace rel lives in (the default resolved)."""
    return cluster.sql_scalar("""
        SELECT t.spcname FROM pg_class c CROSS JOIN pg_database d
        JOIN pg_tablespace t ON t.oid = CASE c.reltablespace WHEN 0
                                        THEN d.dattablespace ELSE c.reltablespace END
        WHERE c.oid = %s::regclass AND d.datname = current_database()""", (rel,))


def assert_moved_cleanly(cluster, rel, tablespace):
    """rel (with TOAST) lives in tablespace only, amcheck finds nothing, no
    file anywhere belongs to no relation."""
    assert tablespace_of(cluster, rel) == tablespace
    assert list(cluster.relation_files(rel)) == [tablespace]
    assert cluster.amcheck(relations=[rel]) == []
    assert cluster.orphan_files() == []
