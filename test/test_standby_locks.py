"""What a hot standby sees of a switch.

Every AccessExclusiveLock on a relation is WAL-logged, and a hot standby
replays it by taking the same lock: it waits for its own queries of the
relation and cancels them after max_standby_streaming_delay.  A relation
move's switch needs that lock there too (the relation's files change on
the standby as well), so its successful attempt is seen there, as an
ALTER TABLE's would be; attempts that cannot succeed must not be.  While
a transaction that blocked the last attempt still holds its lock, the
job does not try again, and logs nothing.  (An attempt logs the locks it
was granted before it timed out on another relation: a table's, when the
lock it times out on is its TOAST table's.)  A relocation changes only
the primary's files: its locks are not logged at all, and a standby's
queries of the tablespace neither wait for its switch nor are cancelled.
"""

import threading

import pytest

from moves import make_table, start_move, wait_job
from test_relocation import end_pause, new_location, relocate, relocate_paused_at

READER_S = 6


def standby_lock_records(cluster, start_lsn, relid):
    """Standby LOCK records naming relid since start_lsn (pg_walinspect)."""
    cluster.sql("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    end_lsn = cluster.sql_scalar("SELECT pg_current_wal_flush_lsn()")
    return cluster.sql_scalar(
        "SELECT count(*) FROM pg_get_wal_records_info(%s, %s) "
        "WHERE resource_manager = 'Standby' AND record_type = 'LOCK' "
        "AND description LIKE %s", (start_lsn, end_lsn, "%% rel " + str(relid) + " %%"))


def hold_toast_lock(cluster, seconds):
    """A transaction that holds AccessShareLock on victim's TOAST table for
    seconds; returns its thread once the lock is held."""
    toast = cluster.sql_scalar("SELECT reltoastrelid::regclass::text FROM pg_class "
                               "WHERE oid = 'victim'::regclass")
    conn = cluster.conn(autocommit=False)
    conn.execute("SELECT count(*) FROM %s" % toast)      # its lock stays until commit

    def hold():
        conn.execute("SELECT pg_sleep(%s)" % seconds)
        conn.commit()
        conn.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("kind", ["move", "relocation"])
def test_blocked_switch_logs_no_lock_per_attempt(primary, standby, kind):
    expected = make_table(primary)
    relid = primary.sql_scalar("SELECT 'victim'::regclass::oid")
    primary.sql("CHECKPOINT")
    start_lsn = primary.sql_scalar("SELECT pg_current_wal_insert_lsn()")
    blocker = hold_toast_lock(primary, READER_S)
    if kind == "move":
        job = start_move(primary, "victim", "ts_b", max_rate_mb=0)
    else:
        job = relocate(primary, "ts_a", new_location(primary, "relocated"))
    assert wait_job(primary, job, 120) == "done"
    blocker.join()
    attempts = primary.sql_scalar("SELECT switch_attempts FROM tsmove.jobs WHERE job_id = %s",
                                  (job,))
    assert attempts >= 4, attempts          # it kept trying while blocked
    # a move's: the first attempt (which met the reader) and the one that
    # succeeded; a relocation's: none
    if kind == "move":
        assert standby_lock_records(primary, start_lsn, relid) <= 2
    else:
        assert standby_lock_records(primary, start_lsn, relid) == 0
    primary.wait_for_replay(standby)
    assert standby.row_hash("victim", "id") == expected
    assert primary.row_hash("victim", "id") == expected


@pytest.mark.matrix
def test_standby_query_outlives_the_relocation_switch(primary):
    """A standby transaction that holds the relocated table (and would be
    cancelled half a second after a replayed lock waited for it) goes on
    across the relocation, and reads the same rows after it."""
    standby = primary.make_standby("standby", extra_conf=[
        "max_standby_streaming_delay = '500ms'", "hot_standby_feedback = off"])
    expected = make_table(primary)
    relid = primary.sql_scalar("SELECT 'victim'::regclass::oid")
    primary.wait_for_replay(standby)
    start_lsn = primary.sql_scalar("SELECT pg_current_wal_insert_lsn()")
    with standby.conn(autocommit=False) as reader:
        before = reader.execute("SELECT count(*), count(DISTINCT id) FROM victim").fetchone()
        # held at the switch, its locks granted: a checkpoint logs the
        # running transactions' AccessExclusiveLocks for standbys, and the
        # switch's transaction has no xid, so none of them
        job = relocate_paused_at(primary, "switching", new_location(primary, "relocated"))
        xid = primary.sql_scalar("SELECT backend_xid::text FROM pg_stat_activity "
                                 "WHERE backend_type LIKE 'pg_tsmove worker%%'")
        locked = primary.sql_scalar("SELECT count(*) FROM pg_locks WHERE relation = %s "
                                    "AND mode = 'AccessExclusiveLock' AND granted", (relid,))
        primary.sql("CHECKPOINT")
        end_pause(primary)
        assert wait_job(primary, job, 120) == "done"
        assert locked == 1 and xid is None, (locked, xid)
        primary.wait_for_replay(standby)
        # the same transaction, its lock held all along: not cancelled
        assert reader.execute("SELECT count(*), count(DISTINCT id) FROM victim").fetchone() == before
        reader.commit()
    assert before[0] == before[1] > 0
    assert standby_lock_records(primary, start_lsn, relid) == 0
    conflicts = standby.sql_scalar("SELECT confl_lock FROM pg_stat_database_conflicts "
                                   "WHERE datname = current_database()")
    assert conflicts == 0, conflicts
    assert "conflict with recovery" not in standby.log_contents()
    assert primary.amcheck(relations=["victim"]) == []
    primary.wait_for_replay(standby)            # (amcheck made on the primary)
    for cluster in (primary, standby):
        assert cluster.amcheck(relations=["victim"]) == []
        assert cluster.row_hash("victim", "id") == expected
        assert cluster.sql_scalar("SELECT count(*) = count(DISTINCT id) FROM victim")
