"""Throwaway PostgreSQL 15 clusters for pg_tsmove's integration tests.

A test builds real clusters (initdb, pg_ctl, pg_basebackup, pgbench from
PG_BIN), moves data around with the extension, crashes them, and then asks
the integrity checks below whether anything was lost or left behind.

    from pgcluster import Cluster
    primary = Cluster(base_dir, "primary").init().start()
    primary.create_tablespace("ts_a")
    primary.sql("CREATE TABLE t (i int) TABLESPACE ts_a")
    standby = primary.make_standby("standby")
    primary.wait_for_replay(standby)
    assert primary.row_hash("t", "i") == standby.row_hash("t", "i")
    primary.destroy()            # also destroys its standbys

Clusters
    Cluster(base_dir, name, port=None) only names things: everything lives
    in base_dir/name/ (data/, sock/, tablespaces/, server.log).  init()
    runs initdb -A trust (optionally --data-checksums) and writes the
    settings the tests rely on: pg_tsmove preloaded (preload=False for a
    cluster without it), wal_level=replica, hot standby, unix socket only
    (listen_addresses=''), max_worker_processes=16, plus extra_conf lines.
    fsync stays on: crash tests need real behaviour.  start(), stop(mode),
    restart(), kill9(), is_running(), log_contents(), destroy().

    The server log is base_dir/name/server.log (pg_ctl -l), outside the
    data directory so that pg_basebackup does not copy a primary's log
    into its standby.

Privileges
    PostgreSQL refuses to run as root.  When the test runs as root, server
    programs run as the OS user "postgres" through runuser, and every
    directory a server uses is chowned to it.  Client programs (psql,
    pgbench, psycopg) run as the caller and connect as database user
    postgres over the cluster's socket directory (trust authentication).
    base_dir must be traversable by that user: not under /root, not under
    pytest's 0700 tmp_path.  Keep it short: pg_basebackup's tar format
    limits a tablespace symlink target to 100 bytes, and a socket path is
    limited to 107.

Crashes
    kill9() sends SIGKILL to the postmaster and returns only when every
    process of the cluster has exited (a process belongs to a cluster when
    its working directory is the data directory, which is true of the
    postmaster and all its children).  The calling process makes itself a
    child subreaper so that it can reap the killed postmaster: otherwise
    the zombie keeps its PID alive and the next postmaster refuses to
    start over the stale postmaster.pid.

Standbys
    make_standby() maps every tablespace of the primary to a directory of
    the standby (pg_basebackup -T).  Create tablespaces before the standby:
    one created later would be replayed onto the primary's own directory.

Integrity checks
    balance_invariant(), amcheck(), orphan_files() return lists of problem
    descriptions; an empty list means all is well, so a test writes
    `assert cluster.amcheck() == []` and a failure shows every problem.
    orphan_files() expects no DDL in flight: the new file of a running
    move is an orphan until its switch commits.
"""

import ctypes
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import psycopg
from psycopg import sql as pgsql

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
SERVER_USER = "postgres"
DEFAULT_TIMEOUT = 60

_PR_SET_CHILD_SUBREAPER = 36
_RELATION_FILE = re.compile(r"^(\d+)(?:_(?:fsm|vm|init))?(?:\.\d+)?$")


class ClusterError(Exception):
    """A server program failed; the message carries its output and log."""


def find_free_port():
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(argv):
    """argv prefixed to run as the server's OS user when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", SERVER_USER, "--"] + list(argv)
    return list(argv)


def chown_to_server_user(path):
    """Give path to the server's OS user (a no-op when not root)."""
    if os.geteuid() == 0:
        shutil.chown(path, SERVER_USER, SERVER_USER)


def make_server_dir(path, mode=0o700):
    """Create a directory (and parents) owned by the server's OS user."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)
    chown_to_server_user(path)
    return path


def run_server_program(argv, timeout=DEFAULT_TIMEOUT):
    """Run a server program as the server's user; raise ClusterError on failure."""
    proc = subprocess.run(server_command(argv), capture_output=True, text=True,
                          timeout=timeout, cwd="/")
    if proc.returncode != 0:
        raise ClusterError("%s failed (exit %d)\nstdout:\n%s\nstderr:\n%s"
                           % (" ".join(argv), proc.returncode, proc.stdout,
                              proc.stderr))
    return proc


