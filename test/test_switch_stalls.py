"""A process that does not answer procsignal barriers must not hold a
relocation's switch, with every relation of the tablespace locked, for
longer than the DBA allows, and one that holds no file of the tablespace
must not hold it at all.

Every process that holds a descriptor of an old file must close it (the
SMGRRELEASE barrier); the switch finds them in /proc and waits for those
alone, under its locks and before the rename, at most 200 ms an attempt
(relocation_holders.c).  Processes that do not answer the barrier:

- the archiver inside a long archive_command, and a session blocked on its
  client that never read the tablespace: they hold nothing, and the
  relocation finishes while they still lag;
- a backend inside COPY FROM PROGRAM, blocked reading its program, after it
  read the tablespace's table: after one attempt the switch takes no lock
  while it lags, the job names it, queries of the tablespace run, it is not
  terminated, and once the program ends the relocation finishes;
- a backend blocked writing to a client that stopped reading, after it read
  the tablespace.  With pg_tsmove.switch_terminate_client_writers_after set
  it is sent SIGTERM before the locks, and the relocation finishes; unset,
  it is named and waited for with no lock.  With the experimental
  relocation_switch_admits_readers, readers open old files during the
  switch and the whole barrier is waited for after the rename: such a
  backend that started there is sent SIGTERM from that wait.  The client
  here never reads after its query, so it answers no barrier at all, and
  each path is reached on purpose.
"""

import os
import socket
import struct
import subprocess
import time

import pytest

from moves import job_row, wait_for, wait_job
from pgcluster import PG_BIN, chown_to_server_user
from test_relocation import (end_pause, location_of, make_relocatable_table, new_location,
                             relocate, relocate_paused_at)


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


