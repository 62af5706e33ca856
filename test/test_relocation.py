"""Whole tablespaces: tsmove.relocate_tablespace() moves every file of a
tablespace, in every database, to a new directory while it is in use;
tsmove.move_tablespace() empties one tablespace into another.

After every relocation: the data is equal (TPC-B invariant, row hashes),
amcheck and pg_visibility find nothing, every relation keeps its OID and
relfilenode, pg_tablespace_location() is the new directory, the old one
holds nothing, no file is orphaned, and the relocation's own WAL is a small
fraction of what it moved.
"""

import os
import time

import psycopg
import pytest

from moves import (cancel_reader_then_writer, job_row, set_cancel_blockers_after,
                   start_long_reader, start_move,
                   start_writer_queued_behind_the_switch, wait_for, wait_for_state, wait_job,
                   worker_lock_modes)
from integrity import ShadowTpcb
from pgcluster import make_server_dir, processes_under

SECOND_DB = "second"

# Every index type, TOASTed values, an unlogged table, a materialized view.
SECOND_DB_SQL = """
CREATE EXTENSION pg_visibility;
CREATE TABLE docs (id int PRIMARY KEY USING INDEX TABLESPACE ts_a, body text,
                   tags text[], pos point) TABLESPACE ts_a;
INSERT INTO docs
SELECT g, CASE WHEN g % 200 = 0
               THEN (SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 100) i)
               ELSE repeat('d', 50) END,
       ARRAY['t' || (g % 17), 'u' || (g % 5)], point(g % 1000, g / 1000)
FROM generate_series(1, 60000) g;
CREATE INDEX docs_hash ON docs USING hash (id) TABLESPACE ts_a;
CREATE INDEX docs_gist ON docs USING gist (pos) TABLESPACE ts_a;
CREATE INDEX docs_spgist ON docs USING spgist (pos) TABLESPACE ts_a;
CREATE INDEX docs_gin ON docs USING gin (tags) TABLESPACE ts_a;
CREATE INDEX docs_brin ON docs USING brin (id) TABLESPACE ts_a;
CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY USING INDEX TABLESPACE ts_a, v text)
    TABLESPACE ts_a;
INSERT INTO scratch SELECT g, md5(g::text) FROM generate_series(1, 20000) g;
CREATE MATERIALIZED VIEW docs_summary TABLESPACE ts_a AS
    SELECT id % 10 AS k, count(*) AS n, sum(length(body)) AS chars FROM docs GROUP BY 1;
"""

# Each query once with index scans only, once with a sequential scan.
INDEX_PROBES = [
    "SELECT count(*) FROM docs WHERE id = 4242",                      # btree, hash
    "SELECT count(*) FROM docs WHERE pos <@ box '((10,10),(400,40))'",  # gist, spgist
    "SELECT count(*) FROM docs WHERE tags @> ARRAY['t5']",            # gin
    "SELECT count(*) FROM docs WHERE id BETWEEN 1000 AND 9000",       # brin
    "SELECT count(*) FROM scratch WHERE id BETWEEN 10 AND 5000",
]


def new_location(cluster, name):
    return make_server_dir(os.path.join(cluster.root_dir, name))


def relocate(cluster, tablespace, location, rate=None, dbname="postgres", checkpoint=True):
    """tsmove.relocate_tablespace(); returns the job id.  A tablespace
    created after the last checkpoint makes the switch wait for one (crash
    recovery would replay its creation, with the old location): the tests
    checkpoint first so as not to wait for a spread one, except the test of
    that wait."""
    if checkpoint:
        cluster.sql("CHECKPOINT")
    return cluster.sql_scalar(
        "SELECT tsmove.relocate_tablespace(%s, %s, max_rate_mb => %s::numeric)",
        (tablespace, location, rate), dbname=dbname)


def location_of(cluster, tablespace):
    return cluster.sql_scalar("SELECT pg_tablespace_location(oid) FROM pg_tablespace "
                              "WHERE spcname = %s", (tablespace,))


def set_pause(cluster, phase):
    cluster.sql("ALTER SYSTEM SET pg_tsmove.debug_pause_at = '%s'" % phase)
    cluster.sql("SELECT pg_reload_conf()")
    time.sleep(0.3)


def relocate_paused_at(cluster, phase, location, timeout_s=60):
    set_pause(cluster, phase)
    job = relocate(cluster, "ts_a", location)
    wait_for(lambda: "job %d pauses at %s" % (job, phase) in cluster.log_contents(),
             timeout_s, what="the pause at " + phase)
    return job


def job_note(cluster, job):
    return cluster.sql_scalar("SELECT error FROM tsmove.jobs WHERE job_id = %s", (job,)) or ""


def end_pause(cluster):
    cluster.sql("ALTER SYSTEM RESET pg_tsmove.debug_pause_at")
    cluster.sql("SELECT pg_reload_conf()")


def storage_identity(cluster, dbname):
    """(relation, OID, relfilenode) of every relation with storage."""
    return sorted(cluster.sql("SELECT oid::regclass::text, oid, relfilenode FROM pg_class "
                              "WHERE relfilenode <> 0 ORDER BY 2", dbname=dbname))


