"""The creation guard under attack (src/relocation/relocation_guard.c).

A hostile review's attacks, kept as tests: CREATE DATABASE with default
options, started before the relocation was claimed, racing its listing,
or making the tablespace a database's default meanwhile; DROP DATABASE
during a relocation; a transaction that holds a relation of the tablespace
and then runs DDL while the switch waits (it deadlocked); a long statement
elsewhere that holds the guard (the job must name it); the guard never
left held after errors, commits inside statements, prepared transactions;
more ways to create storage in the switch's window; standby sessions
during the switch.  Each of the defects failed here before its fix.
"""

import os
import re
import threading
import time

import psycopg
import pytest

from moves import job_row, wait_for, wait_job
from test_relocation import (end_pause, location_of, new_location, relocate,
                             relocate_paused_at, set_pause)

GUARD_WAITERS = ("SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND NOT granted "
                 "AND classid = 'pg_tablespace'::regclass AND objid = 0")
GUARD_HOLDERS = ("SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND granted "
                 "AND classid = 'pg_tablespace'::regclass AND objid = 0")


def in_thread(cluster, statements, results, key, dbname="postgres", autocommit=True):
    def target():
        try:
            with psycopg.connect(cluster.conninfo(dbname), autocommit=autocommit) as conn:
                for s in statements:
                    conn.execute(s)
                if not autocommit:
                    conn.commit()
            results[key] = "done"
        except Exception as e:
            results[key] = "error: %s" % e
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def files_under(directory):
    found = set()
    for root, _, files in os.walk(directory):
        found.update(f for f in files if f[0].isdigit())
    return found


# ---------------------------------------------------------------------------
# 1. CREATE DATABASE ... TABLESPACE DEFAULT / TEMPLATE DEFAULT: legal syntax
#    (DefElem with a NULL arg), refuse_database_commands() calls
#    defGetString() on it while any relocation runs.
# ---------------------------------------------------------------------------
def test_create_database_with_default_options_during_relocation(primary):
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new)
    errors = {}
    for stmt in ("CREATE DATABASE d_deftbs TABLESPACE DEFAULT",
                 "CREATE DATABASE d_deftmpl TEMPLATE DEFAULT",
                 "CREATE DATABASE d_deftmpl2 TEMPLATE = DEFAULT TABLESPACE = ts_b"):
        try:
            primary.sql(stmt)
        except Exception as e:
            errors[stmt] = str(e)
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert errors == {}, errors


# ---------------------------------------------------------------------------
# 2. CREATE DATABASE that passed the refusal check before the relocation was
#    claimed, and copies into the tablespace while it runs.
#    The template is held (RENAME keeps AccessExclusiveLock on it) so the
#    statement waits in get_db_info() after the hook's check.
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["wal_log", "file_copy"])
def test_create_database_started_before_the_claim(primary, strategy):
    primary.sql("CREATE DATABASE tmpl")
    primary.sql("CREATE TABLE t (id int) TABLESPACE ts_a; INSERT INTO t VALUES (1)",
                dbname="tmpl")
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    holder = psycopg.connect(primary.conninfo(), autocommit=False)
    holder.execute("ALTER DATABASE tmpl RENAME TO tmpl_x")
    holder.execute("ALTER DATABASE tmpl_x RENAME TO tmpl")
    results = {}
    th = in_thread(primary, ["CREATE DATABASE newdb TEMPLATE tmpl STRATEGY %s" % strategy],
                   results, "create")
    wait_for(lambda: primary.sql_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE DATABASE newdb%%' "
        "AND wait_event_type = 'Lock'") == 1, 30, what="CREATE DATABASE to wait")
    new = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new)
    wait_for(lambda: "began before the relocation" in (job_row(primary, job)["error"] or ""),
             30, what="the relocation to wait for the CREATE DATABASE")
    assert job_row(primary, job)["blocks_total"] == 0      # nothing listed yet
    holder.commit()
    holder.close()
    th.join(60)
    state = wait_job(primary, job, 120)
    row = job_row(primary, job)
    print("CREATE DATABASE:", results, "job:", state, row)
    # The guard's promise: CREATE DATABASE from a template with files in a
    # relocating tablespace is refused, or the relocation sees the database.
    assert results["create"].startswith("error") or state == "done", (results, row)
    if results["create"] == "done":
        assert primary.sql_scalar("SELECT count(*) FROM t", dbname="newdb") == 1


