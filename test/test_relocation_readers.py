"""With pg_tsmove.relocation_switch_admits_readers (experimental, off by
default), the relocation's switch lets readers on (ExclusiveLock, never
logged for standbys): a query that reads the tablespace neither waits for the switch
nor holds it up, on the primary or on a standby, while every writer waits.

Readers still change pages in the switch's window (on-access pruning, with
WAL): a page so changed and written through a descriptor of the old file
must not be lost when the link moves.  The worker reconciles every page the
WAL changed in the window and logs it whole (src/engine/reconcile.c), a heap
page in a record a standby replays under a cleanup lock; the tests force
that eviction with pg_buffercache_evict() (17 and later) and check the page,
the standby's copy of it, a standby query holding it, and the data after
later writes.  With data checksums the switch keeps readers out.
"""

import struct
import threading
import time

import psycopg
import pytest

from moves import start_long_reader, wait_for, wait_job
from test_relocation import (end_pause, location_of, new_location, relocate,
                             relocate_paused_at, set_pause)


# the experimental switch under test (off by default)
pytestmark = pytest.mark.pg_conf("pg_tsmove.relocation_switch_admits_readers = on")


def server_version(cluster):
    return int(cluster.sql_scalar("SHOW server_version_num"))


def assert_same_data(primary, standby, table):
    """Equal row hashes on both, one live row per key, amcheck clean."""
    # (amcheck made on the primary and replayed first: the standby cannot
    #  create it, and a check on the primary right before it races with
    #  the replay of its CREATE EXTENSION)
    primary.sql("CREATE EXTENSION IF NOT EXISTS amcheck")
    primary.wait_for_replay(standby)
    for cluster in (primary, standby):
        assert cluster.sql_scalar("SELECT count(*) = count(DISTINCT id) FROM %s" % table)
        assert cluster.amcheck() == []
    assert primary.row_hash(table, "id") == standby.row_hash(table, "id")


@pytest.mark.matrix
def test_readers_go_on_through_the_switch(primary):
    """A long query on the primary and one on a standby, both on the
    tablespace, run through a relocation with the default settings: the
    relocation does not wait for them, neither is cancelled.  While the
    switch holds its locks a read answers at once and a write waits."""
    primary.sql("CREATE TABLE hot (id int PRIMARY KEY, v int) TABLESPACE ts_a;"
                "INSERT INTO hot SELECT g, 0 FROM generate_series(1, 50000) g")
    standby = primary.make_standby("standby")
    primary.wait_for_replay(standby)
    reader = start_long_reader(primary, "hot", 40)
    standby_reader = start_long_reader(standby, "hot", 40)
    new_dir = new_location(primary, "relocated")

    job = relocate_paused_at(primary, "renaming", new_dir)
    with primary.conn() as conn:
        conn.execute("SET statement_timeout = '5s'")
        assert conn.execute("SELECT count(*) FROM hot").fetchone()[0] == 50000
        conn.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("UPDATE hot SET v = v + 1 WHERE id = 1")
        assert refused.value.sqlstate == "55P03"        # lock_not_available
    end_pause(primary)
    assert wait_job(primary, job, 60) == "done"
    assert reader.is_alive() and standby_reader.is_alive(), \
        "the relocation ended only after its readers"
    assert location_of(primary, "ts_a") == new_dir
    primary.sql("UPDATE hot SET v = v + 1 WHERE id % 7 = 0")
    reader.join(60)
    standby_reader.join(60)
    assert reader.sqlstate is None, reader.sqlstate
    assert standby_reader.sqlstate is None, standby_reader.sqlstate   # no conflict
    assert "conflict with recovery" not in standby.log_contents()
    assert_same_data(primary, standby, "hot")


def page_lsn_in_file(path):
    """The LSN in the header of block 0 of a relation file."""
    with open(path, "rb") as f:
        xlogid, xrecoff = struct.unpack("<II", f.read(8))
    return (xlogid << 32) | xrecoff


def lsn_of(cluster, lsn_text):
    return int(cluster.sql_scalar("SELECT %s::pg_lsn - '0/0'::pg_lsn", (lsn_text,)))


def page_items(cluster, rel, block=0):
    return cluster.sql("SELECT lp, lp_flags, lp_off, lp_len FROM "
                       "heap_page_items(get_raw_page(%s, %s)) ORDER BY lp", (rel, block))


