"""What a hot standby sees of a switch.

Every AccessExclusiveLock on a relation is WAL-logged, and a hot standby
replays it by taking the same lock: it waits for its own queries of the
relation and cancels them after max_standby_streaming_delay.  A switch
needs that lock, so its successful attempt is seen there, as an ALTER
TABLE's would be; attempts that cannot succeed must not be.  While a
transaction that blocked the last attempt still holds its lock, the job
does not try again, and logs nothing.  (An attempt logs the locks it was
granted before it timed out on another relation: a table's, when the
lock it times out on is its TOAST table's.)
"""

import threading

import pytest

from moves import make_table, start_move, wait_job
from test_relocation import new_location, relocate

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
    # the first attempt (which met the reader) and the one that succeeded
    assert standby_lock_records(primary, start_lsn, relid) <= 2
    primary.wait_for_replay(standby)
    assert standby.row_hash("victim", "id") == expected
    assert primary.row_hash("victim", "id") == expected