# ---------------------------------------------------------------------------
# 3. A transaction that holds a lock on a relation of the tablespace and then
#    runs any guarded statement (here CREATE TEMP TABLE, nothing to do with
#    the tablespace): the switch holds the guard and waits for the relation.
#    With switch_lock_timeout above deadlock_timeout the deadlock detector
#    picks one: the user's transaction or the relocation.
# ---------------------------------------------------------------------------
@pytest.mark.pg_conf("pg_tsmove.switch_lock_timeout = 5000")
@pytest.mark.parametrize("ddl_after_s", [0.1, 1.5])
def test_guard_deadlock_with_a_transaction_holding_a_relation(primary, ddl_after_s):
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    tx = psycopg.connect(primary.conninfo(), autocommit=False)
    tx.execute("INSERT INTO kept VALUES (2)")
    new = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new)
    wait_for(lambda: primary.sql_scalar(
        "SELECT count(*) FROM pg_locks WHERE relation = 'kept'::regclass AND NOT granted "
        "AND mode = 'AccessExclusiveLock'") == 1, 60, what="the switch to wait for kept")
    time.sleep(ddl_after_s)
    err = None
    try:
        tx.execute("CREATE TEMP TABLE unrelated (x int)")
        tx.commit()
    except Exception as e:
        err = e
        tx.rollback()
    tx.close()
    state = wait_job(primary, job, 120)
    row = job_row(primary, job)
    print("user error:", err, "job:", state, row)
    assert err is None, "the user's transaction failed: %s" % err
    assert state == "done", row


# ---------------------------------------------------------------------------
# 4. A guarded statement that runs long holds off the switch for as long,
#    whatever switch_cancel_blockers_after says; meanwhile each attempt
#    queues every guarded statement of the cluster behind it.
# ---------------------------------------------------------------------------
@pytest.mark.pg_conf("pg_tsmove.switch_cancel_blockers_after = 1000")
def test_long_guarded_statement_starves_the_switch(primary):
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    primary.sql("CREATE TABLE other (id int) TABLESPACE ts_b;"
                "INSERT INTO other SELECT generate_series(1, 1000)")
    # a CREATE INDEX CONCURRENTLY in another tablespace, waiting for an idle
    # transaction with a snapshot (an everyday sight)
    idle = psycopg.connect(primary.conninfo(), autocommit=False)
    idle.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    idle.execute("SELECT count(*) FROM other")
    results = {}
    th = in_thread(primary, ["CREATE INDEX CONCURRENTLY other_idx ON other (id) TABLESPACE ts_b"],
                   results, "cic")
    wait_for(lambda: primary.sql_scalar(GUARD_HOLDERS) == 1, 30, what="CIC to hold the guard")
    cic_pid = primary.sql_scalar("SELECT pid FROM pg_locks WHERE locktype = 'object' AND granted "
                                 "AND classid = 'pg_tablespace'::regclass AND objid = 0")
    new = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new)
    # unrelated DDL in the meantime: how long does it wait?
    worst = 0.0
    t_end = time.monotonic() + 20
    with psycopg.connect(primary.conninfo(), autocommit=True) as c:
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            c.execute("CREATE TEMP TABLE IF NOT EXISTS scratch (x int)")
            c.execute("DROP TABLE scratch")
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.01)
    row = job_row(primary, job)
    state = row["state"] if isinstance(row, dict) else row
    note = primary.sql_scalar("SELECT error FROM tsmove.jobs WHERE job_id = %s", (job,))
    attempts = primary.sql_scalar("SELECT switch_attempts FROM tsmove.jobs WHERE job_id = %s", (job,))
    print("after 20 s: state", state, "attempts", attempts, "note:", note,
          "worst unrelated DDL %.3f s" % worst)
    idle.rollback()
    idle.close()
    th.join(30)
    final = wait_job(primary, job, 120)
    assert final == "done"
    assert location_of(primary, "ts_a") == new
    # 20 s without a switch, held by a statement on ts_b: the job names it
    assert attempts is not None and "process %d" % cic_pid in (note or ""), \
        "tsmove.jobs does not say which session holds the guard: %r" % note


