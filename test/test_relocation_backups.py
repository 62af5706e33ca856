"""Relocations and backups, taken as DBAs take them, restored and started.

A relocation writes no WAL for its copy: a backup is only as good as the
files it read.  So the switch waits while any backup runs, pg_basebackup or
the low-level API (pg_backup_start ... pg_backup_stop, as pgBackRest, Barman
and WAL-G use it), also one that starts in the seconds between the switch's
check and its rename; and the recovery pass of a restored copy never
removes a directory that this data directory did not write.

After each restore: the restored copy starts, and its data passes the
checks of integrity.py; the original loses nothing.
"""

import os
import shutil
import subprocess
import tarfile
import time

import psycopg
import pytest

from integrity import ShadowTpcb
from moves import job_row, wait_for, wait_job
from pgcluster import (PG_BIN, Cluster, chown_to_server_user, make_server_dir,
                       run_server_program)
from test_relocation import (end_pause, job_note, location_of, new_location, relocate,
                             relocate_paused_at)

SCALE = 2


def new_cluster_dirs(primary, name):
    """A Cluster beside primary whose data directory a restore fills; it is
    destroyed with primary."""
    restored = Cluster(primary.base_dir, name)
    restored._make_dirs()
    primary.standbys.append(restored)
    return restored


def start_restored(restored, extra_conf=()):
    # the old server's port and socket are in the copied postgresql.conf;
    # append_conf puts this cluster's last
    for name in ("postmaster.pid", "standby.signal"):
        path = os.path.join(restored.data_dir, name)
        if os.path.exists(path):
            os.unlink(path)
    restored.append_conf(["cluster_name = '%s'" % restored.name, "archive_mode = off"]
                         + list(extra_conf))
    return restored.start()


def wait_promoted(restored, timeout_s, what):
    """Wait for the end of recovery by the log, not by connecting: a
    session that spans the promotion can trip an assertion of core's
    (18 with assertions: TransactionXmin after RecentXmin in
    GetSnapshotData), which is not what these tests are about."""
    wait_for(lambda: "database system is ready to accept connections" in restored.log_contents(),
             timeout_s, interval_s=0.2, what=what)


def chown_tree(path):
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            chown_to_server_user(os.path.join(root, name))
    chown_to_server_user(path)


def pg_basebackup(primary, target_dir, mappings, fmt="p"):
    argv = [os.path.join(PG_BIN, "pg_basebackup"), "-D", target_dir, "-d",
            primary.conninfo(), "-X", "stream", "-c", "fast", "-F", fmt, "--no-sync"]
    for old, new in mappings:
        argv += ["-T", "%s=%s" % (old, new)]
    return argv


def start_plain_backup(primary, old, new, extra_args=()):
    """Start pg_basebackup (plain) into a new cluster beside primary, ts_a
    mapped from either of its locations, the other tablespaces to their
    own directories.  Returns (restored cluster, its ts_a, the process)."""
    restored = new_cluster_dirs(primary, "restored")
    restored_ts = make_server_dir(os.path.join(restored.root_dir, "ts_a"))
    mappings = [(old, restored_ts), (new, restored_ts)] + [
        (location, make_server_dir(os.path.join(restored.root_dir, name)))
        for name, location in primary.tablespaces.items() if name != "ts_a"]
    argv = pg_basebackup(primary, restored.data_dir, mappings) + list(extra_args)
    backup = subprocess.Popen(["runuser", "-u", "postgres", "--"] + argv if os.geteuid() == 0
                              else argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd="/")
    return restored, restored_ts, backup