def probe_indexes(cluster, dbname):
    """INDEX_PROBES answered by index scans and by sequential scans."""
    answers = {}
    with cluster.conn(dbname) as conn:
        for scan in ("index", "seq"):
            conn.execute("SET enable_seqscan = %s" % ("off" if scan == "index" else "on"))
            conn.execute("SET enable_indexscan = %s" % ("on" if scan == "index" else "off"))
            conn.execute("SET enable_bitmapscan = %s" % ("on" if scan == "index" else "off"))
            answers[scan] = [conn.execute(q).fetchone()[0] for q in INDEX_PROBES]
    return answers


def visibility_problems(cluster, dbname, tables):
    """What pg_check_visible and pg_check_frozen find wrong in the VM."""
    cluster.sql("CREATE EXTENSION IF NOT EXISTS pg_visibility", dbname=dbname)
    problems = []
    for table in tables:
        for check in ("pg_check_visible", "pg_check_frozen"):
            n = cluster.sql_scalar("SELECT count(*) FROM %s(%%s::regclass)" % check,
                                   (table,), dbname=dbname)
            if n:
                problems.append("%s(%s): %d tuples" % (check, table, n))
    return problems


def second_db_state(cluster):
    return {"docs": cluster.row_hash("docs", "id", dbname=SECOND_DB),
            "scratch": cluster.row_hash("scratch", "id", dbname=SECOND_DB),
            "docs_summary": cluster.row_hash("docs_summary", "k", dbname=SECOND_DB)}


def assert_relocated(cluster, tablespace, old_dir, new_dir, job):
    assert location_of(cluster, tablespace) == new_dir
    assert os.listdir(old_dir) == []
    row = job_row(cluster, job)
    assert row["state"] == "done", row
    assert row["switch_ms"] is not None
    for db in ("postgres", SECOND_DB):
        assert cluster.amcheck(dbname=db) == []
        assert cluster.orphan_files(dbname=db) == []


@pytest.fixture
def two_databases(primary):
    primary.sql("CREATE DATABASE %s" % SECOND_DB)
    primary.sql(SECOND_DB_SQL, dbname=SECOND_DB)
    primary.sql("VACUUM (FREEZE) docs", dbname=SECOND_DB)
    return primary


# Adaptive pacing, held at 16 MB/s by min_rate_mb: under saturating load the
# pacer would otherwise give way for longer than pgbench runs.
@pytest.mark.matrix
@pytest.mark.pg_conf("pg_tsmove.min_rate_mb = 16")
def test_relocation_under_load_in_two_databases(two_databases):
    """pgbench TPC-B runs in one database, the other holds every index
    type, TOAST, an unlogged table and a materialized view; the tablespace
    they share moves while pgbench writes."""
    primary = two_databases
    primary.pgbench_init(5, extra_args=["--tablespace=ts_a", "--index-tablespace=ts_a"])
    primary.sql("VACUUM pgbench_accounts")     # VM bits set: the updates clear them
    before = {db: storage_identity(primary, db) for db in ("postgres", SECOND_DB)}
    state = second_db_state(primary)
    probes = probe_indexes(primary, SECOND_DB)
    assert probes["index"] == probes["seq"]
    old_dir = location_of(primary, "ts_a")
    new_dir = new_location(primary, "relocated")

    bench = primary.pgbench_run_background(clients=4, jobs=2, seconds=25)
    time.sleep(2)
    job = relocate(primary, "ts_a", new_dir, rate=16)
    assert wait_job(primary, job, 60) == "done", job_row(primary, job)
    result = bench.wait()
    assert result.failed_transactions == 0 and result.transactions > 1000
    row = job_row(primary, job)
    assert row["blocks_recopied"] > 0, "pgbench changed no copied block: the mirror was not tested"
    assert row["blocks_under_lock"] > 0, "the unlogged table was not copied under the lock"
    # its own WAL only: the pages are not logged
    assert row["wal_bytes"] < 0.02 * row["bytes_written"], row

    assert primary.balance_invariant() == []
    assert second_db_state(primary) == state
    probes = probe_indexes(primary, SECOND_DB)
    assert probes["index"] == probes["seq"]
    assert visibility_problems(primary, "postgres", ["pgbench_accounts"]) == []
    assert visibility_problems(primary, SECOND_DB, ["docs"]) == []
    assert {db: storage_identity(primary, db) for db in ("postgres", SECOND_DB)} == before
    assert_relocated(primary, "ts_a", old_dir, new_dir, job)
    # durable through the new link: a crash and its recovery read it back
    primary.kill9()
    primary.start()
    assert primary.balance_invariant() == []
    after_crash = second_db_state(primary)
    assert after_crash["docs"] == state["docs"]
    assert after_crash["docs_summary"] == state["docs_summary"]
    assert primary.sql_scalar("SELECT count(*) FROM scratch", dbname=SECOND_DB) == 0
    assert primary.amcheck() == []