# ---------------------------------------------------------------------------
# 5. Session-lock leaks: after each pattern no session holds the guard and
#    the log has no "you don't own a lock" warning.
# ---------------------------------------------------------------------------
LEAK_PATTERNS = [
    # error inside an exception block
    ["DO $$ BEGIN BEGIN CREATE TABLE leak1 (id int) TABLESPACE nosuch; "
     "EXCEPTION WHEN others THEN NULL; END; END $$"],
    # nested: SQL function doing DDL inside CREATE TABLE AS, failing later
    ["CREATE FUNCTION mk() RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
     "CREATE TABLE IF NOT EXISTS leak2 (id int); RETURN 1/0; END $$"],
    ["CREATE TABLE leak3 AS SELECT mk()"],
    # CIC failing after its first internal commit
    ["CREATE TABLE dup (id int); INSERT INTO dup VALUES (1), (1)"],
    ["CREATE UNIQUE INDEX CONCURRENTLY dup_idx ON dup (id)"],
    ["REINDEX TABLE CONCURRENTLY dup"],
    # VACUUM FULL of several tables, one of them failing? (lock timeout)
    ["VACUUM FULL dup, pg_class"],
    # procedure with COMMIT / ROLLBACK around DDL
    ["CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN CREATE TABLE leak4 (id int); "
     "COMMIT; CREATE TABLE leak5 (id int); ROLLBACK; CREATE TABLE leak6 (id int); END $$"],
    ["CALL p()"],
    # statement_timeout during a guarded statement
    ["SET statement_timeout = '100ms'",
     "CREATE TABLE leak7 AS SELECT pg_sleep(1)::text"],
    # prepared transaction after DDL
    ["BEGIN", "CREATE TABLE leak8 (id int)", "PREPARE TRANSACTION 'p1'"],
    ["COMMIT PREPARED 'p1'"],
    # EXPLAIN ANALYZE of CTAS
    ["EXPLAIN ANALYZE CREATE TABLE leak9 AS SELECT 1 AS a"],
    # DROP DATABASE inside a transaction block (error)
    ["BEGIN", "CREATE TABLE leak10 (id int)", "CREATE DATABASE nope", "COMMIT"],
]


@pytest.mark.pg_conf("max_prepared_transactions = 5")
def test_guard_never_leaks(primary):
    failures = []
    for stmts in LEAK_PATTERNS:
        with psycopg.connect(primary.conninfo(), autocommit=True) as c:
            for s in stmts:
                try:
                    c.execute(s)
                except Exception as e:
                    failures.append((s, str(e).splitlines()[0]))
                    if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        c.execute("ROLLBACK")
            held = primary.sql_scalar(GUARD_HOLDERS)
            assert held == 0, (stmts, held)
    # a session killed while it holds the guard
    results = {}
    th = in_thread(primary, ["CREATE TABLE leak11 AS SELECT pg_sleep(30)::text"], results, "k")
    wait_for(lambda: primary.sql_scalar(GUARD_HOLDERS) == 1, 10, what="holder %r %r" % (results, failures))
    primary.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE query LIKE 'CREATE TABLE leak11%'")
    th.join(10)
    wait_for(lambda: primary.sql_scalar(GUARD_HOLDERS) == 0, 10, what="release")
    print(failures)
    log = primary.log_contents()
    assert "you don't own a lock" not in log
    assert "lock(s) still held" not in log