def prune_and_evict_block_0(primary, table, rows, pad_sql):
    """A table with dead row versions on block 0 (kept by an open snapshot
    until the switch holds its locks), a relocation paused before its
    rename; then a reader prunes block 0 (WAL) and pg_buffercache_evict()
    writes it through the link, which still names the old directory: the
    new file lacks the pruning.  Returns (job, new_dir, items before the
    pruning, items after it, the pruning's LSN)."""
    primary.sql("CREATE EXTENSION pageinspect; CREATE EXTENSION pg_buffercache")
    primary.sql("CREATE TABLE %s (id int PRIMARY KEY, v int, tag name, pad text) "
                "WITH (fillfactor = 100, autovacuum_enabled = off) TABLESPACE ts_a;"
                "INSERT INTO %s SELECT g, 0, 'tag-' || g, %s FROM generate_series(1, %d) g"
                % (table, table, pad_sql, rows))
    # after the last checkpoint: a later change of block 0 would carry no
    # full-page image to cover a page that lost the pruning
    primary.sql("CHECKPOINT")
    holder = primary.conn(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT count(*) FROM pg_class")      # a snapshot that keeps them
    for _ in range(3):
        primary.sql("UPDATE %s SET v = v + 1 WHERE id <= 2" % table)
    before = page_items(primary, table)
    new_dir = new_location(primary, "relocated")
    # pg_tblspc/<oid>/PG_.../<db>/<relfilenode>, under either directory
    in_tablespace = primary.sql_scalar("SELECT pg_relation_filepath(%s)", (table,)).split("/", 2)[2]
    old_file = "%s/%s" % (location_of(primary, "ts_a"), in_tablespace)
    new_file = "%s/%s" % (new_dir, in_tablespace)

    set_pause(primary, "renaming")
    job = relocate(primary, "ts_a", new_dir, checkpoint=False)
    wait_for(lambda: "job %d pauses at renaming" % job in primary.log_contents(), 60,
             what="the pause at renaming")
    holder.execute("COMMIT")
    holder.close()
    with primary.conn() as reader:
        reader.execute("SET statement_timeout = '5s'")
        assert reader.execute("SELECT count(*) FROM %s" % table).fetchone()[0] == rows
        pruned = page_items(primary, table)
        assert pruned != before, "the reader did not prune block 0"
        pruned_lsn = lsn_of(primary, primary.sql_scalar(
            "SELECT lsn::text FROM page_header(get_raw_page(%s, 0))", (table,)))
        evicted = reader.execute(
            "SELECT pg_buffercache_evict(bufferid)::text FROM pg_buffercache "
            "WHERE relfilenode = pg_relation_filenode(%s) AND relforknumber = 0 "
            "AND relblocknumber = 0", (table,)).fetchone()[0]
        assert evicted.startswith(("t", "(t")), evicted
    assert page_lsn_in_file(old_file) == pruned_lsn
    assert page_lsn_in_file(new_file) < pruned_lsn, "the copy already had the pruning"
    return job, before, pruned, pruned_lsn


@pytest.mark.matrix
def test_page_pruned_and_evicted_in_the_window_is_logged_whole(primary):
    """Block 0 pruned by a reader and written through the old file before
    the rename (prune_and_evict_block_0): the new file lacks the pruning,
    which the standby replayed.  After the switch the primary's page is
    logged whole: the standby's block 0 equals the primary's, and writes
    into the page afterwards leave both equal, through a crash too."""
    if server_version(primary) < 170000:
        pytest.skip("pg_buffercache_evict() arrived in 17")
    standby = primary.make_standby("standby")
    job, before, pruned, pruned_lsn = prune_and_evict_block_0(primary, "churn", 3000,
                                                              "repeat('x', 60)")
    end_pause(primary)
    assert wait_job(primary, job, 60) == "done"
    assert "pages that readers changed during its switch" in primary.log_contents()
    assert lsn_of(primary, primary.sql_scalar(
        "SELECT lsn::text FROM page_header(get_raw_page('churn', 0))")) > pruned_lsn
    primary.wait_for_replay(standby)
    assert page_items(standby, "churn") == page_items(primary, "churn")
    # writes into the page, replayed by the standby
    primary.sql("UPDATE churn SET v = v + 1 WHERE id <= 60;"
                "INSERT INTO churn SELECT g, 1, 'tag-' || g, repeat('y', 60) "
                "FROM generate_series(3001, 3100) g")
    primary.sql("CHECKPOINT")
    assert_same_data(primary, standby, "churn")
    # the checks' scans on the primary prune block 0 again (WAL): compare
    # the pages once the standby has replayed that too
    primary.wait_for_replay(standby)
    assert page_items(primary, "churn") == page_items(standby, "churn")
    primary.kill9()
    primary.start()
    assert primary.row_hash("churn", "id") == standby.row_hash("churn", "id")


class SlowRead(threading.Thread):
    def __init__(self, cluster, query):
        super().__init__(daemon=True)
        self.cluster, self.query = cluster, query
        self.result = self.error = None

    def run(self):
        try:
            with self.cluster.conn() as conn:
                self.result = conn.execute(self.query).fetchall()
        except psycopg.Error as error:
            self.error = error


@pytest.mark.matrix
def test_a_reader_holding_the_page_across_the_window_reads_its_own_rows(primary):
    """Block 0 pruned and written through the old file (so that the new
    file's copy has its tuples elsewhere); after the rename a TID scan reads
    block 0 back from the new file and holds a pointer into the page while
    it sleeps through the end of the switch, then stores what it read in a
    table of another tablespace.  The switch never moves the bytes of a
    page somebody holds: the stored row is the table's."""
    if server_version(primary) < 170000:
        pytest.skip("pg_buffercache_evict() arrived in 17")
    rows = 300
    primary.sql("CREATE TABLE sink (id int, tag name, pad text)")   # before the guard's window
    job, before, pruned, _ = prune_and_evict_block_0(
        primary, "churn", rows,
        "CASE WHEN g <= 2 THEN 'a' ELSE 'row-' || g || '-' || repeat(md5(g::text), 9) END")
    moved = [p[0] for p, b in zip(pruned, before) if p[1] == 1 and b[1] == 1 and p[2] != b[2]]
    assert moved, "the pruning moved no live row"
    victim = moved[len(moved) // 2]
    set_pause(primary, "reconciling")           # past the rename and the barrier
    wait_for(lambda: "job %d pauses at reconciling" % job in primary.log_contents(), 60,
             what="the pause at reconciling")
    read = SlowRead(primary, "INSERT INTO sink SELECT id, tag, pad || pg_sleep(4)::text "
                             "FROM churn WHERE ctid = '(0,%d)' RETURNING id" % victim)
    read.start()
    time.sleep(1.5)
    end_pause(primary)
    read.join(60)
    assert wait_job(primary, job, 60) == "done"
    assert read.error is None, read.error
    (rid,), = read.result
    assert primary.sql("SELECT id, tag, pad FROM sink") == primary.sql(
        "SELECT id, tag, pad FROM churn WHERE id = %s", (rid,))
    assert primary.amcheck() == []


@pytest.mark.matrix
def test_a_standby_query_holding_the_page_reads_its_own_rows(primary):
    """The standby replayed the pruning of block 0, the primary reads the
    page back unpruned from the new file (prune_and_evict_block_0), and the
    switch logs the primary's page whole.  A standby TID scan that holds
    block 0, with pointers into it, while it sleeps through that record's
    replay returns its row as the table has it: the record restores the
    image under a cleanup lock (a pruning record's replay), never under a
    query's pin, and nothing is cancelled."""
    if server_version(primary) < 170000:
        pytest.skip("pg_buffercache_evict() arrived in 17")
    rows = 300
    standby = primary.make_standby("standby")
    job, before, pruned, _ = prune_and_evict_block_0(
        primary, "churn", rows,
        "CASE WHEN g <= 2 THEN 'a' ELSE 'row-' || g || '-' || repeat(md5(g::text), 9) END")
    moved = [p[0] for p, b in zip(pruned, before) if p[1] == 1 and b[1] == 1 and p[2] != b[2]]
    assert moved, "the pruning moved no live row"
    victim = moved[len(moved) // 2]
    primary.wait_for_replay(standby)
    assert page_items(standby, "churn") == pruned, "the standby did not replay the pruning"
    read = SlowRead(standby, "SELECT id, tag, pad || pg_sleep(6)::text "
                             "FROM churn WHERE ctid = '(0,%d)'" % victim)
    read.start()
    time.sleep(1.5)                     # its pin on block 0 is taken
    end_pause(primary)
    assert wait_job(primary, job, 60) == "done"
    read.join(60)
    assert read.error is None, read.error
    (rid, tag, pad), = read.result
    assert (rid, tag, pad) == primary.sql("SELECT id, tag::text, pad FROM churn WHERE ctid = "
                                          "'(0,%d)'" % victim)[0]
    assert (tag, pad) == ("tag-%d" % rid,
                          "row-%d-%s" % (rid, primary.sql_scalar("SELECT repeat(md5(%s::text), 9)",
                                                                 (str(rid),))))
    primary.wait_for_replay(standby)
    assert page_items(standby, "churn") == page_items(primary, "churn")
    assert "conflict with recovery" not in standby.log_contents()
    assert_same_data(primary, standby, "churn")


@pytest.mark.data_checksums
def test_with_data_checksums_the_switch_keeps_readers_out(primary):
    """With data checksums a reader's hint bit logs a plain page image,
    which a standby restores under its queries' pins: the switch takes
    AccessExclusiveLock although the setting is on, and says so."""
    primary.sql("CREATE TABLE hot (id int PRIMARY KEY) TABLESPACE ts_a;"
                "INSERT INTO hot SELECT generate_series(1, 1000)")
    new_dir = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "renaming", new_dir)
    modes = primary.sql("SELECT l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                        "WHERE c.relname = 'hot' AND l.granted AND l.pid <> pg_backend_pid()")
    end_pause(primary)
    assert wait_job(primary, job, 60) == "done"
    assert ("AccessExclusiveLock",) in modes, modes
    assert ("switch takes AccessExclusiveLock although "
            "pg_tsmove.relocation_switch_admits_readers is on") in primary.log_contents()