@pytest.mark.matrix
def test_pg_basebackup_in_the_switch_window(primary):
    """pg_basebackup starts after the switch's check, while the worker holds
    the locks before the rename (debug_pause_at 'switching'): the switch
    sees it at the rename, gives its locks back and waits for the backup to
    end.  The backup, restored and started, has every file."""
    shadow = ShadowTpcb(primary, scale=SCALE)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "switching", new)

    restored, restored_ts, backup = start_plain_backup(primary, old, new)
    wait_for(lambda: backup.poll() is not None or primary.sql_scalar(
        "SELECT count(*) FROM pg_stat_progress_basebackup"), 30, what="the backup to start")
    assert backup.poll() is None, backup.communicate()
    end_pause(primary)
    wait_for(lambda: "pg_basebackup" in job_note(primary, job), 30,
             what="the switch to see the backup")
    assert location_of(primary, "ts_a") == old     # not switched under the backup
    out, err = backup.communicate(timeout=120)
    assert backup.returncode == 0, err
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new

    start_restored(restored)
    assert shadow.problems(restored) == []
    assert restored.amcheck() == []
    assert location_of(restored, "ts_a") == restored_ts
    assert shadow.problems() == []


@pytest.mark.matrix
def test_low_level_backup_postpones_the_switch(primary):
    """A backup taken the way pgBackRest takes it: pg_backup_start(), copy
    the data directory and each tablespace's version directory through the
    pg_tblspc links, pg_backup_stop(), write backup_label and tablespace_map;
    WAL from the archive.  The relocation's switch waits until
    pg_backup_stop(); the backup, restored and started, is whole."""
    archive = make_server_dir(os.path.join(primary.root_dir, "archive"))
    primary.append_conf(["archive_mode = on",
                         "archive_command = 'cp %%p %s/%%f'" % archive])
    primary.restart()
    shadow = ShadowTpcb(primary, scale=SCALE)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    bench = shadow.run_background(seconds=15, clients=2, jobs=1)

    with primary.conn() as backup_session:
        backup_session.execute("SELECT pg_backup_start('tsmove test', true)")
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: "pg_backup_start" in job_note(primary, job), 60,
                 what="the switch to wait for the backup")

        restored = new_cluster_dirs(primary, "restored")
        copies = copy_data_directory(primary.data_dir, restored.data_dir,
                                     restored.tablespace_root)
        time.sleep(1)
        assert location_of(primary, "ts_a") == old   # still waiting
        label, spcmap = backup_session.execute(
            "SELECT labelfile, spcmapfile FROM pg_backup_stop(true)").fetchone()
    bench.wait()
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new

    with open(os.path.join(restored.data_dir, "backup_label"), "w") as f:
        f.write(label)
    with open(os.path.join(restored.data_dir, "tablespace_map"), "w") as f:
        f.write("".join("%s %s\n" % (line.split(" ", 1)[0], copies[line.split(" ", 1)[0]])
                        for line in spcmap.splitlines() if line.strip()))
    open(os.path.join(restored.data_dir, "recovery.signal"), "w").close()
    chown_tree(restored.root_dir)
    os.chmod(restored.data_dir, 0o700)
    start_restored(restored, ["restore_command = 'cp %s/%%f %%p'" % archive,
                              "recovery_target = 'immediate'",
                              "recovery_target_action = 'promote'"])
    wait_promoted(restored, 60, what="the restored copy to finish recovery")
    assert shadow.problems(restored) == []
    assert restored.amcheck() == []
    assert shadow.problems() == []


def copy_data_directory(data_dir, target, tablespace_root):
    """What a file-level backup tool copies: the data directory without
    what pg_basebackup leaves out, and each tablespace's version directory,
    followed through its pg_tblspc link, to tablespace_root/<oid>.
    Returns {oid: copy}."""
    skip_contents = {"pg_wal", "pg_replslot", "pg_stat_tmp", "pg_dynshmem",
                     "pg_notify", "pg_serial", "pg_snapshots", "pg_subtrans"}
    os.makedirs(target, exist_ok=True)
    for entry in os.listdir(data_dir):
        src, dst = os.path.join(data_dir, entry), os.path.join(target, entry)
        if entry in ("postmaster.pid", "postmaster.opts", "backup_label", "tablespace_map"):
            continue
        if entry in skip_contents or entry == "pg_tblspc":
            os.makedirs(dst, exist_ok=True)
            if entry == "pg_wal":
                os.makedirs(os.path.join(dst, "archive_status"), exist_ok=True)
            continue
        if os.path.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("pgsql_tmp*"))
        else:
            shutil.copy2(src, dst)
    copies = {}
    for oid in os.listdir(os.path.join(data_dir, "pg_tblspc")):
        location = os.readlink(os.path.join(data_dir, "pg_tblspc", oid))
        copies[oid] = os.path.join(tablespace_root, oid)
        os.makedirs(copies[oid], exist_ok=True)
        for version_dir in os.listdir(location):
            if version_dir.startswith("PG_"):
                shutil.copytree(os.path.join(location, version_dir),
                                os.path.join(copies[oid], version_dir),
                                ignore=shutil.ignore_patterns("pgsql_tmp*"))
    return copies