# ---------------------------------------------------------------------------
# 2c. No signal needed: CREATE DATABASE ... TABLESPACE ts_a (WAL_LOG, the
#     default) from a large template is copying when the relocation is
#     submitted.
# ---------------------------------------------------------------------------
def test_create_database_copying_when_the_relocation_starts(primary):
    primary.sql("CREATE DATABASE tmpl")
    primary.sql("CREATE TABLE big (pad text); "
                "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 150000);"
                "CREATE TABLE t (id int); INSERT INTO t VALUES (1)",
                dbname="tmpl")
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    primary.sql("CHECKPOINT")
    results = {}
    th = in_thread(primary, ["CREATE DATABASE newdb TEMPLATE tmpl TABLESPACE ts_a"],
                   results, "create")
    wait_for(lambda: primary.sql_scalar(
        "SELECT count(*) FROM pg_database WHERE datname = 'newdb'") == 0 and
        os.path.exists(os.path.join(primary.sql_scalar(
            "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'ts_a'"))), 10)
    time.sleep(0.3)
    new = new_location(primary, "relocated")
    # newdb makes ts_a its default while the relocation starts: refused at
    # the submission if newdb committed first, else the job waits for it
    # and then refuses; nothing is lost either way
    try:
        job = relocate(primary, "ts_a", new, checkpoint=False)
    except psycopg.errors.ObjectInUse as refused:
        assert "default tablespace of database" in str(refused)
        job = None
    th.join(120)
    assert results["create"] == "done"
    if job is not None:
        state = wait_job(primary, job, 120)
        row = job_row(primary, job)
        assert state == "failed" and "default tablespace of database" in row["error"], row
    primary.sql("CHECKPOINT")
    assert primary.sql_scalar("SELECT count(*) FROM t", dbname="newdb") == 1
    assert primary.sql_scalar("SELECT count(*) FROM big", dbname="newdb") == 150000


# ---------------------------------------------------------------------------
# 2d. Default strategy, natural timing: the template has a table in ts_a
#     (copied first) and a large one in pg_default (copied after); the
#     relocation is submitted while CREATE DATABASE copies the large one.
# ---------------------------------------------------------------------------
def test_create_database_wal_log_racing_the_listing(primary):
    primary.sql("CREATE DATABASE tmpl")
    primary.sql("CREATE TABLE t (id int) TABLESPACE ts_a; INSERT INTO t VALUES (1);"
                "CREATE TABLE big (pad text); "
                "INSERT INTO big SELECT repeat('x', 1000) FROM generate_series(1, 150000)",
                dbname="tmpl")
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    primary.sql("CHECKPOINT")
    ts_dir = os.path.join(primary.sql_scalar(
        "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'ts_a'"),
        primary.version_dir() if hasattr(primary, "version_dir") else "")
    ndirs_before = len(os.listdir(ts_dir))
    results = {}
    th = in_thread(primary, ["CREATE DATABASE newdb TEMPLATE tmpl"], results, "create")
    # newdb's directory appears in ts_a when t is copied
    wait_for(lambda: len(os.listdir(ts_dir)) > ndirs_before, 30, interval_s=0.005,
             what="newdb's directory in ts_a")
    new = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new, checkpoint=False)
    th.join(120)
    state = wait_job(primary, job, 120)
    row = job_row(primary, job)
    print("CREATE DATABASE:", results, "job:", state, row)
    print([l for l in primary.log_contents().splitlines() if "not relocated" in l])
    assert results["create"] == "done"
    primary.sql("CHECKPOINT")
    path = primary.sql_scalar("SELECT pg_relation_filepath('t')", dbname="newdb")
    full = os.path.join(primary.data_dir, path)
    print("t is", path, "->", os.path.realpath(full),
          os.path.getsize(full) if os.path.exists(full) else "MISSING")
    print("count before restart:", primary.sql_scalar("SELECT count(*) FROM t", dbname="newdb"))
    primary.restart()
    try:
        n = primary.sql_scalar("SELECT count(*) FROM t", dbname="newdb")
    except Exception as e:
        n = "error: %s" % e
    print("count after restart:", n)
    assert n == 1