def test_relocation_beside_load_is_paced_from_its_first_page(primary):
    """Adaptive pacing (the default, no ceiling) paces a relocation from its
    first page: it counts the others' transactions from the job's first
    charge, not from the job's start.  Counted from the start, its first
    window (spent listing the tablespace's files) saw no transaction, which
    read as an idle server: the copy ran unthrottled beside pgbench, and
    the view showed a pace of 0.  (It took a relocation beside TPC-B at
    scale 20 more than the first window, 100 ms, to reach its first page;
    pg_tsmove.debug_pause_at holds it there for a second here.)"""
    primary.pgbench_init(5, extra_args=["--tablespace=ts_a", "--index-tablespace=ts_a"])
    new_dir = new_location(primary, "paced")
    bench = primary.pgbench_run_background(clients=4, jobs=2, seconds=40)
    time.sleep(2)
    primary.sql("ALTER SYSTEM SET pg_tsmove.debug_pause_at = 'copying'")
    primary.sql("SELECT pg_reload_conf()")
    time.sleep(0.3)
    job = relocate(primary, "ts_a", new_dir)
    wait_for(lambda: "job %d pauses at copying" % job in primary.log_contents(),
             30, what="the pause before the first page")
    time.sleep(1)
    primary.sql("ALTER SYSTEM RESET pg_tsmove.debug_pause_at")
    primary.sql("SELECT pg_reload_conf()")
    samples = []
    with primary.conn() as conn:
        while True:
            state, pace = conn.execute("SELECT state, pace_mb_s FROM tsmove.jobs "
                                       "WHERE job_id = %s", (job,)).fetchone()
            if state in ("done", "failed", "cancelled"):
                break
            samples.append((state, pace))
            time.sleep(0.01)
    result = bench.wait()
    assert state == "done", job_row(primary, job)
    paces = [pace for state, pace in samples if state in ("copying", "catching_up")]
    assert len(paces) >= 10, samples
    assert all(pace is not None and pace > 0 for pace in paces), samples
    assert result.failed_transactions == 0 and result.transactions > 1000
    assert primary.balance_invariant() == []
    assert location_of(primary, "ts_a") == new_dir
    assert primary.amcheck() == []
    assert primary.orphan_files() == []


def test_relocation_leaves_the_standby_alone(primary):
    """The copied pages are not WAL-logged: a standby keeps its own
    directory, and its data stays equal to the primary's."""
    primary.pgbench_init(3, extra_args=["--tablespace=ts_a", "--index-tablespace=ts_a"])
    standby = primary.make_standby("standby")
    standby_location = location_of(standby, "ts_a")
    new_dir = new_location(primary, "relocated")
    bench = primary.pgbench_run_background(clients=2, jobs=2, seconds=10)
    job = relocate(primary, "ts_a", new_dir, rate=16)
    assert wait_job(primary, job, 60) == "done"
    assert bench.wait().failed_transactions == 0
    primary.sql("UPDATE pgbench_branches SET bbalance = bbalance")   # after the switch
    assert primary.amcheck() == []      # also creates amcheck for the standby
    primary.wait_for_replay(standby)
    assert location_of(primary, "ts_a") == new_dir
    assert location_of(standby, "ts_a") == standby_location
    for table, order in (("pgbench_accounts", "aid"), ("pgbench_branches", "bid"),
                         ("pgbench_tellers", "tid")):
        assert primary.row_hash(table, order) == standby.row_hash(table, order)
    assert standby.balance_invariant() == []
    assert standby.amcheck() == []


def make_relocatable_table(cluster):
    cluster.sql("CREATE TABLE victim (id int PRIMARY KEY, pad text) TABLESPACE ts_a;"
                "INSERT INTO victim SELECT g, repeat('v', 200) FROM generate_series(1, 120000) g;"
                "CREATE UNLOGGED TABLE scratch (id int) TABLESPACE ts_a;"
                "INSERT INTO scratch SELECT generate_series(1, 1000)")
    return cluster.row_hash("victim", "id")


@pytest.mark.parametrize("moment, survivor", [
    ("copying", "old"), ("switching", "old"), ("warming", "new")])
