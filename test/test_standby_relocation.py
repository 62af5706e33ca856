"""tsmove.relocate_tablespace() on a hot standby moves that standby's own
copy of the tablespace (issue 28), online: its queries go on and are never
cancelled, replay is held only for the switch's milliseconds, and the
primary is not involved.  The job is recorded in the standby's data
directory (a local job) and tsmove.jobs there shows it.
"""

import os
import threading
import time

import psycopg
import pytest

from integrity import ShadowTpcb
from moves import start_long_reader, wait_for, wait_job
from test_relocation import end_pause, location_of, new_location, set_pause


def standby_relocate(standby, location, tablespace="ts_a", rate=None):
    """relocate_tablespace() on the standby; returns the local job's id."""
    return standby.sql_scalar(
        "SELECT tsmove.relocate_tablespace(%s, %s, max_rate_mb => %s::numeric)",
        (tablespace, location, rate))


def job_state(cluster, job):
    return cluster.sql_scalar("SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,))


def wait_local_job(standby, job, timeout_s=120):
    """Poll the job's state with short statements until it ends (a single
    tsmove.wait() would be a standby query holding one snapshot, which
    replay may cancel like any other); returns the state."""
    return wait_for(lambda: (lambda s: s if s in ("done", "failed", "cancelled") else None)(
        job_state(standby, job)), timeout_s, interval_s=0.2, what="job %d to end" % job)


# What keeps a standby's queries from being cancelled by the primary's own
# cleanup: the tests check that the relocation cancels none.
STANDBY_CONF = ["hot_standby_feedback = on"]


def files_under(path):
    found = []
    for root, _, names in os.walk(path):
        found += [os.path.join(root, n) for n in names]
    return found


def same_data(primary, standby, tables):
    primary.wait_for_replay(standby)
    for table, key in tables:
        for cluster in (primary, standby):
            assert cluster.sql_scalar("SELECT count(*) = count(DISTINCT %s) FROM %s"
                                      % (key, table))
        assert primary.row_hash(table, key) == standby.row_hash(table, key), table
    assert standby.amcheck() == []


@pytest.mark.matrix
def test_a_standby_relocates_its_own_copy_under_load(primary):
    """TPC-B (with a shadow table) on the primary, a long query on the
    standby: the standby's copy of ts_a moves to a new directory; the
    standby's query is not cancelled, replay goes on, the primary's
    location is untouched, and the standby's data passes the logical
    checks and equals the primary's, before and after a restart."""
    shadow = ShadowTpcb(primary, scale=5, tablespace="ts_a")
    standby = primary.make_standby("standby", extra_conf=STANDBY_CONF)
    primary.sql("CHECKPOINT")
    primary.wait_for_replay(standby)
    standby.sql("CHECKPOINT")                   # a restartpoint after ts_a's creation
    old_dir = location_of(standby, "ts_a")
    primary_location = location_of(primary, "ts_a")
    new_dir = new_location(standby, "relocated")

    reader = start_long_reader(standby, "pgbench_accounts", 20)
    bench = shadow.run_background(seconds=20, clients=2, jobs=1)
    job = standby_relocate(standby, new_dir)
    assert job >= 10 ** 12
    assert wait_local_job(standby, job) == "done", standby.sql(
        "SELECT state, error FROM tsmove.jobs WHERE job_id = %s", (job,))
    bench.wait()
    reader.join(60)
    assert reader.sqlstate is None, reader.sqlstate
    assert "conflict with recovery" not in standby.log_contents()

    assert location_of(standby, "ts_a") == new_dir
    assert location_of(primary, "ts_a") == primary_location
    assert not [f for f in files_under(old_dir) if "/PG_" in f], "old files left"
    assert standby.sql("SELECT state, job_kind, relname, new_location, old_location "
                       "FROM tsmove.jobs WHERE job_id = %s", (job,)) == \
        [("done", "relocate", "ts_a", new_dir, old_dir)]
    # the primary's tsmove.jobs does not show the standby's job
    assert primary.sql_scalar("SELECT count(*) FROM tsmove.jobs WHERE job_id = %s",
                              (job,)) == 0

    primary.wait_for_replay(standby)
    assert shadow.problems() == []
    assert shadow.problems(standby) == []
    same_data(primary, standby, [("pgbench_accounts", "aid"), ("pgbench_branches", "bid"),
                                 ("shadow_accounts", "aid")])
    standby.restart()
    same_data(primary, standby, [("pgbench_accounts", "aid")])


def standby_paused_at(primary, phase, rate=None):
    """A standby of primary (TPC-B data in ts_a), its relocation paused at
    phase; returns (shadow, standby, job, old_dir, new_dir)."""
    shadow = ShadowTpcb(primary, scale=2, tablespace="ts_a")
    standby = primary.make_standby("standby", extra_conf=STANDBY_CONF)
    primary.sql("CHECKPOINT")
    primary.wait_for_replay(standby)
    standby.sql("CHECKPOINT")
    old_dir = location_of(standby, "ts_a")
    new_dir = new_location(standby, "relocated")
    set_pause(standby, phase)
    job = standby_relocate(standby, new_dir, rate=rate)
    wait_for(lambda: "job %d pauses at %s" % (job, phase) in standby.log_contents(), 60,
             what="the pause at " + phase)
    return shadow, standby, job, old_dir, new_dir


def version_dir_files(location):
    return [f for f in files_under(location) if "/PG_" in f]


def check_after(primary, standby, shadow, job, old_dir, new_dir):
    """The job ended, the link and the files agree with how it ended, and
    the standby's data passes the checks and equals the primary's."""
    state = wait_local_job(standby, job)
    assert primary.amcheck() == []              # and CREATE EXTENSION amcheck, for the standby
    link = location_of(standby, "ts_a")
    if state == "done":
        assert link == new_dir and version_dir_files(old_dir) == []
    else:
        assert link == old_dir and version_dir_files(new_dir) == []
    primary.wait_for_replay(standby)
    assert shadow.problems(standby) == []
    same_data(primary, standby, [("pgbench_accounts", "aid"), ("shadow_accounts", "aid")])
    return state


@pytest.mark.matrix
@pytest.mark.parametrize("phase,expected", [("copying", "failed"), ("renaming", "failed"),
                                            ("warming", "done")])
def test_kill9_of_the_standby_in_each_phase(primary, phase, expected):
    """The standby is killed (-9) with its relocation paused at phase while
    TPC-B runs on the primary; after restart the recovery pass finishes or
    undoes the job (the link is the truth), and nothing is lost."""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, phase)
    bench = shadow.run_background(seconds=6, clients=2, jobs=1)
    time.sleep(2)
    standby.kill9()
    end_pause_file(standby)
    standby.start()
    bench.wait()
    assert check_after(primary, standby, shadow, job, old_dir, new_dir) == expected
    assert standby.sql_scalar("SELECT pg_is_in_recovery()")