def stalled_copy_client(cluster, first=None, source="generate_series(1, 200000) g"):
    """A session, over a raw socket, whose COPY output nobody reads; returns
    (socket, backend pid) once the backend waits in ClientWrite.  first: a
    query it runs before, in a transaction of its own (reading the
    tablespace's table leaves its files open in the session)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(os.path.join(cluster.socket_dir, ".s.PGSQL.%d" % cluster.port))
    params = b"user\0postgres\0database\0postgres\0application_name\0stalled\0\0"
    sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)

    def until_ready():
        answer = b""
        while not answer.endswith(b"Z\0\0\0\x05I"):      # ReadyForQuery, idle
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
            assert b"ERROR" not in answer, answer
    until_ready()
    if first is not None:
        q = first.encode() + b"\0"
        sock.sendall(b"Q" + struct.pack("!i", 4 + len(q)) + q)
        until_ready()
    query = ("COPY (SELECT repeat('x', 500) FROM %s) TO STDOUT" % source).encode() + b"\0"
    sock.sendall(b"Q" + struct.pack("!i", 4 + len(query)) + query)
    rows = wait_for(lambda: cluster.sql(
        "SELECT pid FROM pg_stat_activity WHERE wait_event = 'ClientWrite' "
        "AND application_name = 'stalled'"), 60, what="the COPY to block on its client")
    return sock, rows[0][0]


def attempts(cluster, job):
    return job_row(cluster, job)["switch_attempts"]


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
        # not blocked on a client: not terminated, even with the setting,
        # over two more attempts that each named it
        primary.sql("ALTER SYSTEM SET pg_tsmove.switch_terminate_client_writers_after = 0")
        primary.sql("SELECT pg_reload_conf()")
        seen = attempts(primary, job)
        wait_for(lambda: attempts(primary, job) >= seen + 3, 60, what="three more attempts")
        assert primary.sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (holder,)) == [(1,)]
        row = job_row(primary, job)
        assert row["state"] == "catching_up" and "process %d" % holder in row["error"], row
    finally:
        # the program reads the end of its input: COPY finishes
        deadline = time.monotonic() + 30
        while True:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                break
            except OSError:     # no reader yet
                if time.monotonic() > deadline:
                    session.kill()
                    break
                time.sleep(0.1)
        _, errors = session.communicate(timeout=60)
    assert session.returncode == 0, errors
    assert wait_job(primary, job, 120) == "done", job_row(primary, job)
    check_data(primary, new, expected)


def check_terminated(cluster, job, stalled_pid, where):
    assert wait_job(cluster, job, 120) == "done", job_row(cluster, job)
    assert cluster.sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (stalled_pid,)) == []
    assert "pg_tsmove: sent SIGTERM to process %d, which was blocked writing to its client and %s" \
        % (stalled_pid, where) in cluster.log_contents()


def check_data(cluster, location, expected):
    assert location_of(cluster, "ts_a") == location
    assert cluster.row_hash("victim", "id") == expected
    assert cluster.amcheck() == [] and cluster.orphan_files() == []


def named(cluster, job, pid):
    return "process %d has not closed its files" % pid in (job_row(cluster, job)["error"] or "")


@pytest.mark.matrix
def test_client_writer_lagging_before_the_locks_is_terminated(primary):
    """Unset, the setting terminates nobody; set, a session that two tries
    in a row named is sent SIGTERM before any lock."""
    expected = make_relocatable_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    client, stalled_pid = stalled_copy_client(primary, first="SELECT count(*) FROM victim")
    try:
        assert open_files_under(stalled_pid, old)
        job = relocate(primary, "ts_a", new)
        wait_for(lambda: named(primary, job, stalled_pid), 60, what="the job to name the session")
        seen = attempts(primary, job)
        wait_for(lambda: attempts(primary, job) >= seen + 2, 60, what="two more attempts")
        assert named(primary, job, stalled_pid) and location_of(primary, "ts_a") == old
        assert primary.sql("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (stalled_pid,)) == [(1,)]
        assert "sent SIGTERM" not in primary.log_contents()
        primary.sql("ALTER SYSTEM SET pg_tsmove.switch_terminate_client_writers_after = 0")
        primary.sql("SELECT pg_reload_conf()")
        check_terminated(primary, job, stalled_pid, "kept the relocation of tablespace \"ts_a\" "
                         "from switching")
        assert "after the rename" not in primary.log_contents()
    finally:
        client.close()
    check_data(primary, new, expected)


READERS_SWITCH = ("pg_tsmove.switch_terminate_client_writers_after = '8s'",
                  "pg_tsmove.relocation_switch_admits_readers = on")


@pytest.mark.matrix
@pytest.mark.pg_conf(*READERS_SWITCH)
@pytest.mark.parametrize("log_level", ["warning", "fatal"])
def test_client_writer_lagging_after_the_rename_is_terminated(primary, log_level):
    """The readers' switch: the session starts while the switch holds its
    locks, after the try, and reads the tablespace's table (ExclusiveLock
    lets it): it lags only the barrier after the rename, held with
    interrupts and every lock.  It is sent SIGTERM at the first of the
    wait's 5 s reports that comes after 8 s, the second.  The reports are
    LOG lines the worker reads from its log hook: with log_min_messages
    at fatal it still makes them."""
    expected = make_relocatable_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    job = relocate_paused_at(primary, "renaming", new)
    client, stalled_pid = stalled_copy_client(
        primary, source="victim, generate_series(1, 100) g")
    assert open_files_under(stalled_pid, old)
    try:
        assert location_of(primary, "ts_a") == old      # still paused
        # read with the pause's end (the pause is found by its LOG line)
        primary.sql("ALTER SYSTEM SET log_min_messages = %s" % log_level)
        end_pause(primary)
        check_terminated(primary, job, stalled_pid, "held the relocation's switch after the rename")
        log = primary.log_contents()
        reports = log.count("still waiting for backend with PID %d" % stalled_pid)
        assert reports >= 2, log[-3000:]
        assert "kept the relocation" not in log
    finally:
        client.close()
    check_data(primary, new, expected)


@pytest.mark.matrix
@pytest.mark.pg_conf("archive_mode = on", "archive_command = 'sleep 40'",
                     "pg_tsmove.switch_terminate_client_writers_after = 0")
def test_processes_holding_no_old_file_are_not_waited_for(primary):
    """The archiver inside a 40 s archive_command and a session blocked on
    its client (which never read the tablespace) answer no barrier and hold
    no file of it: the relocation switches while both still lag, holds its
    locks briefly, and terminates nobody (the setting would terminate a
    client writer that held one)."""
    expected = make_relocatable_table(primary)
    old = location_of(primary, "ts_a")
    new = new_location(primary, "relocated")
    archiver = primary.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'archiver'")[0][0]

    def archive_command_running():
        return subprocess.run(["pgrep", "-P", str(archiver)], capture_output=True,
                              text=True).stdout.split()
    primary.sql("SELECT pg_switch_wal()")
    archiving = wait_for(archive_command_running, 30, what="archive_command to run")
    client, stalled_pid = stalled_copy_client(primary)
    try:
        assert not open_files_under(stalled_pid, old)
        started = time.monotonic()
        job = relocate(primary, "ts_a", new)
        assert wait_job(primary, job, 30) == "done", job_row(primary, job)
        took = time.monotonic() - started
        # archive_command still runs, the session still lags
        assert archive_command_running() == archiving
        assert primary.sql("SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                           (stalled_pid,)) == [("ClientWrite",)]
        row = job_row(primary, job)
        assert took < 30 and row["switch_ms"] < 2000, (took, row)
        assert "sent SIGTERM" not in primary.log_contents()
    finally:
        client.close()
    check_data(primary, new, expected)