@pytest.mark.matrix
def test_crash_during_relocation(primary, moment, survivor):
    """kill -9 while copying, while holding the switch's locks before the
    rename, and just after the rename: after restart exactly one location
    holds the files, the other nothing, the data is intact, and a second
    relocation succeeds."""
    expected = make_relocatable_table(primary)
    old_dir = location_of(primary, "ts_a")
    new_dir = new_location(primary, "relocated")
    if moment == "copying":
        job = relocate(primary, "ts_a", new_dir, rate=4)
        wait_for(lambda: job_row(primary, job)["blocks_copied"] > 100, 60, what="copying")
    else:
        job = relocate_paused_at(primary, moment, new_dir)
    db_dir = os.path.join(new_dir, primary.version_dir(), str(primary.sql_scalar(
        "SELECT oid FROM pg_database WHERE datname = 'postgres'")))
    primary.kill9()
    if moment == "warming":
        # what a crash inside copy_plain_file leaves: the recovery pass removes it
        with open(os.path.join(db_dir, "999999.tsmove_tmp"), "wb") as half_copied:
            half_copied.write(b"\0" * 8192)
    primary.start()
    end_pause(primary)

    row = wait_for_state(primary, job, ("failed", "done"), 60)
    kept, emptied = (old_dir, new_dir) if survivor == "old" else (new_dir, old_dir)
    assert row["state"] == ("done" if survivor == "new" else "failed"), row
    assert location_of(primary, "ts_a") == kept
    assert os.listdir(emptied) == []
    assert os.listdir(kept) != []
    assert primary.row_hash("victim", "id") == expected
    assert primary.sql_scalar("SELECT count(*) FROM scratch") == 0   # unlogged: reset by the crash
    assert not os.path.exists(os.path.join(db_dir, "999999.tsmove_tmp"))
    assert primary.amcheck() == [] and primary.orphan_files() == []

    again = relocate(primary, "ts_a", emptied)
    assert wait_job(primary, again, 60) == "done", job_row(primary, again)
    assert location_of(primary, "ts_a") == emptied
    assert os.listdir(kept) == []
    assert primary.row_hash("victim", "id") == expected
    assert primary.amcheck() == [] and primary.orphan_files() == []


def files_open_under(cluster, directory):
    """[(pid, path)] of the cluster's processes' open files inside directory."""
    directory = os.path.realpath(directory) + os.sep
    found = []
    for pid in processes_under(cluster.data_dir):
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith(directory):
                found.append((pid, target))
    return found


def io_method_available(cluster, io_method):
    if int(cluster.sql_scalar("SHOW server_version_num")) < 180000:
        return "io_method is new in PostgreSQL 18"
    if not cluster.sql_scalar("SELECT %s = ANY (enumvals) FROM pg_settings "
                              "WHERE name = 'io_method'", (io_method,)):
        return "this server was built without " + io_method
    if io_method == "io_uring" and os.path.exists("/proc/sys/kernel/io_uring_disabled"):
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            if f.read().strip() != "0":
                return "io_uring is disabled in this kernel"
    return None


@pytest.mark.matrix
@pytest.mark.parametrize("io_method", ["worker", "io_uring", "sync"])
def test_relocation_under_each_io_method(primary, io_method):
    """PostgreSQL 18's asynchronous I/O: with io_method = worker the I/O
    workers open relation files themselves and keep the descriptors, with
    io_uring the backends do.  A relocation under TPC-B with each method:
    after the switch no process of the server holds a file of the old
    location open, and no row is lost or resurrected."""
    why_not = io_method_available(primary, io_method)
    if why_not:
        pytest.skip(why_not)
    primary.sql("ALTER SYSTEM SET io_method = '%s'" % io_method)
    primary.restart()
    assert primary.sql_scalar("SHOW io_method") == io_method
    shadow = ShadowTpcb(primary, scale=5, tablespace="ts_a")
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    bench = shadow.run_background(seconds=15, clients=2, jobs=1)
    time.sleep(1)
    job = relocate(primary, "ts_a", new)
    assert wait_job(primary, job, 300) == "done", job_row(primary, job)
    assert files_open_under(primary, old) == []
    bench.wait()
    assert location_of(primary, "ts_a") == new
    assert shadow.problems() == [] and primary.orphan_files() == []


@pytest.mark.matrix
@pytest.mark.pg_conf("checkpoint_timeout = 30min")
def test_truncation_below_a_segment_boundary_during_relocation(primary):
    """VACUUM cuts a relation of more than 1 GB below a segment boundary
    while the relocation copies: md.c keeps the cut segment as an empty
    file, whose fsync request waits in the checkpointer.  The copy never
    had that segment; a checkpoint just after the rename, before the files
    that raced it are copied, fsyncs it through the link and must find it
    (a missing one PANICs the checkpointer)."""
    segment_rows = 131072             # one row a page: 1 GB of pages
    primary.sql("CREATE TABLE huge (id int, pad text) WITH (fillfactor = 10, "
                "autovacuum_enabled = off) TABLESPACE ts_a")
    primary.sql("INSERT INTO huge SELECT g, repeat('h', 700) FROM generate_series(1, %d) g"
                % (segment_rows + 3000))
    assert primary.sql_scalar("SELECT pg_relation_size('huge') / 8192") > segment_rows
    new_dir = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new_dir)   # listed, nothing copied
    primary.sql("DELETE FROM huge WHERE id > 100000")
    primary.sql("VACUUM huge")
    assert primary.sql_scalar("SELECT pg_relation_size('huge') / 8192") < segment_rows
    cut = primary.sql_scalar("SELECT pg_relation_filepath('huge')") + ".1"
    assert os.path.getsize(os.path.join(primary.data_dir, cut)) == 0
    set_pause(primary, "warming")     # just after the rename
    wait_for(lambda: "job %d pauses at warming" % job in primary.log_contents(), 300,
             what="the rename")
    primary.sql("CHECKPOINT")
    end_pause(primary)
    assert wait_job(primary, job, 300) == "done", job_row(primary, job)
    primary.sql("CHECKPOINT")
    assert "PANIC" not in primary.log_contents()
    assert primary.sql_scalar("SELECT count(*) FROM huge") == 100000
    assert primary.amcheck(relations=["huge"]) == []