# ---------------------------------------------------------------------------
# 6. More ways to create storage in ts_a, each started while the switch is
#    paused after its last look: each must wait for the guard (or a lock).
# ---------------------------------------------------------------------------
SETUP_WINDOW = """
SET check_function_bodies = off;
CREATE TABLE kept (id int PRIMARY KEY) TABLESPACE ts_a;
INSERT INTO kept SELECT generate_series(1, 100);
CREATE TABLE src (id int) TABLESPACE ts_b; INSERT INTO src SELECT generate_series(1, 1000);
CREATE TABLE parted (id int) PARTITION BY RANGE (id) TABLESPACE ts_a;
CREATE TABLE parted_b (id int) PARTITION BY RANGE (id);
CREATE TABLE parted_b1 PARTITION OF parted_b FOR VALUES FROM (0) TO (1000) TABLESPACE ts_b;
CREATE TABLE reidx (id int) TABLESPACE ts_b; CREATE INDEX reidx_i ON reidx (id) TABLESPACE ts_b;
CREATE TABLE addcol (x int) TABLESPACE ts_b;
CREATE FUNCTION mk_plpgsql() RETURNS int LANGUAGE plpgsql AS $$
  BEGIN CREATE TABLE w_plpgsql (id int) TABLESPACE ts_a; INSERT INTO w_plpgsql VALUES (1); RETURN 1; END $$;
CREATE FUNCTION mk_sql() RETURNS int LANGUAGE sql AS $$
  CREATE TABLE w_sqlfn (id int) TABLESPACE ts_a; SELECT 1 $$;
CREATE FUNCTION mk_sql2() RETURNS int LANGUAGE sql AS $$
  CREATE TABLE w_copyfn (id int) TABLESPACE ts_a; SELECT 1 $$;
CREATE PROCEDURE mk_proc() LANGUAGE plpgsql AS $$
  BEGIN CREATE TABLE w_proc (id int) TABLESPACE ts_a; COMMIT; INSERT INTO w_proc VALUES (1); END $$;
CREATE FUNCTION evt() RETURNS event_trigger LANGUAGE plpgsql AS $$
  BEGIN IF NOT EXISTS (SELECT FROM pg_class WHERE relname = 'w_evt') THEN
    CREATE TABLE w_evt (id int) TABLESPACE ts_a; END IF; END $$;
CREATE EVENT TRIGGER on_comment ON ddl_command_end WHEN TAG IN ('COMMENT') EXECUTE FUNCTION evt();
"""

WINDOW_RACERS = {
    "select_into": (["SET default_tablespace = ts_a"], "SELECT id INTO w_selinto FROM src"),
    "ctas_execute": (["PREPARE q AS SELECT id FROM src"],
                     "CREATE TABLE w_ctasexec TABLESPACE ts_a AS EXECUTE q"),
    "explain_analyze_ctas": ([], "EXPLAIN ANALYZE CREATE TABLE w_explain TABLESPACE ts_a AS SELECT id FROM src"),
    "create_schema": (["SET default_tablespace = ts_a"],
                      "CREATE SCHEMA s1 CREATE TABLE w_schema (id int)"),
    "do_block": ([], "DO $$ BEGIN EXECUTE 'CREATE TABLE w_do (id int) TABLESPACE ts_a'; END $$"),
    "call_proc": ([], "CALL mk_proc()"),
    "select_plpgsql": ([], "SELECT mk_plpgsql()"),
    "select_sqlfn": ([], "SELECT mk_sql()"),
    "partition": ([], "CREATE TABLE w_part PARTITION OF parted FOR VALUES FROM (0) TO (10)"),
    "partitioned_index": ([], "CREATE INDEX w_pidx ON parted_b (id) TABLESPACE ts_a"),
    "unlogged": ([], "CREATE UNLOGGED TABLE w_unlogged (id int PRIMARY KEY) TABLESPACE ts_a"),
    "temp": (["SET temp_tablespaces = ts_a"], "CREATE TEMP TABLE w_temp AS SELECT id FROM src"),
    "sequence": (["SET default_tablespace = ts_a"], "CREATE SEQUENCE w_seq"),
    "add_serial": (["SET default_tablespace = ts_a"], "ALTER TABLE addcol ADD COLUMN id serial"),
    "reindex_tbs": ([], "REINDEX (TABLESPACE ts_a) TABLE reidx"),
    "like": (["SET default_tablespace = ts_a"], "CREATE TABLE w_like (LIKE src INCLUDING ALL)"),
    "comment_evt": ([], "COMMENT ON TABLE src IS 'x'"),
    "copy_fn": ([], "COPY (SELECT mk_sql2()) TO '/dev/null'"),
}


