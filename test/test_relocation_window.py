"""What appears in a relocation's switch window (issue 26).

The switch lists the old location's files under its locks, then renames the
link; a file created in the tablespace in between stayed in the old
location, which the relocation then removed (a table created there lost all
but the rows that crash recovery replayed into the new link; a database
created or moved into it could not be entered again).  The creation guard
(src/relocation/relocation_guard.c) makes every statement that can create
storage wait for the switch, and refuses the database-level commands for
the whole relocation.  Each test here fails without it.
"""

import os
import threading
import time

import psycopg
import pytest

from moves import job_row, wait_for, wait_job
from test_relocation import (end_pause, location_of, new_location, relocate,
                             relocate_paused_at, set_pause)

ROWS = 20000

# Statements that create storage in ts_a, each in a session of its own with
# its settings, run while the switch holds its locks after its last look.
RACERS = {
    "create_table": ([], "CREATE TABLE r_table (id int PRIMARY KEY, pad text) TABLESPACE ts_a"),
    "default_tablespace": (["SET default_tablespace = ts_a"],
                           "CREATE TABLE r_default (id int PRIMARY KEY, pad text)"),
    "create_table_as": ([], "CREATE TABLE r_ctas TABLESPACE ts_a AS "
                            "SELECT g AS id, repeat('c', 100) AS pad FROM generate_series(1, %d) g"
                            % ROWS),
    "matview": ([], "CREATE MATERIALIZED VIEW r_matview TABLESPACE ts_a AS "
                    "SELECT g AS id, repeat('m', 100) AS pad FROM generate_series(1, %d) g"
                    % ROWS),
    "set_tablespace": ([], "ALTER TABLE r_moved SET TABLESPACE ts_a"),
    "index": ([], "CREATE INDEX r_index ON r_elsewhere (id) TABLESPACE ts_a"),
}


def run_in_thread(cluster, settings, statement, results, key):
    def target():
        try:
            with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
                for s in settings:
                    conn.execute(s)
                conn.execute(statement)
            results[key] = "done at %.3f" % time.monotonic()
        except Exception as e:          # reported by the assertions below
            results[key] = "error: %s" % e
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def waiting_on_guard(cluster):
    """Sessions waiting for the creation guard (pg_tablespace's object 0)."""
    return cluster.sql_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND NOT granted "
        "AND classid = 'pg_tablespace'::regclass AND objid = 0")


def files_under(directory):
    found = set()
    for root, _, files in os.walk(directory):
        found.update(f for f in files if f[0].isdigit())
    return found


@pytest.mark.matrix
def test_storage_created_in_the_switch_window_waits_for_it(primary):
    """While the switch holds its locks after its last look (pause at
    'switching'), statements that create storage in the tablespace (CREATE
    TABLE with TABLESPACE or through default_tablespace, CREATE TABLE AS, a
    materialized view, ALTER TABLE ... SET TABLESPACE into it, CREATE INDEX
    into it) wait; they run after the rename, their files are in the new
    location only; the table is filled, checkpointed, a row updated, and a
    kill -9 right after: every row is there after recovery, once."""
    primary.sql("CREATE TABLE r_moved (id int PRIMARY KEY, pad text) TABLESPACE ts_b;"
                "INSERT INTO r_moved SELECT g, repeat('s', 100) FROM generate_series(1, %d) g;"
                "CREATE TABLE r_elsewhere (id int) TABLESPACE ts_b;"
                "INSERT INTO r_elsewhere SELECT generate_series(1, %d);"
                "CREATE TABLE kept (id int PRIMARY KEY) TABLESPACE ts_a;"
                "INSERT INTO kept SELECT generate_series(1, 1000)" % (ROWS, ROWS))
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "switching", new)
    results, threads = {}, []
    for key, (settings, statement) in RACERS.items():
        threads.append(run_in_thread(primary, settings, statement, results, key))
    wait_for(lambda: waiting_on_guard(primary) == len(RACERS), 30,
             what="every racing statement to wait for the guard")
    time.sleep(1)
    assert results == {}, results               # none ran in the window
    assert location_of(primary, "ts_a") == old
    end_pause(primary)
    for t in threads:
        t.join(120)
    assert all(v.startswith("done") for v in results.values()), results
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new

    primary.sql("INSERT INTO r_table SELECT g, repeat('t', 100) FROM generate_series(1, %d) g;"
                "INSERT INTO r_default SELECT g, repeat('d', 100) FROM generate_series(1, %d) g"
                % (ROWS, ROWS))
    primary.sql("CHECKPOINT")
    primary.sql("UPDATE r_table SET pad = 'changed' WHERE id = 7")
    primary.kill9()
    primary.start()

    for table in ("r_table", "r_default", "r_ctas", "r_matview", "r_moved"):
        live, keys = primary.sql("SELECT count(*), count(DISTINCT id) FROM %s" % table)[0]
        assert (live, keys) == (ROWS, ROWS), table
    assert primary.sql_scalar("SELECT pad FROM r_table WHERE id = 7") == "changed"
    assert primary.sql_scalar("SELECT count(*) FROM r_elsewhere WHERE id > 0") == ROWS
    old_files, new_files = files_under(old), files_under(new)
    for rel in ("r_table", "r_default", "r_ctas", "r_matview", "r_moved", "r_index"):
        filenode = os.path.basename(primary.sql_scalar(
            "SELECT pg_relation_filepath(%s)", (rel,)))
        assert filenode in new_files and filenode not in old_files, rel
    assert primary.amcheck() == []