def test_restored_backup_leaves_the_original_alone(primary):
    """A tar backup taken while a relocation copies, restored later on the
    same host into the location the original has since left: its tablespace
    link names the old location, and its job row says 'copying'.  Its
    recovery pass must not remove the new location's files (the original's
    live tablespace): it fails the job and leaves both alone."""
    shadow = ShadowTpcb(primary, scale=SCALE)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new)
    bench = shadow.run_background(seconds=5, clients=2, jobs=1)
    tar_dir = os.path.join(primary.root_dir, "tar_backup")
    make_server_dir(tar_dir)
    run_server_program(pg_basebackup(primary, tar_dir, [], fmt="t"), timeout=300)
    bench.wait()
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new
    assert not any(e.startswith("PG_") for e in os.listdir(old))
    expected = primary.row_hash("pgbench_accounts", "aid")

    # restore: base.tar into a new data directory, the tablespace's tar into
    # the old location, which the tablespace_map in base.tar names
    restored = new_cluster_dirs(primary, "restored")
    make_server_dir(restored.data_dir)
    with tarfile.open(os.path.join(tar_dir, "base.tar")) as t:
        t.extractall(restored.data_dir)
    with tarfile.open(os.path.join(tar_dir, "pg_wal.tar")) as t:
        t.extractall(os.path.join(restored.data_dir, "pg_wal"))
    ts_a_oid = str(primary.sql_scalar("SELECT oid FROM pg_tablespace WHERE spcname = 'ts_a'"))
    spc_map = {}
    for name in os.listdir(tar_dir):
        oid = name.split(".")[0]
        if not oid.isdigit():
            continue
        # ts_a where the map says (the old location); any other tablespace
        # in a directory of the restored copy's own
        spc_map[oid] = old if oid == ts_a_oid else make_server_dir(
            os.path.join(restored.tablespace_root, oid))
        with tarfile.open(os.path.join(tar_dir, name)) as t:
            t.extractall(spc_map[oid])
    with open(os.path.join(restored.data_dir, "tablespace_map")) as f:
        assert "%s %s" % (ts_a_oid, old) in f.read()
    with open(os.path.join(restored.data_dir, "tablespace_map"), "w") as f:
        f.write("".join("%s %s\n" % item for item in spc_map.items()))
    chown_tree(restored.root_dir)
    chown_tree(old)
    os.chmod(restored.data_dir, 0o700)
    start_restored(restored)

    wait_for(lambda: restored.sql_scalar(
        "SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,)) == "failed", 60,
             what="the restored copy's recovery pass")
    error = restored.sql_scalar("SELECT error FROM tsmove.jobs WHERE job_id = %s", (job,))
    assert "left as they are" in error, error
    # the original's live tablespace is whole
    assert any(e.startswith("PG_") for e in os.listdir(new))
    assert primary.row_hash("pgbench_accounts", "aid") == expected
    assert shadow.problems() == []
    # the restored copy is consistent in its own (old) location
    assert location_of(restored, "ts_a") == old
    assert shadow.problems(restored) == []
    assert restored.amcheck() == []


def test_spilled_cursor_keeps_its_rows(primary):
    """A cursor whose sort spills into the tablespace (temp_tablespaces)
    after the switch's check: the switch sees its temporary file at the
    rename and waits; the cursor returns every row; then the switch
    happens."""
    primary.sql("CREATE TABLE t (i int) TABLESPACE ts_a; INSERT INTO t VALUES (1)")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "switching", new)
    rows = 2_200_000
    with primary.conn(autocommit=False) as conn:
        conn.execute("SET temp_tablespaces = ts_a; SET work_mem = '64kB'")
        conn.execute("DECLARE c CURSOR FOR SELECT g FROM generate_series(1, %d) g "
                     "ORDER BY g DESC" % rows)
        first = conn.execute("FETCH 1 FROM c").fetchone()[0]
        end_pause(primary)
        # the switch sees the file and waits (or, had it switched, it would
        # have shrunk the file: then the fetch comes short)
        wait_for(lambda: "temporary" in job_note(primary, job) or
                          job_row(primary, job)["state"] == "done", 30,
                          what="the switch to see the temporary file")
        saw_it = "temporary" in job_note(primary, job)
        fetched = 1 + len(conn.execute("FETCH ALL FROM c").fetchall())
        conn.rollback()
    assert first == rows and fetched == rows
    assert saw_it
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new


