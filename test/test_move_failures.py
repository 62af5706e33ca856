"""Moves that do not finish: crash, cancel, DROP, refusals that need a
cluster of their own.  After each: the table intact and in exactly one
tablespace, no orphan file, the job says what happened, moving again works.
"""

import os
import subprocess
import threading
import time

import psycopg
import pytest

from pgcluster import chown_to_server_user, make_server_dir

from moves import (assert_intact_in, job_row, make_table,
                   move_again_succeeds, move_paused_at, move_victim_while_copying, start_move,
                   tablespace_of, wait_for, wait_for_state, wait_job)


@pytest.mark.pg_conf("pg_tsmove.resume_after_restart = off")
@pytest.mark.parametrize("phase", ["copying", "catching_up"])
def test_crash_mid_move(primary, phase):
    """kill -9 of the postmaster while copying, or while catching up (a
    reader holds the lock the switch needs); after restart the launcher's
    recovery removes the new files and marks the job failed (resuming is
    off here; test_steering.py resumes)."""
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
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 0
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


@pytest.mark.pg_conf("pg_tsmove.resume_after_restart = off")
def test_terminated_worker_cleans_up(primary):
    """pg_terminate_backend() of the worker ends the job like a restart
    does: with resume_after_restart off, it fails and its files go."""
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


@pytest.mark.pg_conf("pg_tsmove.resume_after_restart = off")
def test_shutdown_mid_copy_then_restart(primary):
    """A fast shutdown stops the worker, which removes its files itself
    (resuming is off here)."""
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
    move_victim_while_copying(primary, max_rate_mb=8)
    primary.sql("DROP EXTENSION pg_tsmove")
    wait_for(lambda: primary.sql_scalar(
        "SELECT count(*) = 0 FROM pg_stat_activity "
        "WHERE backend_type = 'pg_tsmove worker'"), 60, what="the worker to exit")
    assert "could not record the end of job" in primary.log_contents()
    assert primary.row_hash("victim", "id") == expected
    assert tablespace_of(primary, "victim") == "ts_a"
    assert primary.orphan_files() == []


@pytest.mark.parametrize("phase, resume, state, survivor", [
    ("switching", "off", "failed", "ts_a"),
    ("switching", "on", None, None),
    ("warming", "on", "done", "ts_b")])
@pytest.mark.matrix
def test_crash_at_the_switch(primary, phase, resume, state, survivor):
    """kill -9 while the switch holds its exclusive lock with the catalog
    changed but not committed (the table stays where it was, the new files
    go; with resume_after_restart on, the move resumes unless the switch
    had already created the new FSM or VM), or just after the switch
    committed (the table is in its new place, the old files go).
    pg_tsmove.debug_pause_at holds the worker there."""
    expected = make_table(primary)
    primary.sql("VACUUM victim")           # an FSM and a VM to copy under the lock
    primary.sql("ALTER SYSTEM SET pg_tsmove.resume_after_restart = %s" % resume)
    job = move_paused_at(primary, phase)
    primary.kill9()
    primary.start()

    row = wait_for_state(primary, job, ("failed", "done"), 30)
    if state is None:
        # the FSM and VM were copied under the lock: not resumable
        assert row["state"] == "failed", row
        assert "interrupted during its switch" in row["error"]
        survivor = "ts_a"
    else:
        assert row["state"] == state, row
    assert_intact_in(primary, survivor, expected)
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 0
    if survivor == "ts_a":
        move_again_succeeds(primary, expected)


@pytest.mark.pg_conf("full_page_writes = off",
                     # adaptive pacing would see nobody working and free them at once
                     "pg_tsmove.pacing = fixed")
def test_crash_while_the_old_files_shrink(primary, standby):
    """After the switch the old files are shrunk a step at a time, each step
    WAL-logged, and dropped last.  After the first step the old file is
    smaller but still there, and the standby has shrunk its copy to the
    same size (not all at once when the drop replays).  kill -9 there:
    crash recovery replays changes of pages the step cut off (made after
    the last checkpoint, without full-page images), then the truncation;
    the recovery pass drops what is left of the old files, the job is done,
    the data intact, and the standby follows."""
    expected_rows = make_table(primary)
    old_path = primary.sql_scalar("SELECT pg_relation_filepath('victim')")
    old_size = os.path.getsize(os.path.join(primary.data_dir, old_path))
    primary.sql("CHECKPOINT")
    # changes of the file's last pages, after the redo point: replayed on
    # pages that the shrinking cut off
    primary.sql("UPDATE victim SET pad = repeat('w', 100) WHERE id > 199000")
    expected = primary.row_hash("victim", "id")
    assert expected != expected_rows
    job = move_paused_at(primary, "shrinking")
    assert job_row(primary, job)["state"] == "warming"
    shrunk = os.path.getsize(os.path.join(primary.data_dir, old_path))
    assert 0 < shrunk < old_size, (shrunk, old_size)
    primary.wait_for_replay(standby)
    assert os.path.getsize(os.path.join(standby.data_dir, old_path)) == shrunk
    primary.kill9()
    primary.start()

    row = wait_for_state(primary, job, ("failed", "done"), 30)
    assert row["state"] == "done", row
    assert "old files were removed" in row["error"]
    assert "invalid pages" not in primary.log_contents()
    assert_intact_in(primary, "ts_b", expected)
    assert not os.path.exists(os.path.join(primary.data_dir, old_path))
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots") == 0
    primary.wait_for_replay(standby)
    assert standby.row_hash("victim", "id") == expected
    assert list(standby.relation_files("victim")) == ["ts_b"]
    assert not os.path.exists(os.path.join(standby.data_dir, old_path))


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


