"""kill -9 of the postmaster at each phase of a relation move and of a
relocation, under TPC-B load, with a streaming standby (and once without): after restart the job
resumes or ends as the phase says, and then no row is lost or brought back
to life, on the primary and on the standby (integrity.ShadowTpcb), pgbench
runs clean, and a second move succeeds with the data still right.

The phases: copying before the first resume point (the default
pg_tsmove.resume_interval of 30 s: the resume point is the one made at
block 0), copying after a resume point, catching up (a reader holds the
switch off), under the switch's exclusive lock, just after the switch
committed, and while the old files shrink.
"""

import os
import time

import pytest

from integrity import ShadowTpcb
from moves import (job_row, move_paused_at, start_move, tablespace_of, wait_for,
                   wait_for_state, wait_job)
from test_relocation import end_pause, location_of, new_location, relocate, relocate_paused_at

SCALE = 10          # pgbench_accounts: 1 000 000 rows, 16 394 blocks


def copied_at_least(primary, job, fraction):
    return wait_for(lambda: (lambda r: r if r["state"] == "copying" and
                             r["blocks_copied"] >= r["blocks_total"] * fraction
                             else None)(job_row(primary, job)),
                    120, what="%d %% of the copy" % (fraction * 100))


def crash_during(primary, shadow, phase):
    """Start the move of pgbench_accounts to ts_b under load and kill -9 the
    postmaster in phase; restart it.  Returns the job id."""
    blocker = None
    bench = shadow.run_background(seconds=120)
    time.sleep(1)
    if phase in ("copying", "copying_after_resume_point"):
        job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=8)
        copied_at_least(primary, job, 0.4 if phase == "copying" else 0.6)
        if phase == "copying_after_resume_point":
            time.sleep(1.5)         # resume_interval is 1 s here
    elif phase == "catching_up":
        blocker = primary.conn(autocommit=False)
        blocker.execute("SELECT 1 FROM pgbench_accounts LIMIT 1")
        job = start_move(primary, "pgbench_accounts", "ts_b", max_rate_mb=0)
        wait_for(lambda: job_row(primary, job)["switch_attempts"] >= 2, 120,
                 what="failed switch attempts")
    else:
        job = move_paused_at(primary, phase, rel="pgbench_accounts")
        time.sleep(1)               # the load goes on (or waits for the lock)
    primary.kill9()
    if blocker is not None:
        blocker.close()
    try:
        bench.wait()
    except Exception:
        pass                        # its connections died with the server
    primary.start()
    return job


# (phase, where the table lives after the job ends, the job's end state)
PHASES = [
    ("copying", "ts_b", "done"),
    ("copying_after_resume_point", "ts_b", "done"),
    ("catching_up", "ts_b", "done"),
    # the switch had created the new FSM and VM: not resumable
    ("switching", "ts_a", "failed"),
    ("warming", "ts_b", "done"),
    ("shrinking", "ts_b", "done"),
]


@pytest.mark.pg_conf("pg_tsmove.pacing = fixed", "checkpoint_timeout = 30min",
                     "wal_keep_size = 1GB")   # the standby catches up after the crash
@pytest.mark.parametrize("phase, home, end_state", PHASES)
def test_crash_under_load(primary, standby, phase, home, end_state):
    if phase == "copying_after_resume_point":
        primary.sql("ALTER SYSTEM SET pg_tsmove.resume_interval = '1s'")
        primary.sql("SELECT pg_reload_conf()")
    shadow = ShadowTpcb(primary, scale=SCALE, tablespace="ts_a")
    primary.sql("VACUUM pgbench_accounts")     # an FSM and a VM to copy
    job = crash_during(primary, shadow, phase)

    row = wait_for_state(primary, job, ("done", "failed", "cancelled"), 300)
    assert row["state"] == end_state, row
    assert tablespace_of(primary, "pgbench_accounts") == home
    check_everything(primary, standby, shadow)

    # a second move, the other way, under load
    bench = shadow.run_background(seconds=8)
    again = start_move(primary, "pgbench_accounts", "ts_a" if home == "ts_b" else "ts_b",
                       max_rate_mb=0)
    assert wait_job(primary, again, 300) == "done", job_row(primary, again)
    bench.wait()
    check_everything(primary, standby, shadow)