def end_pause_file(cluster):
    """Reset pg_tsmove.debug_pause_at in postgresql.auto.conf of a stopped
    cluster, so that it starts without it."""
    path = os.path.join(cluster.data_dir, "postgresql.auto.conf")
    with open(path) as f:
        lines = [line for line in f if "pg_tsmove.debug_pause_at" not in line]
    with open(path, "w") as f:
        f.writelines(lines)


@pytest.mark.matrix
def test_promotion_before_the_switch_undoes_the_relocation(primary):
    """The standby is promoted while its relocation copies: the job fails,
    its new location is removed, the promoted server keeps the tablespace
    where it was and takes writes."""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, "copying")
    primary.wait_for_replay(standby)
    standby.sql("SELECT pg_promote()")
    wait_for(lambda: not standby.sql_scalar("SELECT pg_is_in_recovery()"), 30,
             what="the promotion")
    end_pause(standby)
    assert wait_local_job(standby, job) == "failed"
    assert "promoted" in standby.sql_scalar("SELECT error FROM tsmove.jobs WHERE job_id = %s",
                                            (job,))
    assert location_of(standby, "ts_a") == old_dir and version_dir_files(new_dir) == []
    standby.sql("BEGIN; UPDATE pgbench_accounts SET abalance = abalance + 7 WHERE aid = 1;"
                "UPDATE pgbench_tellers SET tbalance = tbalance + 7 WHERE tid = 1;"
                "UPDATE pgbench_branches SET bbalance = bbalance + 7 WHERE bid = 1;"
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) "
                "VALUES (1, 1, 1, 7, now());"
                "UPDATE shadow_accounts SET abalance = abalance + 7 WHERE aid = 1; COMMIT")
    assert shadow.problems(standby) == []