def test_more_storage_in_the_switch_window(primary):
    primary.sql(SETUP_WINDOW)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "switching", new)
    results, threads = {}, []
    for key, (settings, statement) in WINDOW_RACERS.items():
        threads.append(in_thread(primary, settings + [statement], results, key))
        time.sleep(0.05)
    time.sleep(3)
    during = dict(results)
    waiting = primary.sql("SELECT a.query, l.locktype, l.relation::regclass::text "
                          "FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted")
    old_now = files_under(old)
    end_pause(primary)
    for t in threads:
        t.join(60)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    print("finished during the pause:", during)
    print("waiting:", waiting)
    print("after:", results)
    # nothing created in the window may have run to completion during it
    # (comment_evt / copy_fn / select_* nest their DDL: they wait too)
    assert during == {}, during



# ---------------------------------------------------------------------------
# 7. DROP DATABASE of a database with files in the tablespace is guarded but
#    not refused: the mirror then stops the relocation.
# ---------------------------------------------------------------------------
def test_drop_database_during_relocation(primary):
    primary.sql("CREATE DATABASE db2")
    primary.sql("CREATE TABLE t (id int) TABLESPACE ts_a; INSERT INTO t VALUES (1)", dbname="db2")
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new)
    err = None
    try:
        primary.sql("DROP DATABASE db2")
    except Exception as e:
        err = str(e)
    end_pause(primary)
    state = wait_job(primary, job, 120)
    row = job_row(primary, job)
    print("DROP DATABASE:", err, "job:", state, row)
    assert err is not None or state == "done", row


# ---------------------------------------------------------------------------
# 8. A hot standby: guarded statements there (EXPLAIN) while the primary's
#    switch is paused.
# ---------------------------------------------------------------------------
def test_standby_sessions_during_the_switch(primary, standby):
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    primary.wait_for_replay(standby)
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "switching", new)
    timings = {}
    for q in ("EXPLAIN SELECT 1", "EXPLAIN SELECT * FROM pg_class", "SELECT 1",
              "SELECT count(*) FROM pg_class", "EXPLAIN SELECT * FROM kept",
              "SELECT count(*) FROM kept"):
        t0 = time.monotonic()
        try:
            with standby.conn() as c:
                c.execute("SET statement_timeout = '3s'")
                c.execute(q)
            timings[q] = "%.2f s" % (time.monotonic() - t0)
        except Exception as e:
            timings[q] = "error after %.2f s: %s" % (time.monotonic() - t0, str(e).splitlines()[0])
    waits = standby.sql("SELECT locktype, relation, mode, granted FROM pg_locks WHERE NOT granted")
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done"
    print("standby:", timings, waits)
    # relations of ts_a block there (the switch's AccessExclusiveLocks are
    # replayed; not the guard's doing); nothing else may
    assert all(not v.startswith("error") for q, v in timings.items() if "kept" not in q), timings