@pytest.mark.pg_conf("pg_tsmove.pacing = fixed", "checkpoint_timeout = 30min",
                     "wal_keep_size = 1GB")   # the standby catches up after the crash
@pytest.mark.matrix
def test_crash_before_the_first_resume_point_without_standby(primary):
    shadow = ShadowTpcb(primary, scale=SCALE, tablespace="ts_a")
    job = crash_during(primary, shadow, "copying")
    assert wait_job(primary, job, 300) == "done", job_row(primary, job)
    assert "resumes the move" in primary.log_contents()
    check_everything(primary, None, shadow)


def check_everything(primary, standby, shadow):
    """pgbench runs clean, then the logical checks on both servers, no orphan
    file."""
    shadow.run_background(seconds=3).wait()
    assert shadow.problems() == []
    assert primary.orphan_files() == []
    assert primary.sql_scalar("SELECT count(*) FROM pg_replication_slots "
                              "WHERE slot_name LIKE 'pg_tsmove%'") == 0
    if standby is not None:
        primary.wait_for_replay(standby)
        assert shadow.problems(standby) == []
        assert standby.orphan_files() == []


# ---- relocations ------------------------------------------------------------

RELOCATION_PHASES = [("copying", "old"), ("switching", "old"), ("warming", "new"),
                     ("reconciling", "new"), ("shrinking", "new")]


@pytest.mark.pg_conf("checkpoint_timeout = 30min", "wal_keep_size = 1GB")
@pytest.mark.parametrize("phase, survivor", RELOCATION_PHASES)
def test_relocation_crash_under_load(primary, standby, phase, survivor):
    """kill -9 of the postmaster while a relocation of the TPC-B tablespace
    copies under load, holds its switch's locks, has just renamed the link,
    (with the switch that admits readers) is about to log the pages readers
    changed, or shrinks the old files: after restart one location holds the files, the data passes every
    check on both servers, and a second relocation succeeds."""
    if phase == "reconciling":      # a step of the switch that admits readers only
        primary.sql("ALTER SYSTEM SET pg_tsmove.relocation_switch_admits_readers = on")
        primary.sql("SELECT pg_reload_conf()")
    shadow = ShadowTpcb(primary, scale=5, tablespace="ts_a")
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    bench = shadow.run_background(seconds=120)
    time.sleep(1)
    if phase == "copying":
        job = relocate(primary, "ts_a", new, rate=4)
        wait_for(lambda: job_row(primary, job)["blocks_copied"] > 500, 60, what="copying")
    else:
        job = relocate_paused_at(primary, phase, new, timeout_s=120)
    primary.kill9()
    try:
        bench.wait()
    except Exception:
        pass
    primary.start()
    end_pause(primary)

    row = wait_for_state(primary, job, ("failed", "done"), 120)
    assert row["state"] == ("done" if survivor == "new" else "failed"), row
    kept, emptied = (old, new) if survivor == "old" else (new, old)
    assert location_of(primary, "ts_a") == kept
    assert os.listdir(emptied) == []
    check_everything(primary, standby, shadow)

    again = relocate(primary, "ts_a", emptied)
    bench = shadow.run_background(seconds=5, clients=2, jobs=1)
    assert wait_job(primary, again, 300) == "done", job_row(primary, again)
    bench.wait()
    assert location_of(primary, "ts_a") == emptied
    check_everything(primary, standby, shadow)


def test_standby_promoted_mid_relocation(primary, standby):
    """A standby promoted while the primary relocates: the job row it
    replayed says 'copying'; its recovery pass fails the job and touches
    neither its own tablespace nor the primary's new location."""
    shadow = ShadowTpcb(primary, scale=2, tablespace="ts_a")
    new_dir = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new_dir)
    shadow.run_background(seconds=3, clients=2, jobs=1).wait()
    primary.wait_for_replay(standby)
    new_files = sorted(os.listdir(new_dir))
    standby.sql("SELECT pg_promote()")
    wait_for(lambda: standby.sql_scalar(
        "SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,)) == "failed", 60,
             what="the promoted standby's recovery pass")
    assert "left as they are" in standby.sql_scalar(
        "SELECT error FROM tsmove.jobs WHERE job_id = %s", (job,))
    assert sorted(os.listdir(new_dir)) == new_files  # the primary's, untouched
    assert shadow.problems(standby) == [] and standby.amcheck() == []
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert shadow.problems() == []