@pytest.mark.matrix
def test_backup_started_at_the_rename_reads_the_new_location(primary):
    """pg_basebackup started after the switch's last look, just before the
    rename (debug_pause_at 'renaming', checkpoints held back): its start
    checkpoint waits for the rename, so it lists the new link and copies
    the new, complete files.  Restored and started, it is whole."""
    shadow = ShadowTpcb(primary, scale=SCALE)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "renaming", new)

    restored, restored_ts, backup = start_plain_backup(primary, old, new)
    wait_for(lambda: backup.poll() is not None or primary.sql_scalar(
        "SELECT count(*) FROM pg_stat_progress_basebackup "
        "WHERE phase = 'waiting for checkpoint to finish'"), 30,
             what="the backup to wait for its checkpoint")
    time.sleep(2)
    # still held: its checkpoint waits for the rename
    assert backup.poll() is None, backup.communicate()
    assert primary.sql_scalar("SELECT phase FROM pg_stat_progress_basebackup") == \
        "waiting for checkpoint to finish"
    end_pause(primary)
    out, err = backup.communicate(timeout=120)
    assert backup.returncode == 0, err
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new

    start_restored(restored)
    assert location_of(restored, "ts_a") == restored_ts
    assert shadow.problems(restored) == []
    assert restored.amcheck() == []
    assert shadow.problems() == []


def test_recovery_leaves_locations_whose_mark_is_not_this_clusters(primary):
    """kill -9 while a relocation copies; before the restart the marks are
    made to name another data directory (another inode), as a copy of the
    location made by hand would: the recovery pass removes neither
    location and says why.  With the marks as written, the same crash
    removes the new location (test_relocation.py)."""
    shadow = ShadowTpcb(primary, scale=SCALE)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new)
    primary.kill9()
    marks = [os.path.join(loc, name) for loc in (old, new) for name in os.listdir(loc)
             if name.endswith(".relocation")]
    assert len(marks) == 2, marks
    for mark in marks:
        with open(mark) as f:
            text = f.read()
        assert "inode " in text
        with open(mark, "w") as f:
            f.write(text.replace("inode ", "inode 9"))
    new_entries = sorted(os.listdir(new))
    primary.start()
    end_pause(primary)
    wait_for(lambda: job_row(primary, job)["state"] == "failed", 60,
             what="the recovery pass")
    assert "left as they are" in job_row(primary, job)["error"]
    assert sorted(os.listdir(new)) == new_entries
    assert location_of(primary, "ts_a") == old
    assert shadow.problems() == []


def restore_tar_backup(primary, tar_dir, name, extra_conf):
    """A tar base backup restored into a new cluster beside primary, every
    tablespace in a directory of its own; started with extra_conf."""
    restored = new_cluster_dirs(primary, name)
    make_server_dir(restored.data_dir)
    with tarfile.open(os.path.join(tar_dir, "base.tar")) as t:
        t.extractall(restored.data_dir)
    spc_map = {}
    for entry in os.listdir(tar_dir):
        oid = entry.split(".")[0]
        if oid.isdigit():
            spc_map[oid] = make_server_dir(os.path.join(restored.tablespace_root, oid))
            with tarfile.open(os.path.join(tar_dir, entry)) as t:
                t.extractall(spc_map[oid])
    with open(os.path.join(restored.data_dir, "tablespace_map"), "w") as f:
        f.write("".join("%s %s\n" % item for item in spc_map.items()))
    if any(line.startswith("restore_command") for line in extra_conf):
        open(os.path.join(restored.data_dir, "recovery.signal"), "w").close()
    else:               # the WAL pg_basebackup streamed; crash recovery from backup_label
        with tarfile.open(os.path.join(tar_dir, "pg_wal.tar")) as t:
            t.extractall(os.path.join(restored.data_dir, "pg_wal"))
    chown_tree(restored.root_dir)
    os.chmod(restored.data_dir, 0o700)
    start_restored(restored, extra_conf)
    wait_promoted(restored, 120, what="%s to finish recovery" % name)
    return restored