@pytest.mark.matrix
def test_promotion_in_the_switch_window_restarts_the_standby(primary):
    """The standby is promoted with pg_ctl (nothing can hold that back)
    after its switch renamed the link and before it looked again: the
    worker stops the server (PANIC), crash recovery replays into the new
    files, the job is done, and the promoted server has every row.  (On
    19 the promotion itself waits for the worker, which holds interrupts
    in the window: it ends only with the crash, and is asked again, as a
    failover manager would.)"""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, "warming")
    # everything was replayed before the pause (standby_paused_at); replay
    # is paused now, so it cannot be waited for
    expected = primary.row_hash("pgbench_accounts", "aid")
    primary.stop()
    run_pg_ctl(standby, "promote", "-W")
    wait_for(lambda: "received promote request" in standby.log_contents(), 60,
             what="the promotion request")
    standby.sql("ALTER SYSTEM RESET pg_tsmove.debug_pause_at")
    # the PANIC may come before this session's reply
    _ignore_errors(standby.sql, "SELECT pg_reload_conf()")
    wait_for(lambda: "PANIC" in standby.log_contents(), 60, what="the PANIC")
    wait_for(lambda: "all server processes terminated; reinitializing" in
             standby.log_contents(), 60, what="the restart after the PANIC")
    wait_for(lambda: accepts_connections(standby), 120, what="connections after the restart")
    if standby.sql_scalar("SELECT pg_is_in_recovery()"):
        run_pg_ctl(standby, "promote")          # the crash took the request with it
    wait_for(lambda: not standby.sql_scalar("SELECT pg_is_in_recovery()"), 60,
             what="the promotion")
    assert wait_local_job(standby, job) == "done"
    assert location_of(standby, "ts_a") == new_dir
    assert version_dir_files(old_dir) == []
    assert standby.row_hash("pgbench_accounts", "aid") == expected
    assert shadow.problems(standby) == []


def accepts_connections(cluster):
    try:
        return cluster.sql_scalar("SELECT true")
    except psycopg.Error:
        return False


def run_pg_ctl(cluster, *args):
    from pgcluster import PG_BIN, run_server_program
    run_server_program([os.path.join(PG_BIN, "pg_ctl")] + list(args) + ["-D", cluster.data_dir])


@pytest.mark.matrix
def test_replay_resume_waits_for_the_switch(primary):
    """With replay paused for the switch, pg_wal_replay_resume() waits
    until the switch has ended, then returns; replay goes on."""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, "renaming")
    assert standby.sql_scalar("SELECT pg_get_wal_replay_pause_state()") == "paused"
    caller = threading.Thread(target=lambda: standby.sql("SELECT pg_wal_replay_resume()"),
                              daemon=True)
    caller.start()
    wait_for(lambda: standby.sql_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"), 10,
        what="the resume call to wait")
    assert standby.sql_scalar("SELECT pg_get_wal_replay_pause_state()") == "paused"
    end_pause(standby)
    caller.join(60)
    assert not caller.is_alive()
    assert check_after(primary, standby, shadow, job, old_dir, new_dir) == "done"
    assert standby.sql_scalar("SELECT pg_get_wal_replay_pause_state()") == "not paused"


@pytest.mark.matrix
def test_cancel_of_a_standby_relocation(primary):
    """tsmove.cancel() on the standby stops its relocation: cancelled, the
    new location removed, replay never left paused."""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, "copying")
    assert standby.sql_scalar("SELECT tsmove.cancel(%s)", (job,))
    end_pause(standby)
    assert check_after(primary, standby, shadow, job, old_dir, new_dir) == "cancelled"
    assert standby.sql_scalar("SELECT pg_get_wal_replay_pause_state()") == "not paused"


