"""Backups seen by what they do: the attacks of a review, kept as tests.

A base backup that runs across a relocation's switch must postpone it, and
nothing else may: a walsender whose BASE_BACKUP has ended, a backup that
began after the switch (it reads the new location), a session whose
transaction ended with PREPARE TRANSACTION.  Also seen: a second SQL
declaration of pg_backup_start's C code, and every route that sets up the
call in one transaction and makes it in the next.  Each of the first four
failed before the fixes that came with them.
"""

import ctypes
import os
import time

import pytest

from moves import job_row, wait_for, wait_job
from test_relocation import (end_pause, job_note, location_of, new_location, relocate,
                             relocate_paused_at)
from test_relocation_backups import libpq, small_table


# ---- a raw replication connection (psycopg cannot run BASE_BACKUP) ---------------

def repl_lib():
    lib = libpq()
    lib.PQsendQuery.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.PQgetResult.restype = ctypes.c_void_p
    lib.PQgetResult.argtypes = [ctypes.c_void_p]
    lib.PQgetCopyData.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
    lib.PQfreemem.argtypes = [ctypes.c_void_p]
    lib.PQresultErrorMessage.restype = ctypes.c_char_p
    lib.PQresultErrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQbackendPID.argtypes = [ctypes.c_void_p]
    return lib


def replication_connect(cluster):
    lib = repl_lib()
    conn = lib.PQconnectdb((cluster.conninfo() + " replication=true").encode())
    assert lib.PQstatus(conn) == 0, lib.PQerrorMessage(conn)
    return lib, conn


def run_replication_command(lib, conn, command):
    """Send command, drain every result and COPY stream; returns the bytes
    of COPY data received.  Raises on an error result."""
    assert lib.PQsendQuery(conn, command.encode()) == 1, lib.PQerrorMessage(conn)
    received = 0
    while True:
        res = lib.PQgetResult(conn)
        if not res:
            return received
        status = lib.PQresultStatus(res)
        err = lib.PQresultErrorMessage(res)
        lib.PQclear(res)
        if status == 7:             # PGRES_FATAL_ERROR
            raise RuntimeError(err)
        if status == 3:             # PGRES_COPY_OUT
            buf = ctypes.c_void_p()
            while True:
                n = lib.PQgetCopyData(conn, ctypes.byref(buf), 0)
                if n > 0:
                    received += n
                    lib.PQfreemem(buf)
                elif n == -1:
                    break
                else:
                    raise RuntimeError(lib.PQerrorMessage(conn))


def walsender_states(cluster):
    return cluster.sql("SELECT pid, state FROM pg_stat_replication ORDER BY pid")


# ---- 1. a finished BASE_BACKUP leaves its walsender in 'backup' forever -----------

def test_finished_base_backup_on_an_open_connection_postpones_nothing(primary):
    """A client takes a complete BASE_BACKUP over a replication connection
    and keeps the connection open (idle).  No backup runs any more
    (pg_stat_progress_basebackup is empty, the backup ended) -- yet the
    walsender's state stays WALSNDSTATE_BACKUP until it exits, and the
    relocation's switch waits for it for as long as the connection lives."""
    digest = small_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    lib, conn = replication_connect(primary)
    try:
        received = run_replication_command(
            lib, conn, "BASE_BACKUP (LABEL 'done already', CHECKPOINT 'fast')")
        assert received > 0
        # the backup is over: no progress row, but the walsender says 'backup'
        assert primary.sql_scalar("SELECT count(*) FROM pg_stat_progress_basebackup") == 0
        assert walsender_states(primary) == [(lib.PQbackendPID(conn), "backup")]
        job = relocate(primary, "ts_a", new)
        time.sleep(15)
        note, state = job_note(primary, job), job_row(primary, job)["state"]
        still_old = location_of(primary, "ts_a") == old
    finally:
        lib.PQfinish(conn)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert primary.row_hash("kept", "id") == digest
    assert not still_old, ("switch postponed by an idle walsender whose backup ended: "
                           "state %r, note %r" % (state, note))


# ---- 2. a walsender connected before the switch, BASE_BACKUP after it --------------

def test_base_backup_after_the_switch_does_not_hold_the_old_files(primary):
    """A replication connection opened before the relocation; the relocation
    switches (paused at 'warming'); only then the connection takes a
    BASE_BACKUP, which reads the new location, and stays open.  finish
    takes the walsender's process start for the backup's start, so it waits
    'for pg_basebackup ..., which began before the switch' -- for as long as
    the connection lives (the state stays 'backup')."""
    small_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    lib, conn = replication_connect(primary)
    try:
        time.sleep(1.1)
        job = relocate_paused_at(primary, "warming", new)
        assert location_of(primary, "ts_a") == new      # switched
        run_replication_command(lib, conn, "BASE_BACKUP (LABEL 'after the switch', "
                                           "CHECKPOINT 'fast')")
        end_pause(primary)
        time.sleep(10)
        note, state = job_note(primary, job), job_row(primary, job)["state"]
        note += " | progress note: %r" % primary.sql(
            "SELECT note FROM tsmove.job_progress() WHERE job_id = %s", (job,))
        old_files_kept = any(e.startswith("PG_") for e in os.listdir(old))
        t0 = time.monotonic()
    finally:
        lib.PQfinish(conn)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    note += " | done %.1fs after the connection closed" % (time.monotonic() - t0)
    assert not old_files_kept, ("finish held the old files for a backup that began after "
                                "the switch and had ended: state %r, note %r" % (state, note))


# ---- 3. PREPARE TRANSACTION ends a transaction without refresh_mark --------------