def become_subreaper():
    """Adopt orphaned descendants (the postmasters pg_ctl leaves behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap(pids):
    """Collect the exit status of those pids that are our exited children."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


@functools.lru_cache(maxsize=None)
def initdb_has_option(option):
    """Whether this server's initdb knows option (its --help names it)."""
    proc = subprocess.run([os.path.join(PG_BIN, "initdb"), "--help"],
                          capture_output=True, text=True, check=False)
    return option in proc.stdout


def processes_under(directory):
    """{pid: command line} of live processes whose cwd is inside directory."""
    directory = os.path.realpath(directory)
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink("/proc/%s/cwd" % entry)
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue            # exited, zombie, or not ours to inspect
        if cwd == directory or cwd.startswith(directory + os.sep):
            found[int(entry)] = cmdline.strip()
    return found


class Cluster:
    """One PostgreSQL server with its data, socket and tablespace directories."""

    def __init__(self, base_dir, name, port=None):
        self.base_dir = os.path.realpath(base_dir)
        self.name = name
        self.port = port or find_free_port()
        self.root_dir = os.path.join(self.base_dir, name)
        self.data_dir = os.path.join(self.root_dir, "data")
        self.socket_dir = os.path.join(self.root_dir, "sock")
        self.tablespace_root = os.path.join(self.root_dir, "tablespaces")
        self.log_file = os.path.join(self.root_dir, "server.log")
        self.tablespaces = {}   # tablespace name -> directory (LOCATION)
        self.standbys = []

    def __repr__(self):
        return "Cluster(%r, port=%d)" % (self.root_dir, self.port)

    # ---- life cycle -----------------------------------------------------

    def _make_dirs(self):
        make_server_dir(self.base_dir, 0o755)
        make_server_dir(self.root_dir, 0o755)
        make_server_dir(self.socket_dir)
        make_server_dir(self.tablespace_root)

    def init(self, checksums=False, preload=True, extra_conf=()):
        """initdb and write the test settings; returns self."""
        self._make_dirs()
        argv = [os.path.join(PG_BIN, "initdb"), "-D", self.data_dir,
                "-A", "trust", "-U", SERVER_USER, "-E", "UTF8",
                "--locale", "C", "--no-sync"]
        if checksums:
            argv.append("--data-checksums")
        elif initdb_has_option("--no-data-checksums"):
            argv.append("--no-data-checksums")      # 18 turned them on by default
        run_server_program(argv, timeout=120)
        conf = [
            "listen_addresses = ''",
            "wal_level = replica",
            "max_wal_senders = 10",
            "max_replication_slots = 10",
            "hot_standby = on",
            "max_worker_processes = 16",
            "logging_collector = off",
            "log_line_prefix = '%m [%p] %q%a '",
            "cluster_name = '%s'" % self.name,
        ]
        if preload:
            conf.append("shared_preload_libraries = 'pg_tsmove'")
        self.append_conf(conf + list(extra_conf))
        return self

    def append_conf(self, lines):
        """Append settings to postgresql.conf; later lines win.  The port and
        socket directory are (re)written last, so they always match self."""
        path = os.path.join(self.data_dir, "postgresql.conf")
        with open(path, "a") as f:
            f.write("\n# pgcluster.py\n")
            for line in lines:
                f.write(line + "\n")
            f.write("port = %d\n" % self.port)
            f.write("unix_socket_directories = '%s'\n" % self.socket_dir)

    def start(self, timeout=DEFAULT_TIMEOUT):
        """Start and wait until connections are accepted; returns self."""
        become_subreaper()
        try:
            run_server_program([os.path.join(PG_BIN, "pg_ctl"), "start", "-w",
                                "-t", str(timeout), "-D", self.data_dir,
                                "-l", self.log_file], timeout=timeout + 10)
        except ClusterError as e:
            raise ClusterError("%s: start failed: %s\nserver log tail:\n%s"
                               % (self.name, e, self.log_tail())) from None
        return self

    def stop(self, mode="fast", timeout=DEFAULT_TIMEOUT):
        """pg_ctl stop -m mode (smart, fast, immediate); no-op if stopped."""
        pid = self.postmaster_pid()
        if pid is None or not self.is_running():
            return
        run_server_program([os.path.join(PG_BIN, "pg_ctl"), "stop", "-w",
                            "-t", str(timeout), "-m", mode,
                            "-D", self.data_dir], timeout=timeout + 10)
        self._wait_all_exited(timeout)
        reap([pid])

    def restart(self, mode="fast"):
        self.stop(mode)
        return self.start()

    def kill9(self, timeout=DEFAULT_TIMEOUT):
        """SIGKILL the postmaster, as a crash would, and return when every
        process of the cluster has exited, so that start() runs recovery."""
        pid = self.postmaster_pid()
        if pid is None or not self.is_running():
            raise ClusterError("%s: kill9 of a cluster that is not running"
                               % self.name)
        os.kill(pid, signal.SIGKILL)
        self._wait_all_exited(timeout)
        self._wait_reaped(pid, timeout)

    def _wait_all_exited(self, timeout):
        """Wait until no process runs in the data directory.  A survivor
        means a child ignores postmaster death (a worker without
        WL_EXIT_ON_PM_DEATH): kill it, so the next start works, and fail."""
        deadline = time.monotonic() + timeout
        seen = set()
        while True:
            alive = processes_under(self.data_dir)
            seen.update(alive)
            reap(seen)
            if not alive:
                return
            if time.monotonic() > deadline:
                for pid in alive:
                    os.kill(pid, signal.SIGKILL)
                raise ClusterError(
                    "%s: processes still running %ds after the postmaster "
                    "went away: %s" % (self.name, timeout, alive))
            time.sleep(0.05)

    def _wait_reaped(self, pid, timeout):
        """Wait until the killed postmaster is gone from the process table.
        A process being killed can already have no readable cwd (so
        _wait_all_exited no longer counts it) and not yet be a zombie that
        waitpid() collects; left a zombie, its PID stays alive to kill(0),
        and the next postmaster refuses to start over its postmaster.pid."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                if not os.path.exists("/proc/%d" % pid):
                    return      # not our child, and reaped by its parent
            if time.monotonic() > deadline:
                raise ClusterError("%s: postmaster %d not reaped %ds after SIGKILL"
                                   % (self.name, pid, timeout))
            time.sleep(0.02)

    def postmaster_pid(self):
        """PID recorded in postmaster.pid, or None if there is no such file."""
        try:
            with open(os.path.join(self.data_dir, "postmaster.pid")) as f:
                return int(f.readline())
        except (FileNotFoundError, ValueError):
            return None

    def is_running(self):
        """True if the postmaster named in postmaster.pid is alive."""
        pid = self.postmaster_pid()
        if pid is None:
            return False
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        return state != "Z"

    def destroy(self):
        """Stop this cluster and its standbys and delete their directories.
        Idempotent; fails if a process of the cluster survives."""
        for standby in self.standbys:
            standby.destroy()
        if self.is_running():
            self.stop("immediate")
        self._wait_all_exited(DEFAULT_TIMEOUT)
        shutil.rmtree(self.root_dir, ignore_errors=True)

    def log_contents(self):
        try:
            with open(self.log_file, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def log_tail(self, lines=60):
        return "\n".join(self.log_contents().splitlines()[-lines:])

    # ---- SQL ------------------------------------------------------------

    def conninfo(self, dbname="postgres", user=SERVER_USER):
        return "host=%s port=%d user=%s dbname=%s" % (
            self.socket_dir, self.port, user, dbname)

    def conn(self, dbname="postgres", autocommit=True, user=SERVER_USER):
        """A new psycopg connection; the caller closes it (use `with`)."""
        return psycopg.connect(self.conninfo(dbname, user), autocommit=autocommit)

    def sql(self, query, params=None, dbname="postgres", user=SERVER_USER):
        """Run one statement in its own autocommit session; return its rows
        (a list of tuples, empty for statements without a result).  user
        names the database role (trust authentication)."""
        with self.conn(dbname, user=user) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description is not None else []

    def sql_scalar(self, query, params=None, dbname="postgres", user=SERVER_USER):
        """The single value of a single-row, single-column query."""
        rows = self.sql(query, params, dbname, user)
        if len(rows) != 1 or len(rows[0]) != 1:
            raise ValueError("expected one value from %r, got %r" % (query, rows))
        return rows[0][0]

    def psql(self, command, dbname="postgres", check=True):
        """Run psql -c command; returns the CompletedProcess (text output)."""
        proc = subprocess.run(
            [os.path.join(PG_BIN, "psql"), "-X", "-v", "ON_ERROR_STOP=1",
             "-d", self.conninfo(dbname), "-c", command],
            capture_output=True, text=True, timeout=DEFAULT_TIMEOUT)
        if check and proc.returncode != 0:
            raise ClusterError("psql failed (exit %d): %s"
                               % (proc.returncode, proc.stderr))
        return proc

    # ---- tablespaces and standbys ---------------------------------------

    def create_tablespace(self, name):
        """Make base_dir/<cluster>/tablespaces/<name> and CREATE TABLESPACE."""
        location = make_server_dir(os.path.join(self.tablespace_root, name))
        self.sql(pgsql.SQL("CREATE TABLESPACE {} LOCATION {}").format(
            pgsql.Identifier(name), pgsql.Literal(location)))
        self.tablespaces[name] = location
        return location

    def make_standby(self, name, port=None, extra_conf=(), max_rate=None):
        """pg_basebackup -R -X stream into a new cluster, start it, return it
        (a standby of this one: of a standby, a cascading one).  max_rate:
        pg_basebackup's --max-rate (e.g. "2M").  It is destroyed with this
        cluster."""
        standby = Cluster(self.base_dir, name, port)
        standby._make_dirs()
        argv = [os.path.join(PG_BIN, "pg_basebackup"), "-D", standby.data_dir,
                "-d", self.conninfo(), "-R", "-X", "stream", "-c", "fast",
                "--no-sync"] + (["--max-rate", max_rate] if max_rate else [])
        for ts_name, location in self.tablespaces.items():
            standby.tablespaces[ts_name] = os.path.join(
                standby.tablespace_root, ts_name)
            argv += ["-T", "%s=%s" % (location, standby.tablespaces[ts_name])]
        self.standbys.append(standby)
        run_server_program(argv, timeout=300)
        standby.append_conf(["cluster_name = '%s'" % name] + list(extra_conf))
        return standby.start()

    def wait_for_replay(self, standby, timeout=DEFAULT_TIMEOUT):
        """Wait until standby has replayed all WAL written so far here.
        pg_switch_wal() ends the current segment with a record whose end is
        exactly the flush LSN, so the target is reachable even when the
        last record is still partly unflushed."""
        self.sql("SELECT pg_switch_wal()")
        target = self.sql_scalar("SELECT pg_current_wal_flush_lsn()")
        deadline = time.monotonic() + timeout
        while True:
            replayed = standby.sql_scalar("SELECT pg_last_wal_replay_lsn()")
            if standby.sql_scalar("SELECT %s::pg_lsn >= %s::pg_lsn",
                                  (replayed, target)):
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    "%s replayed up to %s, not %s, in %ds\nstandby log tail:\n%s"
                    % (standby.name, replayed, target, timeout,
                       standby.log_tail()))
            time.sleep(0.1)

    # ---- pgbench --------------------------------------------------------

    def pgbench_init(self, scale, dbname="postgres", extra_args=()):
        """pgbench -i -s scale (e.g. extra_args=["--tablespace=ts_a"])."""
        proc = subprocess.run(
            [os.path.join(PG_BIN, "pgbench"), "-i", "-q", "-s", str(scale)]
            + list(extra_args) + [self.conninfo(dbname)],
            capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise ClusterError("pgbench -i failed (exit %d): %s"
                               % (proc.returncode, proc.stderr))

    def pgbench_run_background(self, clients=4, jobs=2, seconds=10,
                               extra_args=(), dbname="postgres"):
        """Start pgbench -T seconds now; .wait() returns a PgbenchResult.
        Runs with -n: pgbench's pre-run TRUNCATE of pgbench_history would
        break balance_invariant()."""
        return PgbenchRun(self, clients, jobs, seconds, extra_args, dbname)

    # ---- integrity checks -----------------------------------------------

    def balance_invariant(self, dbname="postgres"):
        """TPC-B bookkeeping: every transaction adds the same delta to one
        account, teller, branch and history row, so the four sums agree."""
        sums = self.sql("""
            SELECT (SELECT sum(abalance) FROM pgbench_accounts),
                   (SELECT sum(bbalance) FROM pgbench_branches),
                   (SELECT sum(tbalance) FROM pgbench_tellers),
                   (SELECT coalesce(sum(delta), 0) FROM pgbench_history)""",
                        dbname=dbname)[0]
        names = ("accounts", "branches", "tellers", "history")
        if len(set(sums)) == 1:
            return []
        return ["balance sums differ: " + ", ".join(
            "%s=%s" % pair for pair in zip(names, sums))]

    def amcheck(self, dbname="postgres", relations=None):
        """verify_heapam on every table (with TOAST) and bt_index_check
        (heapallindexed) on every btree index of the database, or of the
        given relations and their indexes.  Returns problem strings."""
        if not self.sql_scalar("SELECT count(*) FROM pg_extension WHERE extname = 'amcheck'",
                               dbname=dbname):
            self.sql("CREATE EXTENSION amcheck", dbname=dbname)   # not on a standby
        scope = ""
        params = None
        if relations is not None:
            scope = """AND (c.oid = ANY (%(rels)s::regclass[])
                        OR c.oid IN (SELECT indexrelid FROM pg_index
                                     WHERE indrelid = ANY (%(rels)s::regclass[])))"""
            params = {"rels": list(relations)}
        targets = self.sql("""
            SELECT c.oid::regclass::text, c.relkind, a.amname
            FROM pg_class c LEFT JOIN pg_am a ON a.oid = c.relam
            WHERE c.relpersistence <> 't' AND c.relkind IN ('r', 'm', 'i')
              AND (c.relkind <> 'i' OR a.amname = 'btree')
              AND NOT EXISTS (SELECT FROM pg_index x WHERE x.indexrelid = c.oid
                              AND NOT (x.indisvalid AND x.indisready))
            """ + scope + " ORDER BY c.oid", params, dbname=dbname)
        if relations is not None and not targets:
            return ["amcheck: nothing to check in %r" % (relations,)]
        problems = []
        with self.conn(dbname) as conn:
            for relname, relkind, _ in targets:
                try:
                    if relkind == "i":
                        conn.execute("SELECT bt_index_check(%s::regclass, true)",
                                     (relname,))
                    else:
                        for blkno, offnum, attnum, msg in conn.execute(
                                "SELECT * FROM verify_heapam(%s::regclass, "
                                "check_toast => true)", (relname,)):
                            problems.append("%s: block %s offset %s attribute "
                                            "%s: %s" % (relname, blkno, offnum,
                                                        attnum, msg))
                except psycopg.Error as e:
                    problems.append("%s: %s" % (relname, str(e).strip()))
        return problems

    def row_hash(self, table, order_by, dbname="postgres"):
        """md5 over the rows of table in order_by order.  table and order_by
        are SQL text written by the test, not user input."""
        query = pgsql.SQL(
            "SELECT md5(string_agg(md5(t::text), '' ORDER BY {order}))"
            " FROM {table} t").format(order=pgsql.SQL(order_by),
                                      table=pgsql.SQL(table))
        return self.sql_scalar(query, dbname=dbname)

    def database_dirs(self, dbname="postgres"):
        """{tablespace name: directory holding dbname's files in it}."""
        rows = self.sql("""
            SELECT t.spcname, pg_tablespace_location(t.oid), d.oid
            FROM pg_tablespace t, pg_database d
            WHERE d.datname = %s AND t.spcname <> 'pg_global'""", (dbname,))
        version_dir = self.version_dir()
        dirs = {}
        for spcname, location, dboid in rows:
            if spcname == "pg_default":
                dirs[spcname] = os.path.join(self.data_dir, "base", str(dboid))
            else:
                # the server's own link: a relocation changes it, and a
                # standby's points to its own directory
                location = os.path.join(self.data_dir, location)
                dirs[spcname] = os.path.join(location, version_dir, str(dboid))
        return dirs

    def version_dir(self):
        """The directory a tablespace's location holds for this server:
        PG_<major>_<catalog version>."""
        with open(os.path.join(self.data_dir, "PG_VERSION")) as f:
            major = f.read().strip()
        return "PG_%s_%s" % (major, self._catalog_version())

    def _catalog_version(self):
        proc = run_server_program([os.path.join(PG_BIN, "pg_controldata"),
                                   self.data_dir])
        return re.search(r"Catalog version number:\s+(\d+)", proc.stdout).group(1)

    def _filenodes_by_tablespace(self, dbname):
        """{tablespace name: set of filenodes present in its directory}."""
        present = {}
        for spcname, directory in self.database_dirs(dbname).items():
            nodes = set()
            if os.path.isdir(directory):
                for fname in os.listdir(directory):
                    m = _RELATION_FILE.match(fname)
                    if m:
                        nodes.add(int(m.group(1)))
            present[spcname] = nodes
        return present

    def _relation_storage(self, dbname):
        """[(relation, filenode, tablespace name)] of relations with storage;
        reltablespace 0 is the database's default tablespace."""
        return self.sql("""
            SELECT c.oid::regclass::text, pg_relation_filenode(c.oid)::bigint,
                   t.spcname
            FROM pg_class c
            CROSS JOIN pg_database d
            JOIN pg_tablespace t ON t.oid = CASE c.reltablespace WHEN 0
                                   THEN d.dattablespace ELSE c.reltablespace END
            WHERE d.datname = current_database()
              AND pg_relation_filenode(c.oid) IS NOT NULL
              AND c.relpersistence <> 't' AND t.spcname <> 'pg_global'""",
                        dbname=dbname)

    def orphan_files(self, dbname="postgres"):
        """Storage that the catalog does not account for, after two
        checkpoints (a dropped relation's first segment is unlinked only
        after the checkpoint that follows the drop).  Returns problems:
        files of no relation, files of a relation in a tablespace other
        than its own (a second copy), and relations whose file is missing.
        Temporary relations' files (t<backend>_<node>) are ignored."""
        self.sql("CHECKPOINT")
        self.sql("CHECKPOINT")
        dirs = self.database_dirs(dbname)
        present = self._filenodes_by_tablespace(dbname)
        expected = {}     # (tablespace, filenode) -> relation
        home = {}         # filenode -> (relation, tablespace)
        for relname, filenode, spcname in self._relation_storage(dbname):
            expected[(spcname, filenode)] = relname
            home[filenode] = (relname, spcname)
        problems = []
        for spcname, nodes in sorted(present.items()):
            for node in sorted(nodes):
                if (spcname, node) in expected:
                    continue
                if node in home:
                    relname, own = home[node]
                    problems.append(
                        "duplicate storage: %s (filenode %d) belongs in %s "
                        "but also has files in %s" % (relname, node, own, spcname))
                else:
                    problems.append("orphan file: filenode %d in tablespace %s "
                                    "(%s) belongs to no relation"
                                    % (node, spcname, dirs[spcname]))
        for (spcname, node), relname in sorted(expected.items()):
            if node not in present.get(spcname, ()):
                problems.append("missing storage: %s (filenode %d) has no "
                                "file in %s" % (relname, node, spcname))
        return problems

    def relation_files(self, rel, dbname="postgres"):
        """{tablespace name: sorted file names} of the files of rel's
        current filenode, in every tablespace directory of the database."""
        filenode = self.sql_scalar("SELECT pg_relation_filenode(%s::regclass)",
                                   (rel,), dbname=dbname)
        found = {}
        for spcname, directory in self.database_dirs(dbname).items():
            if not os.path.isdir(directory):
                continue
            names = sorted(f for f in os.listdir(directory)
                           if _RELATION_FILE.match(f)
                           and int(_RELATION_FILE.match(f).group(1)) == filenode)
            if names:
                found[spcname] = names
        return found


@dataclass
class PgbenchResult:
    """What pgbench reported.  max_latency_ms comes from the per-transaction
    log; progress holds one (elapsed_s, tps, latency_ms, failed) per -P 1
    line, which shows stalls that an average hides."""
    tps: float
    transactions: int
    failed_transactions: int
    latency_avg_ms: float
    max_latency_ms: float
    progress: list = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""


class PgbenchError(ClusterError):
    pass


class PgbenchRun:
    """A pgbench process running against a cluster; see Cluster.pgbench_run_background."""

    def __init__(self, cluster, clients, jobs, seconds, extra_args, dbname):
        self.cluster = cluster
        self.seconds = seconds
        # Inside the cluster's directory, so destroy() removes it even if
        # the test never calls wait().
        self.log_dir = tempfile.mkdtemp(prefix="pgbench_log_",
                                        dir=cluster.root_dir)
        self.argv = [os.path.join(PG_BIN, "pgbench"), "-n", "-c", str(clients),
                     "-j", str(jobs), "-T", str(seconds), "-P", "1",
                     "--log", "--log-prefix", os.path.join(self.log_dir, "tx")
                     ] + list(extra_args) + [cluster.conninfo(dbname)]
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)

    def wait(self, timeout=None):
        """Wait for pgbench to end; raise PgbenchError if it failed."""
        try:
            stdout, stderr = self.process.communicate(
                timeout=timeout or self.seconds + DEFAULT_TIMEOUT)
            if self.process.returncode != 0:
                raise PgbenchError("%s exited with %d\nstdout:\n%s\nstderr:\n%s"
                                   % (" ".join(self.argv), self.process.returncode,
                                      stdout, stderr))
            return self._parse(stdout, stderr)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def _parse(self, stdout, stderr):
        def number(pattern, cast=float):
            m = re.search(pattern, stdout, re.MULTILINE)
            if m is None:
                raise PgbenchError("no %r in pgbench output:\n%s" % (pattern, stdout))
            return cast(m.group(1))

        progress = [(float(m.group(1)), float(m.group(2)), float(m.group(3)),
                     int(m.group(4) or 0))
                    for m in re.finditer(r"^progress: ([\d.]+) s, ([\d.]+) tps, "
                                         r"lat ([\d.]+) ms stddev [\d.NaN]+"
                                         r"(?:, (\d+) failed)?", stderr,
                                         re.MULTILINE)]
        return PgbenchResult(
            tps=number(r"^tps = ([\d.]+)"),
            transactions=number(r"^number of transactions actually processed: "
                                r"(\d+)", int),
            failed_transactions=number(r"^number of failed transactions: (\d+)",
                                       int),
            latency_avg_ms=number(r"^latency average = ([\d.]+) ms"),
            max_latency_ms=self._max_logged_latency_ms(),
            progress=progress, stdout=stdout, stderr=stderr)

    def _max_logged_latency_ms(self):
        """Largest latency in the --log files: the third field of each line
        is the transaction's latency in microseconds ("failed" otherwise)."""
        worst = 0
        for fname in os.listdir(self.log_dir):
            with open(os.path.join(self.log_dir, fname)) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 2 and fields[2].isdigit():
                        worst = max(worst, int(fields[2]))
        return worst / 1000.0