def test_a_terminated_standby_worker_is_recovered(primary):
    """pg_terminate_backend() of the standby's worker, its job paused in the
    copy: the launcher, which saw the worker, recovers the job once its slot
    is free (failed, the new location removed), replay is not left paused,
    and the next relocation runs."""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, "copying")
    pid = standby.sql_scalar("SELECT pid FROM tsmove.jobs WHERE job_id = %s", (job,))
    assert pid
    standby.sql("SELECT pg_terminate_backend(%s)", (pid,))
    assert check_after(primary, standby, shadow, job, old_dir, new_dir) == "failed"
    assert standby.sql_scalar("SELECT pg_get_wal_replay_pause_state()") == "not paused"
    end_pause(standby)
    again = standby_relocate(standby, new_dir)
    assert check_after(primary, standby, shadow, again, old_dir, new_dir) == "done"


@pytest.mark.matrix
def test_a_base_backup_of_the_standby_across_its_relocation(primary):
    """pg_basebackup from the standby (slowed down) starts while the
    standby's relocation copies: the switch waits for it to end, the job
    is done afterwards, and the backup, started as a standby of the
    standby, has every row."""
    shadow, standby, job, old_dir, new_dir = standby_paused_at(primary, "copying")
    backup = {}

    def take():
        try:
            backup["cluster"] = standby.make_standby("restored", max_rate="1M",
                                                     extra_conf=STANDBY_CONF)
        except Exception as e:                  # reported by the assertion below
            backup["error"] = e
    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    wait_for(lambda: standby.sql_scalar("SELECT count(*) FROM pg_stat_progress_basebackup"),
             30, what="the base backup to start")
    end_pause(standby)
    wait_for(lambda: "pg_basebackup" in (standby.sql_scalar(
        "SELECT error FROM tsmove.jobs WHERE job_id = %s", (job,)) or ""), 60,
        what="the switch to wait for the backup")
    assert job_state(standby, job) != "done"
    taker.join(300)
    assert "error" not in backup, backup.get("error")
    assert check_after(primary, standby, shadow, job, old_dir, new_dir) == "done"
    restored = backup["cluster"]
    standby.sql("CHECKPOINT")
    primary.wait_for_replay(standby)
    wait_for(lambda: restored.sql_scalar(
        "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
        (standby.sql_scalar("SELECT pg_last_wal_replay_lsn()"),)), 60,
        what="the restored copy to catch up")
    assert shadow.problems(restored) == []
    assert restored.row_hash("pgbench_accounts", "aid") == primary.row_hash(
        "pgbench_accounts", "aid")
    assert restored.amcheck() == []