def test_switch_waits_for_a_checkpoint_after_the_creation(primary):
    """A tablespace created after the last checkpoint: crash recovery would
    replay CREATE TABLESPACE and point its link back at the old location.
    The switch waits until a checkpoint has completed; a crash after it
    then keeps the new location."""
    expected = make_relocatable_table(primary)
    primary.sql("ALTER SYSTEM SET checkpoint_timeout = '1h'")   # no checkpoint by itself
    primary.sql("SELECT pg_reload_conf()")
    old_dir = location_of(primary, "ts_a")
    new_dir = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new_dir, checkpoint=False)
    row = wait_for(lambda: (lambda r: r if "waiting for a checkpoint" in (r["error"] or "")
                            else None)(job_row(primary, job)), 60,
                   what="the switch to wait for a checkpoint")
    assert row["state"] == "catching_up" and location_of(primary, "ts_a") == old_dir
    primary.sql("CHECKPOINT")
    assert wait_job(primary, job, 60) == "done", job_row(primary, job)
    primary.kill9()
    primary.start()
    assert location_of(primary, "ts_a") == new_dir and os.listdir(old_dir) == []
    assert primary.row_hash("victim", "id") == expected
    assert primary.amcheck() == [] and primary.orphan_files() == []


def test_ddl_during_relocation(primary):
    """Tables created, truncated, vacuumed (truncating their end) and
    dropped in the tablespace while it moves; a transaction that creates a
    table there stays open across the switch attempts, which wait for it."""
    primary.sql("""
        CREATE TABLE big (id int, pad text) TABLESPACE ts_a;
        INSERT INTO big SELECT g, repeat('b', 300) FROM generate_series(1, 60000) g;
        CREATE TABLE to_truncate (id int) TABLESPACE ts_a;
        INSERT INTO to_truncate SELECT generate_series(1, 50000);
        CREATE TABLE to_vacuum (id int, pad text) WITH (autovacuum_enabled = off) TABLESPACE ts_a;
        INSERT INTO to_vacuum SELECT g, repeat('x', 100) FROM generate_series(1, 100000) g;
        CREATE TABLE to_drop (id int) TABLESPACE ts_a;
        INSERT INTO to_drop SELECT generate_series(1, 50000)""")
    big = primary.row_hash("big", "id")
    old_dir = location_of(primary, "ts_a")
    new_dir = new_location(primary, "relocated")
    job = relocate(primary, "ts_a", new_dir, rate=8)
    wait_for(lambda: job_row(primary, job)["blocks_copied"] > 500, 60, what="copying")

    primary.sql("CREATE TABLE made (id int PRIMARY KEY, v text) TABLESPACE ts_a;"
                "INSERT INTO made SELECT g, md5(g::text) FROM generate_series(1, 20000) g")
    primary.sql("TRUNCATE to_truncate; INSERT INTO to_truncate SELECT generate_series(1, 10)")
    vacuum_blocks = primary.sql_scalar("SELECT pg_relation_size('to_vacuum') / 8192")
    primary.sql("DELETE FROM to_vacuum WHERE id > 1000")
    primary.sql("VACUUM to_vacuum")
    assert primary.sql_scalar("SELECT pg_relation_size('to_vacuum') / 8192") < vacuum_blocks
    primary.sql("DROP TABLE to_drop")
    opener = primary.conn(autocommit=False)
    opener.execute("CREATE TABLE held_open (id int) TABLESPACE ts_a")
    opener.execute("INSERT INTO held_open SELECT generate_series(1, 3000)")

    primary.sql("SELECT tsmove.set_rate(%s, 0)", (job,))
    row = wait_for(lambda: (lambda r: r if "waiting for the transaction" in (r["error"] or "")
                            else None)(job_row(primary, job)), 60,
                   what="the switch to wait for the open transaction")
    assert row["state"] == "catching_up"
    assert location_of(primary, "ts_a") == old_dir
    # the switch attempts given up kept the job's lock on the tablespace
    assert worker_lock_modes(
        primary, "l.locktype = 'object' AND l.classid = 'pg_catalog.pg_tablespace'::regclass "
        "AND l.objid = (SELECT oid FROM pg_catalog.pg_tablespace WHERE spcname = 'ts_a')") \
        == ["ExclusiveLock"]
    opener.commit()
    opener.close()
    assert wait_job(primary, job, 60) == "done", job_row(primary, job)

    assert location_of(primary, "ts_a") == new_dir and os.listdir(old_dir) == []
    assert primary.row_hash("big", "id") == big
    assert primary.sql("SELECT count(*), sum(id) FROM to_truncate") == [(10, 55)]
    assert primary.sql("SELECT count(*) FROM to_vacuum") == [(1000,)]
    assert primary.sql("SELECT count(*), count(DISTINCT v) FROM made") == [(20000, 20000)]
    assert primary.sql("SELECT count(*) FROM held_open") == [(3000,)]
    assert primary.sql_scalar("SELECT to_regclass('to_drop')") is None
    assert primary.amcheck() == [] and primary.orphan_files() == []
    primary.kill9()
    primary.start()
    assert primary.sql("SELECT count(*) FROM held_open") == [(3000,)]
    assert primary.row_hash("big", "id") == big