@pytest.mark.parametrize("moment", ["copying", "warming", "shrinking"])
def test_tar_backup_during_a_relocation(primary, moment):
    """pg_basebackup in tar format while the relocation copies (the switch
    then waits for it), just after the rename, and while the old files
    shrink; under load.  Restored beside the original and started, each is
    whole, and the original loses nothing."""
    shadow = ShadowTpcb(primary, scale=SCALE)
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, moment, new)
    bench = shadow.run_background(seconds=4, clients=2, jobs=1)
    tar_dir = make_server_dir(os.path.join(primary.root_dir, "tar_backup"))
    run_server_program(pg_basebackup(primary, tar_dir, [], fmt="t"), timeout=300)
    bench.wait()
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    new_entries = sorted(os.listdir(new))

    restored = restore_tar_backup(primary, tar_dir, "restored", [])
    assert location_of(restored, "ts_a").startswith(restored.tablespace_root)
    assert shadow.problems(restored) == []
    assert restored.amcheck() == []
    state = restored.sql_scalar("SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,))
    assert state in ("failed", "done"), state
    assert sorted(os.listdir(new)) == new_entries
    assert location_of(primary, "ts_a") == new
    assert shadow.problems() == [] and primary.orphan_files() == []


def test_point_in_time_recovery_around_a_relocation(primary):
    """A base backup taken before a relocation, and the archived WAL,
    recovered to a restore point before it, during its copy, and after it:
    each copy is consistent, and its job is absent, failed with both
    locations left alone, or done, with its tablespace where the restore
    put it.  The original loses nothing."""
    archive = make_server_dir(os.path.join(primary.root_dir, "archive"))
    primary.append_conf(["archive_mode = on",
                         "archive_command = 'cp %%p %s/%%f'" % archive])
    primary.restart()
    shadow = ShadowTpcb(primary, scale=SCALE)
    tar_dir = make_server_dir(os.path.join(primary.root_dir, "tar_backup"))
    run_server_program(pg_basebackup(primary, tar_dir, [], fmt="t"), timeout=300)

    shadow.run_background(seconds=3, clients=2, jobs=1).wait()
    primary.sql("SELECT pg_create_restore_point('before')")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "copying", new)
    shadow.run_background(seconds=3, clients=2, jobs=1).wait()
    primary.sql("SELECT pg_create_restore_point('during')")
    end_pause(primary)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    shadow.run_background(seconds=3, clients=2, jobs=1).wait()
    primary.sql("SELECT pg_create_restore_point('after')")
    # The file that holds the last restore point, named once: the write
    # position moves on as soon as anything (the bgwriter's running-xacts
    # record) is logged, and the next file is archived only when it fills.
    last_file = primary.sql_scalar("SELECT pg_walfile_name(pg_switch_wal())")
    wait_for(lambda: primary.sql_scalar(
        "SELECT last_failed_wal IS NULL AND last_archived_wal >= %s "
        "FROM pg_stat_archiver", (last_file,)), 60,
             what="the WAL to be archived")
    new_entries = sorted(os.listdir(new))

    for target, state in (("before", None), ("during", "failed"), ("after", "done")):
        restored = restore_tar_backup(primary, tar_dir, "pitr_" + target, [
            "restore_command = 'cp %s/%%f %%p'" % archive,
            "recovery_target_name = '%s'" % target,
            "recovery_target_action = 'promote'"])
        rows = restored.sql("SELECT state, error FROM tsmove.jobs WHERE job_id = %s", (job,))
        if state is None:
            assert rows == [], rows
        else:
            wait_for(lambda: restored.sql_scalar(
                "SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,)) in ("failed", "done"),
                     60, what="the recovery pass in the copy at '%s'" % target)
            row = restored.sql("SELECT state, error FROM tsmove.jobs WHERE job_id = %s", (job,))[0]
            assert row[0] == state, (target, row)
            if state == "failed":
                assert "left as they are" in row[1], row
        assert location_of(restored, "ts_a").startswith(restored.tablespace_root)
        assert shadow.problems(restored) == [], target
        assert restored.amcheck() == [], target
        restored.destroy()
    assert sorted(os.listdir(new)) == new_entries
    assert location_of(primary, "ts_a") == new
    assert shadow.problems() == []


# ---- backups seen by what they do ------------------------------------------------

def small_table(cluster):
    cluster.sql("CREATE TABLE kept (id int PRIMARY KEY, pad text) TABLESPACE ts_a;"
                "INSERT INTO kept SELECT g, repeat('k', 100) FROM generate_series(1, 20000) g")
    return cluster.row_hash("kept", "id")


def libpq():
    """The system's libpq through ctypes: psycopg has no call for the
    fast-path function protocol (PQfn)."""
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("pq") or "libpq.so.5")
    lib.PQconnectdb.restype = ctypes.c_void_p
    lib.PQconnectdb.argtypes = [ctypes.c_char_p]
    lib.PQstatus.argtypes = [ctypes.c_void_p]
    lib.PQerrorMessage.restype = ctypes.c_char_p
    lib.PQerrorMessage.argtypes = [ctypes.c_void_p]
    lib.PQfn.restype = ctypes.c_void_p
    lib.PQresultStatus.argtypes = [ctypes.c_void_p]
    lib.PQclear.argtypes = [ctypes.c_void_p]
    lib.PQfinish.argtypes = [ctypes.c_void_p]
    return lib


