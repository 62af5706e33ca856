"""Tests of the test harness itself (pgcluster.py and the fixtures).

The move tests trust the harness to replicate, crash and recover clusters
and to notice damage; these tests show that it does, on clusters without
pg_tsmove (except test_primary_and_standby_fixtures), so that they hold
while the extension does not build.
"""

import os
import re
import struct

import pytest

from pgcluster import PgbenchError, processes_under

PAGE_HEADER_SIZE = 24
LP_NORMAL = 1


def plain_primary(clusters, **kwargs):
    """A cluster without pg_tsmove, with tablespaces ts_a and ts_b."""
    cluster = clusters.new("primary", preload=False, **kwargs)
    cluster.create_tablespace("ts_a")
    cluster.create_tablespace("ts_b")
    return cluster


def default_version():
    """default_version of control/pg_tsmove.control: what CREATE EXTENSION installs."""
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "control", "pg_tsmove.control")) as f:
        return re.search(r"^default_version = '([^']+)'", f.read(), re.M).group(1)


def test_primary_and_standby_fixtures(primary, standby):
    assert primary.sql_scalar(
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_tsmove'") == default_version()
    assert set(primary.tablespaces) == {"ts_a", "ts_b"}
    assert standby.sql_scalar("SELECT pg_is_in_recovery()") is True
    assert standby.sql_scalar("SHOW shared_preload_libraries") == "pg_tsmove"


@pytest.mark.data_checksums
@pytest.mark.pg_conf("work_mem = '7MB'")
def test_primary_markers(primary):
    assert primary.sql_scalar("SHOW data_checksums") == "on"
    assert primary.sql_scalar("SHOW work_mem") == "7MB"


def test_standby_replays_tablespace_data(clusters):
    primary = plain_primary(clusters)
    standby = primary.make_standby("standby")
    primary.sql("CREATE TABLE t (id int PRIMARY KEY, payload text) TABLESPACE ts_a")
    # Long values go to TOAST, which lives in the table's tablespace too.
    primary.sql("INSERT INTO t SELECT i, repeat(md5(i::text), 1 + i % 300) "
                "FROM generate_series(1, 5000) i")
    primary.wait_for_replay(standby)

    assert standby.row_hash("t", "id") == primary.row_hash("t", "id")
    files = standby.relation_files("t")
    assert list(files) == ["ts_a"]
    ts_a_dir = standby.database_dirs()["ts_a"]
    assert ts_a_dir.startswith(standby.root_dir + os.sep)
    assert os.path.exists(os.path.join(ts_a_dir, files["ts_a"][0]))
    assert standby.orphan_files() == []


def test_kill9_keeps_committed_data(clusters):
    cluster = plain_primary(clusters)
    cluster.sql("CREATE TABLE t (i int) TABLESPACE ts_b")
    cluster.sql("INSERT INTO t SELECT generate_series(1, 1000)")
    open_tx = cluster.conn(autocommit=False)
    open_tx.execute("INSERT INTO t SELECT generate_series(1001, 2000)")
    cluster.kill9()
    open_tx.close()
    assert not cluster.is_running()
    assert processes_under(cluster.data_dir) == {}

    cluster.start()
    assert "automatic recovery in progress" in cluster.log_contents()
    assert cluster.sql_scalar("SELECT count(*) FROM t") == 1000
    assert cluster.amcheck(relations=["t"]) == []


def test_destroy_leaves_no_process_or_directory(clusters):
    primary = plain_primary(clusters)
    standby = primary.make_standby("standby")
    with primary.conn() as session:
        session.execute("SELECT 1")
        primary.destroy()
    for cluster in (primary, standby):
        assert not cluster.is_running()
        assert processes_under(cluster.root_dir) == {}
        assert not os.path.exists(cluster.root_dir)
    primary.destroy()      # idempotent


def test_orphan_files_finds_stray_and_duplicate_storage(clusters):
    cluster = plain_primary(clusters)
    cluster.sql("CREATE TABLE t (i int) TABLESPACE ts_a")
    cluster.sql("INSERT INTO t SELECT generate_series(1, 100)")
    cluster.sql("CREATE TABLE gone (i int) TABLESPACE ts_b")
    cluster.sql("DROP TABLE gone")
    assert cluster.orphan_files() == []

    dirs = cluster.database_dirs()
    filenode = cluster.sql_scalar("SELECT pg_relation_filenode('t')")
    open(os.path.join(dirs["ts_b"], "%d_fsm" % filenode), "w").close()
    open(os.path.join(dirs["pg_default"], "999999.1"), "w").close()
    problems = cluster.orphan_files()
    assert len(problems) == 2, problems
    assert problems[0].startswith("orphan file: filenode 999999 in tablespace pg_default")
    assert problems[1].startswith("duplicate storage: t (filenode %d)" % filenode)


@pytest.mark.parametrize("checksums", [False, True],
                         ids=["no_checksums", "data_checksums"])
def test_amcheck_reports_corrupt_heap(clusters, checksums):
    cluster = plain_primary(clusters, checksums=checksums)
    cluster.sql("CREATE TABLE t (i int PRIMARY KEY) TABLESPACE ts_a")
    cluster.sql("INSERT INTO t SELECT generate_series(1, 1000)")
    assert cluster.amcheck() == []

    path = os.path.join(cluster.database_dirs()["ts_a"],
                        cluster.relation_files("t")["ts_a"][0])
    cluster.stop()
    # Point the first line pointers of block 0 past the end of the page.
    bad_item = struct.pack("<I", 8000 | LP_NORMAL << 15 | 1000 << 17)
    with open(path, "r+b") as f:
        f.seek(PAGE_HEADER_SIZE)
        f.write(bad_item * 8)
    cluster.start()
    problems = cluster.amcheck(relations=["t"])
    # Without checksums verify_heapam reports the line pointers; with them,
    # reading the page fails its checksum first.
    expected = "t: invalid page in block 0" if checksums else "t: block 0"
    assert any(p.startswith(expected) for p in problems), problems


def test_pgbench_results_and_balance_invariant(clusters):
    cluster = plain_primary(clusters)
    cluster.pgbench_init(1, extra_args=["--tablespace=ts_a"])
    result = cluster.pgbench_run_background(clients=2, jobs=1, seconds=2).wait()
    assert result.transactions > 0
    assert result.failed_transactions == 0
    assert result.tps > 0
    assert 0 < result.latency_avg_ms <= result.max_latency_ms
    assert len(result.progress) >= 1
    assert cluster.balance_invariant() == []

    cluster.sql("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1")
    assert len(cluster.balance_invariant()) == 1


def test_pgbench_failure_raises(clusters):
    cluster = clusters.new("primary", preload=False)
    run = cluster.pgbench_run_background(seconds=1)     # no pgbench tables
    with pytest.raises(PgbenchError, match="pgbench_"):
        run.wait()