@pytest.mark.parametrize("admits_readers", ["off", "on"])
def test_relocation_cancels_blocking_queries_when_asked(primary, admits_readers):
    """A query in another database that outlasts every switch attempt
    starves a relocation by default; with
    pg_tsmove.switch_cancel_blockers_after set it is cancelled (across
    databases) and the relocation switches.  With the switch that admits
    readers the blocker must lock rows (SELECT ... FOR SHARE, as a writer
    locks the relation), and a plain reader of the same table is neither
    waited for nor cancelled."""
    readers_pass = admits_readers == "on"
    primary.sql("ALTER SYSTEM SET pg_tsmove.relocation_switch_admits_readers = %s" % admits_readers)
    primary.sql("SELECT pg_reload_conf()")
    expected = make_relocatable_table(primary)
    primary.sql("CREATE DATABASE %s" % SECOND_DB)
    primary.sql("CREATE TABLE held (id int) TABLESPACE ts_a;"
                "INSERT INTO held SELECT generate_series(1, 1000)", dbname=SECOND_DB)
    old_dir = location_of(primary, "ts_a")
    new_dir = new_location(primary, "relocated")
    reader = start_long_reader(primary, "held", 120, dbname=SECOND_DB, for_share=readers_pass)
    plain = start_long_reader(primary, "held", 30, dbname=SECOND_DB) if readers_pass else None
    job = relocate(primary, "ts_a", new_dir)
    wait_for(lambda: job_row(primary, job)["switch_attempts"] >= 3, 60,
             what="three switch attempts")
    time.sleep(1.5)
    assert reader.is_alive(), "the reader ended although cancelling is off"

    set_cancel_blockers_after(primary, "'1s'")
    assert wait_job(primary, job, 120) == "done"
    reader.join(10)
    assert reader.sqlstate == "57014", reader.sqlstate
    assert "cancelling the query of PID %d" % reader.pid in primary.log_contents()
    if plain is not None:
        assert plain.is_alive(), "the relocation waited for a plain reader"
        plain.join(40)
        assert plain.sqlstate is None, plain.sqlstate
        assert "cancelling the query of PID %d" % plain.pid not in primary.log_contents()
    assert primary.row_hash("victim", "id") == expected
    assert primary.sql_scalar("SELECT count(*) FROM held", dbname=SECOND_DB) == 1000
    assert_relocated(primary, "ts_a", old_dir, new_dir, job)


@pytest.mark.pg_conf("pg_tsmove.switch_lock_timeout = 2s", "pg_tsmove.switch_timed_wait = 0")
def test_relocation_names_no_writer_queued_behind_its_switch(primary):
    """As for a relation move (test_move_online.py): a writer that queued
    behind the relocation's lock request and got its lock when the attempt
    timed out did not block it.  The view names the reader that did, and
    only the reader's query is cancelled once cancelling is due; the
    writer's an attempt later, when it has blocked one itself."""
    expected = make_relocatable_table(primary)
    primary.sql("CREATE DATABASE %s" % SECOND_DB)
    primary.sql("CREATE TABLE queued (id int PRIMARY KEY, n int) TABLESPACE ts_a;"
                "INSERT INTO queued SELECT g, 0 FROM generate_series(1, 1000) g")
    old_dir = location_of(primary, "ts_a")
    new_dir = new_location(primary, "relocated")
    reader = start_long_reader(primary, "queued", 120)
    writer = None
    try:
        job = relocate(primary, "ts_a", new_dir)
        writer = start_writer_queued_behind_the_switch(primary, "queued", 40)
        note = wait_for(lambda: (lambda e: e if "blocked the last switch attempt" in e else None)(
            job_note(primary, job)), 20, what="the note of a skipped attempt")
        assert note.startswith("process %d blocked the last switch attempt" % reader.pid), \
            (reader.pid, writer.pid, note)
        assert reader.is_alive() and writer.is_alive()

        reader_ended = cancel_reader_then_writer(primary, job, reader, writer, 60)
    finally:
        primary.sql("SELECT pg_cancel_backend(%s)", (reader.pid,))
        reader.join(30)
        if writer is not None:
            primary.sql("SELECT pg_cancel_backend(%s)", (writer.pid,))
            writer.join(30)
    assert writer.sqlstate == "57014", writer.sqlstate
    # not cancelled with the reader: an attempt of 2 s came in between
    assert writer.ended - reader_ended > 1.0, writer.ended - reader_ended
    assert primary.sql_scalar("SELECT count(*) = count(DISTINCT id) FROM queued")
    assert primary.sql_scalar("SELECT sum(n) FROM queued") == 0   # the writer rolled back
    assert primary.row_hash("victim", "id") == expected
    assert_relocated(primary, "ts_a", old_dir, new_dir, job)