def fastpath_backup_start(cluster):
    """pg_backup_start('fastpath', true) through the fast-path function
    call protocol, no SQL text at all; returns (lib, conn): the backup runs
    until PQfinish(conn)."""
    import ctypes

    class ArgBlock(ctypes.Structure):
        class U(ctypes.Union):
            _fields_ = [("ptr", ctypes.c_char_p), ("integer", ctypes.c_int)]
        _fields_ = [("len", ctypes.c_int), ("isint", ctypes.c_int), ("u", U)]

    lib = libpq()
    conn = lib.PQconnectdb(cluster.conninfo().encode())
    assert lib.PQstatus(conn) == 0, lib.PQerrorMessage(conn)
    fnoid = cluster.sql_scalar("SELECT 'pg_catalog.pg_backup_start(text, boolean)'"
                               "::regprocedure::oid")
    label, fast = b"fastpath", b"\x01"     # binary text and binary bool
    args = (ArgBlock * 2)()
    args[0].len, args[0].isint, args[0].u.ptr = len(label), 0, label
    args[1].len, args[1].isint, args[1].u.ptr = 1, 0, fast
    result = ctypes.create_string_buffer(8)            # pg_lsn, binary
    result_len = ctypes.c_int(0)
    res = lib.PQfn(ctypes.c_void_p(conn), ctypes.c_int(fnoid), result,
                   ctypes.byref(result_len), ctypes.c_int(0), args, ctypes.c_int(2))
    status = lib.PQresultStatus(res)
    lib.PQclear(res)
    assert status == 1, lib.PQerrorMessage(conn)       # PGRES_COMMAND_OK
    assert result_len.value == 8
    return lib, conn


# Ways to start a low-level backup whose executed query text does not name
# pg_backup_start (test_low_level_backup_postpones_the_switch has plain SQL):
# a PL/pgSQL simple expression runs without the executor's start, and a
# wrapper's caller names only the wrapper.
BACKUP_ROUTES = {
    "plpgsql_assignment": "DO $$DECLARE l pg_lsn; BEGIN "
                          "l := pg_backup_start('route plpgsql', true); END$$",
    "wrapper": "SELECT lab.begin_backup()",
}


