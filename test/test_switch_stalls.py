"""A process that does not answer procsignal barriers must not hold a
relocation's switch, with every relation of the tablespace locked, for
longer than the DBA allows.

Every process must close its descriptors of the old files (the SMGRRELEASE
barrier).  Two processes that do not answer it:

- a backend inside COPY FROM PROGRAM, blocked reading its program, after it
  read the tablespace's table: the switch takes no lock while it lags, the
  job names it, queries of the tablespace run, and once the program ends
  the relocation finishes;
- a backend blocked writing to a client that stopped reading: the
  barrier's signal sometimes lets its write go a little further, and it
  answers one barrier and not the next, so the try before the locks cannot
  tell whether it will answer the barrier after the rename
  (relocation_barrier.c).  With pg_tsmove.switch_cancel_blockers_after set
  it is terminated, wherever it holds the switch, and the relocation
  finishes.
"""

import os
import subprocess
import time

import pytest

from moves import job_row, wait_for, wait_job
from pgcluster import PG_BIN, chown_to_server_user
from test_relocation import location_of, make_relocatable_table, new_location, relocate


def open_files_under(pid, directory):
    """The files under directory that process pid has open (as root)."""
    fd_dir = "/proc/%d/fd" % pid
    targets = []
    for fd in os.listdir(fd_dir):
        try:
            targets.append(os.readlink(os.path.join(fd_dir, fd)))
        except FileNotFoundError:
            pass
    real = os.path.realpath(directory)
    return [t for t in targets if t.startswith(real + "/")]


def stalled_copy_client(cluster):
    """psql running a COPY whose output nobody reads; returns (process,
    backend pid) once the backend waits in ClientWrite."""
    client = subprocess.Popen(
        [os.path.join(PG_BIN, "psql"), "-X", "-d", cluster.conninfo(), "-c",
         "COPY (SELECT g, repeat('x', 500) FROM generate_series(1, 2000000) g) TO STDOUT"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    rows = wait_for(lambda: cluster.sql(
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'ClientWrite' AND query LIKE 'COPY%%'"),
        60, what="the COPY to block on its client")
    return client, rows[0][0]


@pytest.mark.matrix
def test_process_holding_old_files_holds_no_switch_lock(primary):
    expected = make_relocatable_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    primary.sql("CREATE TABLE sink (t text)")
    fifo = os.path.join(primary.root_dir, "program_input")
    os.mkfifo(fifo)
    chown_to_server_user(fifo)
    # two statements, two transactions: the lock on victim goes, its files stay open
    session = subprocess.Popen(
        [os.path.join(PG_BIN, "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", primary.conninfo(),
         "-c", "SELECT count(*) FROM victim", "-c", "COPY sink FROM PROGRAM 'cat %s'" % fifo],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=dict(os.environ, PGOPTIONS="-c max_parallel_workers_per_gather=0"))
    job = None
    try:
        holder = wait_for(lambda: primary.sql(
            "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'COPY sink%%'"),
            60, what="the COPY to wait for its program")[0][0]
        wait_for(lambda: open_files_under(holder, old), 10, what="the session to hold victim's files")
        job = relocate(primary, "ts_a", new)
        row = wait_for(lambda: (lambda r: r if "process %d has not closed its files" % holder
                                in (r["error"] or "") else None)(job_row(primary, job)),
                       60, what="the job to name the process")
        assert row["state"] == "catching_up", row
        # no lock of the tablespace's relations is held: queries run
        with primary.conn() as conn:
            conn.execute("SET lock_timeout = '2s'")
            started = time.monotonic()
            conn.execute("UPDATE victim SET pad = pad WHERE id = 1")
            assert time.monotonic() - started < 1
        assert location_of(primary, "ts_a") == old
        # not blocked on a client: not terminated, even with the setting
        primary.sql("ALTER SYSTEM SET pg_tsmove.switch_cancel_blockers_after = 0")
        primary.sql("SELECT pg_reload_conf()")
        time.sleep(8)
        assert primary.sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (holder,)) == [(1,)]
        assert job_row(primary, job)["state"] == "catching_up"
    finally:
        try:                    # the program reads the end of its input: COPY finishes
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            session.kill()      # no reader: the session failed before its COPY
        _, errors = session.communicate(timeout=60)
    assert session.returncode == 0, errors
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    assert location_of(primary, "ts_a") == new
    assert primary.row_hash("victim", "id") == expected
    assert primary.amcheck() == [] and primary.orphan_files() == []


@pytest.mark.matrix
@pytest.mark.pg_conf("pg_tsmove.switch_cancel_blockers_after = '1s'")
def test_session_blocked_on_its_client_is_terminated(primary):
    expected = make_relocatable_table(primary)
    new = new_location(primary, "relocated")
    client, stalled_pid = stalled_copy_client(primary)
    try:
        job = relocate(primary, "ts_a", new)
        # whether it lagged at the try before the locks or at the barrier
        # after the rename, it is terminated and the relocation finishes
        assert wait_job(primary, job, 120) == "done", job_row(primary, job)
        assert primary.sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (stalled_pid,)) == []
        with open(primary.log_file) as log:
            text = log.read()
            assert "pg_tsmove: terminated process %d, which was blocked writing to its client" \
                % stalled_pid in text
    finally:
        client.kill()
        client.wait()
    assert location_of(primary, "ts_a") == new
    assert primary.row_hash("victim", "id") == expected
    assert primary.amcheck() == [] and primary.orphan_files() == []