# ---------------------------------------------------------------------------
# 3b. Same cycle with pg_tsmove's defaults (switch_lock_timeout 20 ms) and a
#     deadlock_timeout below it.
# ---------------------------------------------------------------------------
@pytest.mark.pg_conf("deadlock_timeout = 5ms")
def test_guard_deadlock_default_switch_settings(primary):
    primary.sql("CREATE TABLE kept (id int) TABLESPACE ts_a; INSERT INTO kept VALUES (1)")
    tx = psycopg.connect(primary.conninfo(), autocommit=False)
    tx.execute("INSERT INTO kept VALUES (2)")
    new = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new)
    deadlocks, other = 0, []
    t_end = time.monotonic() + 20
    while time.monotonic() < t_end and deadlocks == 0:
        tx.execute("SAVEPOINT s")
        try:
            tx.execute("CREATE TEMP TABLE IF NOT EXISTS unrelated (x int)")
            tx.execute("DROP TABLE unrelated")
            tx.execute("RELEASE s")
        except psycopg.errors.DeadlockDetected:
            deadlocks += 1
            tx.execute("ROLLBACK TO s")
        except Exception as e:
            other.append(str(e))
            tx.execute("ROLLBACK TO s")
        if job_row(primary, job)["state"] in ("failed", "done"):
            break
        time.sleep(0.002)
    tx.rollback()
    tx.close()
    state = wait_job(primary, job, 120)
    row = job_row(primary, job)
    print("user deadlocks:", deadlocks, other[:3], "job:", state, row["error"], row["switch_attempts"])
    assert deadlocks == 0 and state == "done", (deadlocks, row)



def test_timed_attempts_failing_at_the_guard_are_spaced(primary):
    """Readers of the tablespace that always overlap make the switch time
    its attempts; while a long statement holds the guard, each timed
    attempt gets the relations' locks (queueing the writers for its wait)
    and then fails at the guard.  As after any failed timed attempt, none
    follows for 5 s: in 10 s of the guard held, at most three."""
    from test_move_online import overlapping_readers
    primary.sql("CREATE TABLE over (id int PRIMARY KEY, n int) TABLESPACE ts_a;"
                "INSERT INTO over SELECT g, 0 FROM generate_series(1, 50000) g;"
                "CREATE TABLE over_shadow AS SELECT * FROM over")
    primary.sql("ALTER SYSTEM SET log_min_messages = debug1")
    primary.sql("ALTER SYSTEM SET pg_tsmove.switch_timed_wait = 0")   # no switch yet
    primary.sql("SELECT pg_reload_conf()")
    stop = threading.Event()
    readers = overlapping_readers(primary, "over", 1.2, 0.6, stop)
    results = {}
    try:
        time.sleep(1.1)
        job = relocate(primary, "ts_a", new_location(primary, "relocated"))
        wait_for(lambda: (job_row(primary, job)["switch_attempts"] or 0) >= 3, 60,
                 what="switch attempts blocked by the readers")
        th = in_thread(primary, ["CREATE TABLE hold AS SELECT pg_sleep(12)::text AS t"],
                       results, "hold")
        wait_for(lambda: primary.sql_scalar(GUARD_HOLDERS) == 1, 30, what="the guard held")
        offset = len(primary.log_contents())
        primary.sql("ALTER SYSTEM RESET pg_tsmove.switch_timed_wait")
        primary.sql("SELECT pg_reload_conf()")
        time.sleep(10)
        log = primary.log_contents()[offset:]
        th.join(30)
        assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    finally:
        stop.set()
        for r in readers:
            r.join(30)
    # (one decision may be logged twice, a few ms apart, when a copy round
    #  came between it and its attempt: decisions 0.5 s apart are counted)
    timed, last = 0, None
    for m in re.finditer(r"(\d\d):(\d\d):(\d\d\.\d+) UTC \[\d+\] DEBUG:  pg_tsmove: job %d: "
                         r"watched \d+ looks, an attempt is timed now" % job, log):
        t = int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
        if last is None or t - last > 0.5:
            timed += 1
        last = t
    at_guard = log.count("waiting for a statement that may create storage")
    assert results.get("hold") == "done", results
    assert at_guard >= 1, log[-2000:]
    assert timed <= 3, (timed, at_guard)
    # the relocated rows: one per key by a sequential scan, as the shadow
    # no move touched, amcheck clean
    assert primary.row_hash("over", "id") == primary.row_hash("over_shadow", "id")
    assert primary.sql_scalar("SELECT count(*) = count(DISTINCT id) AND count(*) = 50000 "
                              "FROM over")
    assert primary.amcheck(relations=["over"]) == []