def test_refusals(primary, clusters):
    """Every refusal has its SQLSTATE, and changes nothing."""
    primary.sql("CREATE ROLE plain LOGIN")
    primary.sql("CREATE DATABASE defaulting TABLESPACE ts_b")
    empty = new_location(primary, "empty")
    full = new_location(primary, "full")
    with open(os.path.join(full, "something"), "w") as f:
        f.write("x")
    not_a_dir = os.path.join(primary.root_dir, "not_a_dir")
    with open(not_a_dir, "w") as f:
        f.write("x")
    not_ours = os.path.join(primary.root_dir, "not_ours")
    os.makedirs(not_ours)
    os.chown(not_ours, 0, 0)
    inside_old = new_location(primary, "tablespaces/ts_a/inside")

    def refused(sql, params, sqlstate, user="postgres"):
        with pytest.raises(psycopg.Error) as err:
            primary.sql(sql, params, user=user)
        assert err.value.sqlstate == sqlstate, (sql, params, err.value)
        assert err.value.diag.message_primary == err.value.diag.message_primary.rstrip(".")

    call = "SELECT tsmove.relocate_tablespace(%s, %s)"
    refused(call, ("pg_default", empty), "0A000")
    refused(call, ("pg_global", empty), "0A000")
    refused(call, ("no_such_tablespace", empty), "42704")
    refused(call, (None, empty), "22004")
    refused(call, ("ts_a", "relative/path"), "42P17")
    refused(call, ("ts_a", "/no/such/directory"), "58P01")
    refused(call, ("ts_a", not_a_dir), "42809")
    refused(call, ("ts_a", full), "55000")
    refused(call, ("ts_a", not_ours), "42501")
    refused(call, ("ts_a", inside_old), "22023")
    refused(call, ("ts_a", primary.data_dir), "42P17")
    refused(call, ("ts_b", empty), "55006")        # the default of database "defaulting"
    refused("SELECT tsmove.relocate_tablespace(%s, %s, max_rate_mb => -1)", ("ts_a", empty), "22023")
    primary.sql("GRANT EXECUTE ON FUNCTION tsmove.relocate_tablespace(name, text, numeric) TO plain")
    refused(call, ("ts_a", empty), "42501", user="plain")
    assert primary.sql_scalar("SELECT count(*) FROM tsmove.job") == 0

    # one relocation at a time; no relation move into or out of it meanwhile
    make_relocatable_table(primary)
    primary.sql("CREATE TABLE other (id int) TABLESPACE ts_b;"
                "INSERT INTO other SELECT generate_series(1, 100000)")
    job = relocate(primary, "ts_a", empty, rate=2)
    wait_for_state(primary, job, ("copying",), 30)
    refused(call, ("ts_a", new_location(primary, "second")), "55006")
    refused("SELECT tsmove.move('other', 'ts_a')", None, "55006")
    refused("SELECT tsmove.move('victim', 'ts_b')", None, "55006")
    assert primary.sql_scalar("SELECT tsmove.cancel(%s)", (job,)) is True
    assert wait_job(primary, job, 30) == "cancelled"
    assert os.listdir(empty) == []
    move = start_move(primary, "other", "ts_a", max_rate_mb=0.001)
    wait_for_state(primary, move, ("copying", "catching_up"), 30)
    refused(call, ("ts_a", empty), "55006")
    primary.sql("SELECT tsmove.cancel(%s)", (move,))
    assert wait_job(primary, move, 30) == "cancelled"
    assert primary.sql_scalar("SELECT count(*) FROM tsmove.job") == 2
    assert location_of(primary, "ts_a") == primary.tablespaces["ts_a"]
    assert primary.orphan_files() == []


