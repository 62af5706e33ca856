"""Helpers for tests that move relations with pg_tsmove.

    job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=64)
    assert wait_job(primary, job) == "done"
    assert_moved_cleanly(primary, "pgbench_accounts", "ts_b")

Every test that moves data checks it afterwards; assert_moved_cleanly()
bundles what every such test owes: amcheck, the relation's files only in
the target tablespace, no orphan files anywhere.

Failure and queue tests interrupt moves of one table, "victim" (about 30 MB
in ts_a, with an index and TOASTed rows): make_table() creates it and
returns its row hash, assert_intact_in() checks it afterwards.
"""

import threading
import time

import psycopg

JOB_COLUMNS = ("state", "blocks_total", "blocks_copied", "blocks_recopied",
               "dirty_backlog", "bytes_written", "wal_bytes", "switch_attempts",
               "lock_wait_ms", "switch_ms", "error", "blocks_under_lock", "job_kind")


def start_move(cluster, rel, target, mode="online", max_rate_mb=None,
               with_indexes=False, dbname="postgres"):
    """tsmove.move() in its own transaction; returns the job id."""
    return cluster.sql_scalar(
        "SELECT tsmove.move(%s, %s, mode => %s, max_rate_mb => %s::numeric, "
        "with_indexes => %s)", (rel, target, mode, max_rate_mb, with_indexes),
        dbname=dbname)


def wait_job(cluster, job, timeout_s=300, dbname="postgres"):
    """tsmove.wait() with a timeout; returns the state."""
    return cluster.sql_scalar("SELECT tsmove.wait(%s, make_interval(secs => %s))",
                              (job, timeout_s), dbname=dbname)


def wait_job_without_snapshot(cluster, job, timeout_s=1800, dbname="postgres"):
    """Wait for a job with CALL tsmove.wait_for(), which commits between its
    polls; returns the state (the current one at the timeout).  Benchmarks
    wait this way: SELECT tsmove.wait() is one statement, and its snapshot
    holds back the xmin horizon for the whole move, so that pgbench cannot
    prune the dead versions of its hot rows; a session doing nothing but
    SELECT pg_sleep(30) cost TPC-B 27-30 % of its throughput on this VM,
    which a benchmark would have charged to the move."""
    with cluster.conn(dbname) as conn:
        return conn.execute("CALL tsmove.wait_for(%s, make_interval(secs => %s))",
                            (job, timeout_s)).fetchone()[0]


def move_paused_at(cluster, phase, rel="victim", target="ts_b"):
    """Start an unthrottled move that pg_tsmove.debug_pause_at holds at
    phase; return its job id once the worker has paused there.  The setting
    is reset in the file only: the paused worker does not reload, and the
    next start of the server reads it back."""
    cluster.sql("ALTER SYSTEM SET pg_tsmove.debug_pause_at = '%s'" % phase)
    cluster.sql("SELECT pg_reload_conf()")
    time.sleep(0.3)
    job = start_move(cluster, rel, target, max_rate_mb=0)
    wait_for(lambda: "job %d pauses at %s" % (job, phase) in cluster.log_contents(),
             60, what="the worker to pause at " + phase)
    cluster.sql("ALTER SYSTEM RESET pg_tsmove.debug_pause_at")
    return job


def job_row(cluster, job, dbname="postgres"):
    """The job's row of tsmove.jobs as a dict."""
    row = cluster.sql("SELECT " + ", ".join(JOB_COLUMNS)
                      + " FROM tsmove.jobs WHERE job_id = %s", (job,), dbname=dbname)
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


def wait_for_state(cluster, job, states, timeout_s=60, dbname="postgres"):
    """Wait until the job is in one of states; returns its row."""
    return wait_for(lambda: (lambda r: r if r["state"] in states else None)(
        job_row(cluster, job, dbname)), timeout_s,
        what="job %s to reach %s" % (job, states))


def worker_lock_modes(cluster, lock_filter, params=()):
    """The granted modes of the locks a pg_tsmove worker holds that match
    lock_filter (SQL over pg_locks l)."""
    return sorted(r[0] for r in cluster.sql(
        "SELECT l.mode FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a "
        "USING (pid) WHERE a.backend_type = 'pg_tsmove worker' AND l.granted AND "
        + lock_filter, params))


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


# ---- the table "victim" that failure and queue tests interrupt ----

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