@pytest.fixture
def full_tablespace(primary):
    """A tablespace ts_full on an 8 MB tmpfs: a move of victim into it runs
    out of space.  Skipped where tmpfs cannot be mounted (not root)."""
    location = os.path.join(primary.tablespace_root, "full")
    make_server_dir(location)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700",
                              "tmpfs", location], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs for a full disk: %s" % mounted.stderr.strip())
    try:
        chown_to_server_user(location)
        primary.sql("CREATE TABLESPACE ts_full LOCATION '%s'" % location)
        yield "ts_full"
    finally:
        primary.stop("immediate")
        subprocess.run(["umount", "-l", location], check=False)


def test_disk_full_fails_the_table_and_keeps_its_indexes(primary, full_tablespace):
    """with_indexes into a tablespace that fills up: the table's job fails
    with the disk's error, its index job never starts, the index stays
    where it was, the tablespace is left empty, and a move elsewhere works."""
    expected = make_table(primary)
    index_home = tablespace_of(primary, "victim_pkey")
    job = start_move(primary, "victim", full_tablespace, max_rate_mb=0, with_indexes=True)
    index_job = primary.sql_scalar("SELECT job_id FROM tsmove.job WHERE parent_job = %s", (job,))
    assert wait_job(primary, job, 60) == "failed"
    assert "No space left on device" in job_row(primary, job)["error"]
    assert wait_job(primary, index_job, 30) == "cancelled"
    assert job_row(primary, index_job)["error"] == \
        "not started: job %d, which it was queued behind, was failed" % job
    assert tablespace_of(primary, "victim_pkey") == index_home
    assert_intact_in(primary, "ts_a", expected)
    primary.sql("DROP TABLESPACE %s" % full_tablespace)    # nothing of ours left in it
    move_again_succeeds(primary, expected)


def test_cancelling_one_index_job_leaves_the_others(primary):
    """Cancelling one index job of a with_indexes chain ends that job only:
    the index jobs after it still run."""
    primary.sql("""
        CREATE TABLE chained (id int PRIMARY KEY, a int, b int) TABLESPACE ts_a;
        INSERT INTO chained SELECT g, g % 97, g * 2 FROM generate_series(1, 200000) g;
        CREATE INDEX chained_a ON chained (a) TABLESPACE ts_a;
        CREATE INDEX chained_b ON chained (b) TABLESPACE ts_a""")
    expected = primary.row_hash("chained", "id")
    home = {name: tablespace_of(primary, name)
            for name in ("chained_pkey", "chained_a", "chained_b")}
    job = start_move(primary, "chained", "ts_b", max_rate_mb=0.5, with_indexes=True)
    primary.sql("SELECT tsmove.set_rate(%s, 0)", (job,))
    index_jobs = dict(primary.sql(
        "SELECT relname, job_id FROM tsmove.job WHERE parent_job = %s", (job,)))
    assert sorted(index_jobs) == ["public.chained_a", "public.chained_b", "public.chained_pkey"]
    first = min(index_jobs.values())
    wait_for_state(primary, first, ("copying", "catching_up"), 60)
    assert primary.sql_scalar("SELECT tsmove.cancel(%s)", (first,)) is True
    assert wait_job(primary, first, 30) == "cancelled", job_row(primary, first)
    for relname, index_job in index_jobs.items():
        if index_job != first:
            primary.sql("SELECT tsmove.set_rate(%s, 0)", (index_job,))
            assert wait_job(primary, index_job, 60) == "done", relname
    placed = dict(primary.sql(
        "SELECT relname, job_id FROM tsmove.job WHERE parent_job = %s", (job,)))
    for relname, index_job in placed.items():
        want = home[relname.split(".")[1]] if index_job == first else "ts_b"
        assert tablespace_of(primary, relname) == want, relname
    assert tablespace_of(primary, "chained") == "ts_b"
    assert primary.row_hash("chained", "id") == expected
    assert primary.amcheck(relations=["chained"]) == []
    assert primary.orphan_files() == []


def test_error_after_the_switch_commit_keeps_the_new_files(primary):
    """The worker is stopped after the switch committed and before it could
    record the end (the extension is dropped meanwhile, so even the row is
    gone): the abort path must not drop the new files, which are the
    table's storage now, and drops the old ones, which the worker had not
    removed yet."""
    expected = make_table(primary)
    job = move_paused_at(primary, "warming")
    pid = primary.sql_scalar("SELECT pid FROM tsmove.jobs WHERE job_id = %s", (job,))
    primary.sql("DROP EXTENSION pg_tsmove")
    primary.sql("SELECT pg_terminate_backend(%s)", (pid,))
    wait_for(lambda: "could not record the end of job %d (done)" % job in primary.log_contents(),
             30, what="the worker to give up on the job row")
    primary.sql("SELECT pg_reload_conf()")
    assert primary.row_hash("victim", "id") == expected
    assert tablespace_of(primary, "victim") == "ts_b"
    assert list(primary.relation_files("victim")) == ["ts_b"]
    assert primary.amcheck(relations=["victim"]) == []
    assert primary.orphan_files() == []