@pytest.mark.parametrize("route", list(BACKUP_ROUTES) + ["fastpath"])
@pytest.mark.matrix
def test_backup_started_by_any_route_postpones_the_switch(primary, route):
    """A low-level backup postpones the switch however it was started: a
    PL/pgSQL assignment (a simple expression), a wrapper function, the
    fast-path protocol (no SQL text at all).  The
    job names it and the link does not change while it runs; once the
    session ends (which ends its backup) the relocation finishes, data
    intact."""
    digest = small_table(primary)
    primary.sql("CREATE SCHEMA lab; CREATE FUNCTION lab.begin_backup() RETURNS pg_lsn "
                "LANGUAGE plpgsql AS $$BEGIN RETURN pg_backup_start('route wrapper', true); "
                "END$$")
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    if route == "fastpath":
        lib, fp_conn = fastpath_backup_start(primary)
        session = None
    else:
        session = primary.conn()
        session.execute(BACKUP_ROUTES[route])
    try:
        assert primary.sql_scalar("SELECT count(*) FROM pg_stat_activity "
                                  "WHERE backend_type = 'client backend' AND pid <> "
                                  "pg_backend_pid()") >= 1
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: "pg_backup_start" in job_note(primary, job), 60,
                 what="the switch to wait for the backup")
        time.sleep(2)
        assert location_of(primary, "ts_a") == old
        assert job_row(primary, job)["state"] not in ("done", "failed")
    finally:
        if session is not None:
            session.close()
        else:
            lib.PQfinish(fp_conn)
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new
    assert primary.row_hash("kept", "id") == digest
    assert primary.amcheck() == []


def test_backup_text_in_a_query_postpones_nothing(primary):
    """No text match anywhere: a role with no privilege leaves a transaction
    idle after a query that mentions pg_backup_start(), and one whose call of
    it is refused (no EXECUTE); neither postpones the relocation."""
    digest = small_table(primary)
    primary.sql("CREATE ROLE tenant LOGIN")
    new = new_location(primary, "relocated")
    with primary.conn(user="tenant", autocommit=False) as idle, \
            primary.conn(user="tenant") as refused:
        idle.execute("SELECT 'a note that mentions pg_backup_start(''x'', true)'")
        with pytest.raises(Exception, match="permission denied"):
            refused.execute("SELECT pg_backup_start('not mine', true)")
        job = relocate(primary, "ts_a", new)
        # done while the idle transaction is still open
        assert wait_job(primary, job, 120) == "done", job_row(primary, job)
        assert idle.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        idle.rollback()
    assert location_of(primary, "ts_a") == new
    assert primary.row_hash("kept", "id") == digest


@pytest.mark.pg_conf("track_activities = off")
def test_pg_basebackup_seen_without_track_activities(primary):
    """pg_basebackup is seen by its walsender's state in shared memory, not
    by the activity statistics: with track_activities off, a throttled
    pg_basebackup running when the relocation starts postpones its switch
    until it ends; the backup, restored and started, has the table."""
    digest = small_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    restored, restored_ts, backup = start_plain_backup(primary, old, new,
                                                       ["--max-rate=2M"])
    wait_for(lambda: backup.poll() is not None or primary.sql_scalar(
        "SELECT count(*) FROM pg_stat_replication WHERE state = 'backup'"), 30,
        what="the backup to start")
    assert backup.poll() is None, backup.communicate()
    assert primary.sql_scalar("SELECT count(*) FROM pg_stat_progress_basebackup") == 0
    job = relocate(primary, "ts_a", new)
    wait_for(lambda: "pg_basebackup" in job_note(primary, job) or backup.poll() is not None,
             60, what="the switch to see the backup")
    assert backup.poll() is None, "the backup ended before the switch looked"
    assert location_of(primary, "ts_a") == old
    out, err = backup.communicate(timeout=300)
    assert backup.returncode == 0, err
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new
    start_restored(restored)
    assert restored.row_hash("kept", "id") == digest
    assert restored.amcheck() == []