class LongReader(threading.Thread):
    """A query that reads `rel` and sleeps: it holds AccessShareLock on rel
    while it runs (RowShareLock with for_share, which a relocation's switch
    waits for, as it waits for writers).  Records how it ended (its
    SQLSTATE, None if it finished) and how long it ran."""

    def __init__(self, cluster, rel, seconds, user=None, dbname="postgres", for_share=False):
        super().__init__(daemon=True)
        self.conn = cluster.conn(dbname, user=user) if user else cluster.conn(dbname)
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.rel, self.seconds = rel, seconds
        self.suffix = " FOR SHARE" if for_share else ""
        self.sqlstate, self.ran_s = "not run", None

    def run(self):
        t0 = time.monotonic()
        try:
            self.conn.execute("SELECT pg_sleep(%s) FROM %s LIMIT 1%s"
                              % (self.seconds, self.rel, self.suffix))
            self.sqlstate = None
        except psycopg.Error as error:
            self.sqlstate = error.sqlstate
        self.ran_s = time.monotonic() - t0
        self.conn.close()


def start_long_reader(cluster, rel, seconds, user=None, dbname="postgres", for_share=False):
    reader = LongReader(cluster, rel, seconds, user, dbname, for_share)
    reader.start()
    wait_for(lambda: cluster.sql_scalar(
        "SELECT count(*) FROM pg_locks WHERE pid = %s AND relation = %s::regclass",
        (reader.pid, rel), dbname=dbname) == 1, 10, what="the reader's lock")
    return reader


class QueuedWriter(threading.Thread):
    """A transaction that updates row 1 of rel (a column n) and then stays
    in a query for seconds, holding RowExclusiveLock on rel.  Records how
    it ended (its SQLSTATE, None if it committed) and when
    (time.monotonic())."""

    def __init__(self, cluster, rel, seconds, dbname="postgres"):
        super().__init__(daemon=True)
        self.conn = cluster.conn(dbname, autocommit=False)
        self.pid = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.conn.commit()
        self.rel, self.seconds = rel, seconds
        self.sqlstate, self.ended = "not run", None

    def run(self):
        try:
            self.conn.execute("UPDATE %s SET n = n + 1 WHERE id = 1" % self.rel)
            self.conn.execute("SELECT pg_sleep(%s)" % self.seconds)
            self.conn.commit()
            self.sqlstate = None
        except psycopg.Error as error:
            self.sqlstate = error.sqlstate
        self.ended = time.monotonic()
        self.conn.close()


def start_writer_queued_behind_the_switch(cluster, rel, seconds, dbname="postgres"):
    """Once a switch attempt's lock request on rel waits (behind a reader),
    start a QueuedWriter on rel: it queues behind the request, and is
    granted its lock when the attempt times out.  Returns it then, holding
    the lock.  The attempt must wait long enough (switch_lock_timeout of a
    second or more) for the writer to queue."""
    locks = ("SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND pid = %s "
             "AND mode = %s AND granted = %s")
    wait_for(lambda: cluster.sql_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
        "WHERE a.backend_type = 'pg_tsmove worker' AND l.relation = %s::regclass "
        "AND NOT l.granted", (rel,), dbname=dbname), 30, interval_s=0.02,
        what="the switch's lock request")
    writer = QueuedWriter(cluster, rel, seconds, dbname)
    writer.start()
    wait_for(lambda: cluster.sql_scalar(locks, (rel, writer.pid, "RowExclusiveLock", False),
                                        dbname=dbname), 1.5, interval_s=0.02,
             what="the writer to queue behind the switch's request")
    wait_for(lambda: cluster.sql_scalar(locks, (rel, writer.pid, "RowExclusiveLock", True),
                                        dbname=dbname), 10,
             what="the writer's lock, once the attempt timed out")
    return writer


def cancel_reader_then_writer(cluster, job, reader, writer, timeout_s):
    """With the switch blocked by reader (a start_long_reader) and writer
    (a QueuedWriter) queued behind it, set switch_cancel_blockers_after to
    1 s: the reader's query must be cancelled and the job end within
    timeout_s.  Returns when the reader ended (time.monotonic()), for the
    caller to compare with writer.ended."""
    set_cancel_blockers_after(cluster, "'1s'")
    reader.join(20)
    assert reader.sqlstate == "57014", reader.sqlstate      # query_canceled
    reader_ended = time.monotonic()
    # the writer blocks the next attempt, and is cancelled after it
    assert wait_job(cluster, job, timeout_s) == "done", job_row(cluster, job)
    writer.join(10)
    return reader_ended


def set_cancel_blockers_after(cluster, value):
    cluster.sql("ALTER SYSTEM SET pg_tsmove.switch_cancel_blockers_after = %s" % value)
    cluster.sql("SELECT pg_reload_conf()")