def test_database_commands_refused_during_a_relocation(primary):
    """CREATE DATABASE into the tablespace, from a template with files in
    it, and ALTER DATABASE ... SET TABLESPACE into it are refused while a
    relocation of it runs, with what to do; CREATE DATABASE that touches
    another tablespace is not.  After the relocation, each works and the
    databases can be entered."""
    primary.sql("CREATE DATABASE db2")
    primary.sql("CREATE DATABASE tmpl")
    primary.sql("CREATE TABLE t (id int) TABLESPACE ts_a; INSERT INTO t VALUES (1)",
                dbname="tmpl")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new)
    refusals = {
        "CREATE DATABASE db3 TABLESPACE ts_a": "cannot create database \"db3\"",
        "CREATE DATABASE db4 TEMPLATE tmpl": "cannot create database \"db4\"",
        "ALTER DATABASE db2 SET TABLESPACE ts_a": "cannot alter database \"db2\"",
    }
    for statement, message in refusals.items():
        with pytest.raises(psycopg.errors.ObjectInUse) as refused:
            primary.sql(statement)
        assert message in str(refused.value), statement
        assert "is being relocated" in str(refused.value)
        assert refused.value.diag.message_hint.startswith("Wait for the relocation to end")
    primary.sql("CREATE DATABASE db5 TABLESPACE ts_b")        # not relocated: fine
    assert primary.sql_scalar("SELECT count(*) FROM pg_database "
                              "WHERE datname IN ('db3', 'db4')") == 0
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    for statement in refusals:
        primary.sql(statement)
    for db in ("db2", "db3", "db4", "db5"):
        assert primary.sql_scalar("SELECT 1", dbname=db) == 1
    assert primary.sql_scalar("SELECT count(*) FROM t", dbname="db4") == 1
    assert primary.sql_scalar("SELECT datname FROM pg_database d JOIN pg_tablespace t "
                              "ON t.oid = d.dattablespace WHERE t.spcname = 'ts_a' "
                              "ORDER BY 1 LIMIT 1") == "db2"


def test_recovery_keeps_old_files_longer_than_their_copies(primary):
    """The recovery pass after a crash that followed the rename never decides
    from a name alone: a file whose copy in the new location is shorter
    than the old one (as crash recovery leaves a file that raced the rename,
    recreated through the new link below the pages it replayed) keeps the
    old location, with the job failed and a warning saying so; without the
    check the old location, holding the only full copy, was removed."""
    primary.sql("CREATE TABLE kept (id int PRIMARY KEY, pad text) TABLESPACE ts_a;"
                "INSERT INTO kept SELECT g, repeat('k', 100) FROM generate_series(1, %d) g"
                % ROWS)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    rel_path = primary.sql_scalar("SELECT pg_relation_filepath('kept')")
    version_dir_and_file = rel_path.split("/", 2)[2]       # PG_.../<db>/<filenode>
    job = relocate_paused_at(primary, "warming", new)      # renamed, stragglers next
    old_file = os.path.join(old, version_dir_and_file)
    new_file = os.path.join(new, version_dir_and_file)
    full_size = os.path.getsize(old_file)
    assert os.path.getsize(new_file) == full_size > 8192
    os.truncate(new_file, 8192)                            # what a racing replay leaves
    primary.kill9()
    primary.start()
    state = wait_for(lambda: (lambda s: s if s in ("done", "failed") else None)(
        job_row(primary, job)["state"]), 60, what="the recovery pass")
    assert state == "failed", job_row(primary, job)
    assert "was kept" in job_row(primary, job)["error"]
    assert os.path.getsize(old_file) == full_size          # the full copy is still there
    assert "is longer than its copy" in primary.log_contents()