@pytest.mark.matrix
def test_a_cascading_standby_goes_on_while_its_upstream_relocates(primary):
    """A standby of the standby replays through the middle one's
    relocation under TPC-B: it is never stopped, keeps its own location,
    and ends with the primary's rows."""
    shadow = ShadowTpcb(primary, scale=2, tablespace="ts_a")
    standby = primary.make_standby("standby", extra_conf=STANDBY_CONF)
    primary.sql("CHECKPOINT")
    primary.wait_for_replay(standby)
    standby.sql("CHECKPOINT")
    cascade = standby.make_standby("cascade", extra_conf=STANDBY_CONF)
    cascade_location = location_of(cascade, "ts_a")
    old_dir = location_of(standby, "ts_a")
    new_dir = new_location(standby, "relocated")
    bench = shadow.run_background(seconds=12, clients=2, jobs=1)
    job = standby_relocate(standby, new_dir)
    assert wait_local_job(standby, job) == "done"
    bench.wait()
    assert check_after(primary, standby, shadow, job, old_dir, new_dir) == "done"
    assert location_of(cascade, "ts_a") == cascade_location
    target = standby.sql_scalar("SELECT pg_last_wal_replay_lsn()")
    wait_for(lambda: cascade.sql_scalar("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                        (target,)), 60, what="the cascade to catch up")
    assert shadow.problems(cascade) == []
    assert cascade.row_hash("pgbench_accounts", "aid") == primary.row_hash(
        "pgbench_accounts", "aid")
    assert cascade.amcheck() == []
    assert cascade.sql_scalar("SELECT count(*) FROM tsmove.jobs") == 0


@pytest.mark.matrix
def test_a_checkpoint_after_a_promotion_in_the_window_loses_nothing(primary):
    """(A hostile review's attack.)  The standby is promoted just after its
    switch's last look, writes 20 000 rows (with a small buffer pool, so
    that backends write pages through old descriptors) and asks for a
    checkpoint, before the rename.  No checkpoint completes until the
    worker has looked again and stopped the server: crash recovery replays
    the rows into the new files, and all 22 000 are there."""
    primary.sql("CREATE TABLE big (id int, pad text) TABLESPACE ts_a;"
                "INSERT INTO big SELECT g, repeat('b', 500) FROM generate_series(1, 2000) g")
    standby = primary.make_standby("standby", extra_conf=STANDBY_CONF + ["shared_buffers = '1MB'"])
    primary.sql("CHECKPOINT")
    primary.wait_for_replay(standby)
    standby.sql("CHECKPOINT")
    new_dir = new_location(standby, "relocated")
    set_pause(standby, "renaming")
    job = standby_relocate(standby, new_dir)
    wait_for(lambda: "job %d pauses at renaming" % job in standby.log_contents(), 60,
             what="the pause at renaming")
    primary.stop()
    run_pg_ctl(standby, "promote", "-W")
    try:
        wait_for(lambda: not standby.sql_scalar("SELECT pg_is_in_recovery()"), 10,
                 what="the promotion")
    except AssertionError:
        # 19: the end of recovery waits for the switch's held checkpoints,
        # so the promoted server cannot write inside the window at all
        end_pause_and_outlive_the_panic(standby, panic_timeout=120)
        assert standby.sql_scalar("SELECT count(*) FROM big") == 2000
        assert wait_local_job(standby, job) in ("done", "failed")
        return
    standby.sql("INSERT INTO big SELECT g, repeat('p', 500) FROM generate_series(100001, 120000) g")
    checkpoint = threading.Thread(target=lambda: _ignore_errors(standby.sql, "CHECKPOINT"),
                                  daemon=True)
    checkpoint.start()
    time.sleep(1)
    # through the rename and the barrier to the next pause, after which the
    # worker looks again: a checkpoint has all the time it wants there
    standby.sql("ALTER SYSTEM SET pg_tsmove.debug_pause_at = 'warming'")
    standby.sql("SELECT pg_reload_conf()")
    wait_for(lambda: "job %d pauses at warming" % job in standby.log_contents() or
             "PANIC" in standby.log_contents(), 60, what="the pause at warming")
    checkpoint.join(10)
    assert "checkpoint complete" not in standby.log_contents().split(
        "received promote request")[-1], "a checkpoint completed inside the window"
    end_pause_and_outlive_the_panic(standby, panic_timeout=60)
    assert standby.sql_scalar("SELECT count(*) FROM big") == 22000
    assert standby.amcheck() == []
    assert wait_local_job(standby, job) == "done"
    assert location_of(standby, "ts_a") == new_dir


def end_pause_and_outlive_the_panic(standby, panic_timeout):
    """Let the paused switch go on after a promotion inside its window: it
    PANICs (the reload's own session may die with it), the server restarts,
    and a promotion the crash took with it is asked again."""
    _ignore_errors(standby.sql, "ALTER SYSTEM RESET pg_tsmove.debug_pause_at")
    _ignore_errors(standby.sql, "SELECT pg_reload_conf()")
    wait_for(lambda: "PANIC" in standby.log_contents(), panic_timeout, what="the PANIC")
    wait_for(lambda: accepts_connections(standby), 120, what="connections after the restart")
    if standby.sql_scalar("SELECT pg_is_in_recovery()"):
        run_pg_ctl(standby, "promote")


def _ignore_errors(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass
