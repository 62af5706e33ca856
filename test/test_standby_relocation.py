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