@pytest.mark.pg_conf("max_prepared_transactions = 4")
def test_prepared_transaction_leaves_no_mark(primary):
    """A session with EXECUTE on pg_backup_start() calls it and
    pg_backup_stop() in one transaction and ends that transaction with
    PREPARE TRANSACTION: no backup runs, the session is idle outside any
    transaction; refresh_mark() ignores XACT_EVENT_PREPARE, so the mark
    stays and postpones the switch until the session's next transaction."""
    digest = small_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    with primary.conn() as session:
        session.execute("BEGIN")
        session.execute("SELECT pg_backup_start('prepared', true)")
        session.execute("SELECT pg_backup_stop(false)")
        session.execute("PREPARE TRANSACTION 'p1'")
        job = relocate(primary, "ts_a", new)
        time.sleep(10)
        note, still_old = job_note(primary, job), location_of(primary, "ts_a") == old
        session.execute("SELECT 1")         # its next transaction clears it
        assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    primary.sql("COMMIT PREPARED 'p1'")
    assert primary.row_hash("kept", "id") == digest
    assert not still_old, "idle session without backup postponed the switch: %r" % note


def test_backup_started_through_an_alias_postpones_the_switch(primary):
    """pg_backup_start's C function declared again (LANGUAGE internal, as a
    superuser may, to grant it to a backup role under a site-specific name):
    a backup started through it postpones the switch, and the old files stay,
    until it ends.  Before the fix the hook compared OIDs only: the switch
    and the removal happened under the running backup, which had listed
    the old location (pg_tablespace_location, as pgBackRest does)."""
    digest = small_table(primary)
    primary.sql("CREATE FUNCTION public.site_backup_start(text, boolean) RETURNS pg_lsn "
                "LANGUAGE internal VOLATILE STRICT AS 'pg_backup_start'")
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    with primary.conn() as session:
        session.execute("SELECT public.site_backup_start('alias', true)")
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: "pg_backup_start" in job_note(primary, job), 60,
                 what="the switch to wait for the backup")
        time.sleep(2)
        assert location_of(primary, "ts_a") == old
        assert any(e.startswith("PG_") for e in os.listdir(old))
        session.execute("SELECT * FROM pg_backup_stop(false)")
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new
    assert primary.row_hash("kept", "id") == digest


# ---- routes that should be (and are) seen: set-up in one transaction, call in the next

HELD_ROUTES = {
    # generic plan cached while its CASE branch was not taken; the call in a
    # later transaction: ExecutorStart runs again, so does the hook
    "generic_plan": [
        "SET plan_cache_mode = force_generic_plan",
        "PREPARE s(bool) AS SELECT CASE WHEN $1 THEN pg_backup_start('generic', true) END",
        "EXECUTE s(false)", "EXECUTE s(false)", "EXECUTE s(true)"],
    # a PL/pgSQL simple expression initialised (branch not taken) before a
    # COMMIT, evaluated (branch taken) after it
    "procedure_commit": [
        "CREATE PROCEDURE pg_temp_p() LANGUAGE plpgsql AS $$DECLARE l pg_lsn; BEGIN "
        "FOR i IN 1..2 LOOP l := CASE WHEN i = 2 THEN pg_backup_start('proc', true) END; "
        "COMMIT; END LOOP; END$$",
        "CALL pg_temp_p()"],
    "holdable_cursor": [
        "BEGIN",
        "DECLARE c CURSOR WITH HOLD FOR SELECT pg_backup_start('cursor', true)",
        "COMMIT", "FETCH ALL FROM c"],
    "inlined_sql_function": [
        "CREATE FUNCTION inl() RETURNS pg_lsn LANGUAGE sql AS "
        "'SELECT pg_backup_start(''inlined'', true)'",
        "SELECT inl()"],
    "trigger": [
        "CREATE TABLE trg_t (i int)",
        "CREATE FUNCTION trg() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN "
        "PERFORM pg_backup_start('trigger', true); RETURN NEW; END$$",
        "CREATE TRIGGER trg BEFORE INSERT ON trg_t FOR EACH ROW EXECUTE FUNCTION trg()",
        "INSERT INTO trg_t VALUES (1)"],
    "subtransaction_rollback": [
        "BEGIN", "SAVEPOINT a", "SELECT pg_backup_start('savepoint', true)",
        "ROLLBACK TO a", "COMMIT"],
}


@pytest.mark.parametrize("route", list(HELD_ROUTES))
def test_held_route_postpones_the_switch(primary, route):
    small_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    with primary.conn() as session:
        for statement in HELD_ROUTES[route]:
            session.execute(statement)
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: "pg_backup_start" in job_note(primary, job) or
                 job_row(primary, job)["state"] == "done", 60, what="the switch to look")
        time.sleep(2)
        assert location_of(primary, "ts_a") == old, job_row(primary, job)
        session.execute("SELECT * FROM pg_backup_stop(false)")
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)


def test_backup_started_in_a_walsender_sql_session_postpones(primary):
    """replication=database accepts SQL: pg_backup_start() from a walsender
    (its BackendId indexes the marks)."""
    small_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    lib = repl_lib()
    conn = lib.PQconnectdb((primary.conninfo() + " replication=database").encode())
    assert lib.PQstatus(conn) == 0, lib.PQerrorMessage(conn)
    try:
        run_replication_command(lib, conn, "SELECT pg_backup_start('walsender sql', true)")
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: "pg_backup_start" in job_note(primary, job) or
                 job_row(primary, job)["state"] == "done", 60, what="the switch to look")
        time.sleep(2)
        assert location_of(primary, "ts_a") == old, job_row(primary, job)
    finally:
        lib.PQfinish(conn)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)


@pytest.mark.pg_conf("max_wal_senders = 0")
def test_no_walsenders(primary):
    small_table(primary)
    new = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