@pytest.mark.pg_conf("pg_tsmove.max_workers = 2")
def test_move_tablespace_empties_it(primary):
    """Every relation of ts_a moves to ts_b under load, two at a time;
    what cannot move (a partitioned parent) is listed with the reason; the
    queue outlives a restart; once that is settled, DROP TABLESPACE works."""
    primary.pgbench_init(5, extra_args=["--tablespace=ts_a", "--index-tablespace=ts_a"])
    primary.sql("""
        CREATE TABLE docs (id int PRIMARY KEY USING INDEX TABLESPACE ts_a, body text)
            TABLESPACE ts_a;
        INSERT INTO docs SELECT g, CASE WHEN g % 100 = 0
            THEN (SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 100) i)
            ELSE 'd' END FROM generate_series(1, 30000) g;
        CREATE INDEX docs_body_hash ON docs USING hash (body) TABLESPACE ts_a;
        CREATE UNLOGGED TABLE scratch (id int PRIMARY KEY USING INDEX TABLESPACE ts_a)
            TABLESPACE ts_a;
        INSERT INTO scratch SELECT generate_series(1, 10000);
        CREATE MATERIALIZED VIEW docs_count TABLESPACE ts_a AS SELECT count(*) FROM docs;
        CREATE TABLE parted (id int) PARTITION BY RANGE (id) TABLESPACE ts_a;
        CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (1000) TABLESPACE ts_a;
        INSERT INTO parted SELECT generate_series(0, 999)""")
    hashes = {t: primary.row_hash(t, o) for t, o in
              (("docs", "id"), ("scratch", "id"), ("docs_count", "count"), ("parted", "id"))}

    bench = primary.pgbench_run_background(clients=2, jobs=2, seconds=8)
    jobs = [r[0] for r in primary.sql("SELECT tsmove.move_tablespace('ts_a', 'ts_b', "
                                      "max_rate_mb => 16)")]
    rows = {r[0]: r[1:] for r in primary.sql(
        "SELECT v.job_id, v.relname, v.mode, v.state, v.error, j.parent_job FROM tsmove.jobs v "
        "JOIN tsmove.job j USING (job_id) WHERE job_id = ANY(%s)", (jobs,))}
    by_name = {relname: (mode, state, error) for relname, mode, state, error, _ in rows.values()}
    assert by_name["public.scratch"][0] == "exclusive"
    assert by_name["public.parted"][1] == "skipped" and "partition" in by_name["public.parted"][2]
    assert rows[jobs[0]][0] == "public.pgbench_accounts"     # largest first
    assert rows[[j for j in jobs if rows[j][0] == "public.pgbench_accounts_pkey"][0]][4] == jobs[0]
    assert bench.wait().failed_transactions == 0

    # a restart with jobs still queued: they run afterwards
    wait_for(lambda: primary.sql_scalar("SELECT count(*) FROM tsmove.jobs WHERE state = 'done' "
                                        "AND job_id = ANY(%s)", (jobs,)) >= 1, 120,
             what="a first job to finish")
    primary.restart()
    for job in jobs:
        wait_job(primary, job, 180)
    states = dict(primary.sql("SELECT job_id, state FROM tsmove.job WHERE job_id = ANY(%s)",
                              (jobs,)))
    assert set(states.values()) <= {"done", "skipped", "failed", "cancelled"}, states
    again = [r[0] for r in primary.sql("SELECT tsmove.move_tablespace('ts_a', 'ts_b')")]
    for job in again:
        assert wait_job(primary, job, 180) in ("done", "skipped"), job_row(primary, job)

    primary.sql("ALTER TABLE parted SET TABLESPACE ts_b")      # its default for new partitions
    primary.sql("DROP TABLESPACE ts_a")
    assert primary.balance_invariant() == []
    for table, order in (("docs", "id"), ("docs_count", "count"), ("parted", "id")):
        assert primary.row_hash(table, order) == hashes[table], table
    assert primary.sql_scalar("SELECT count(*) FROM scratch") == 10000
    assert primary.amcheck() == [] and primary.orphan_files() == []


@pytest.mark.matrix
def test_free_space_map_that_grew_after_its_copy_moves_whole(primary):
    """The FSM is copied once (its changes are not WAL-logged).  A VACUUM
    that extends it while a lock holds the switch off must not leave the
    new file shorter than the FSM's buffers: after the switch, INSERT and
    VACUUM met "unexpected data beyond EOF" (a hostile review's case)."""
    primary.sql("CREATE TABLE t (id int, pad text) WITH (autovacuum_enabled = off) TABLESPACE ts_a")
    primary.sql("ALTER TABLE t ALTER pad SET STORAGE plain")
    primary.sql("INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(1, 28000) g")
    primary.sql("CREATE TABLE other (id int) TABLESPACE ts_a")
    primary.sql("INSERT INTO other VALUES (1)")
    primary.sql("VACUUM t")
    fsm_before = primary.sql_scalar("SELECT pg_relation_size('t', 'fsm') / 8192")
    new = new_location(primary, "relocated")
    with primary.conn() as blocker:
        blocker.execute("BEGIN")
        blocker.execute("SELECT * FROM other")       # holds the switch off
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: job_row(primary, job)["switch_attempts"] >= 1, 60,
                 what="a switch attempt")
        primary.sql("INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(28001, 29500) g")
        primary.sql("VACUUM t")
        fsm_grown = primary.sql_scalar("SELECT pg_relation_size('t', 'fsm') / 8192")
        assert fsm_grown > fsm_before, (fsm_before, fsm_grown)
        blocker.execute("ROLLBACK")
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new
    assert primary.sql_scalar("SELECT pg_relation_size('t', 'fsm') / 8192") == fsm_grown
    primary.sql("INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(29501, 31000) g")
    primary.sql("VACUUM t")
    primary.sql("INSERT INTO t SELECT g, repeat('y', 100) FROM generate_series(1, 2000) g")
    assert primary.sql_scalar("SELECT count(*) FROM t") == 33000
    assert primary.amcheck() == []
