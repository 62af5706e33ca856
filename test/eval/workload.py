"""The essay's database and workload, in PostgreSQL and pgbench.

Schema (essay, Tables 2-4), in two tablespaces TSA and TSB, each table's
primary key index in the table's tablespace (a DB2 DMS tablespace holds a
table's indexes unless told otherwise):

    a(a_key int PRIMARY KEY, a_value varchar(2000), a_price double precision)
    b(b_key int PRIMARY KEY, b_value varchar(2000), b_price double precision)

Data (essay, Figure 2): row i (i = 0 .. rows-1) has the value "the binary
representation of i, A for 0 and B for 1", left-padded with A to 2000
characters; rows are inserted in increasing value order; the keys 1..rows
are shuffled (a different permutation for A and B, a fixed seed, so every
run loads the same data); prices are random integers 0-9.  a_value is
stored PLAIN: PostgreSQL would otherwise compress the 2000 characters
(almost all "A") to a few bytes, and the tables would not be 2 kB a row as
in the essay (3 rows a page here, so key order is random I/O).

Workload (essay, section 6): four closed streams, each its own pgbench
process (-c 1, no think time) with its own per-transaction log:
    select1, select2   select_ab.sql, the merge join of a range of keys
    update_a, update_b update_a.sql / update_b.sql, single-row updates
The SELECT streams run with the plans other than a merge join of two
index scans disabled (PGOPTIONS), so that both tables are read in key
order; plan_of_query() records and checks the plan.

Streams are stopped by terminating their backends (pgbench then closes its
logs); a stream whose pgbench ends on its own (a cancelled query makes
pgbench abort its client) is restarted, and the event is recorded.
"""

import glob
import os
import subprocess
import threading
import time

import numpy as np
import psycopg

from pgcluster import PG_BIN

HERE = os.path.dirname(os.path.abspath(__file__))

STREAMS = (
    # name, script, reads both tables in key order
    ("select1", "select_ab.sql", True),
    ("select2", "select_ab.sql", True),
    ("update_a", "update_a.sql", False),
    ("update_b", "update_b.sql", False),
)
# With a third table (run_eval.py --third-table [hda|hdb]): C, read by a
# stream of its own (range scans of C alone) and updated by another.  On HDA
# beside A, the device the autopilot relieves carries load that no move of A
# or B takes away; on HDB, the target is busy before any move.
THIRD_STREAMS = (
    ("select_c", "select_c.sql", True),
    ("update_c", "update_c.sql", False),
)
APP_PREFIX = "eval_"

# Session settings of the SELECT streams: only a merge join over two
# primary-key index scans is left to the planner.
SELECT_SETTINGS = {"enable_hashjoin": "off", "enable_nestloop": "off",
                   "enable_bitmapscan": "off", "enable_seqscan": "off"}


# ---------------------------------------------------------------------------
# schema and data

def create_schema(cluster, tsa_dir, tsb_dir, target_dir, tables=("a", "b"), third_on="hda"):
    """Tablespaces tsa and tsb (configuration 1: both on HDA) and tsb2, the
    empty target of the per-relation methods (on HDB); tables a and b (and
    c when asked: in tsa, or in tsb2 when third_on is "hdb")."""
    for name, location in (("tsa", tsa_dir), ("tsb", tsb_dir),
                           ("tsb2", target_dir)):
        os.makedirs(location, exist_ok=True)
        cluster_chown(location)
        cluster.sql("CREATE TABLESPACE %s LOCATION '%s'" % (name, location))
        cluster.tablespaces[name] = location
    for t, ts in (("a", "tsa"), ("b", "tsb"), ("c", "tsb2" if third_on == "hdb" else "tsa")):
        if t not in tables:
            continue
        cluster.sql("""
            CREATE TABLE {t} ({t}_key int NOT NULL,
                              {t}_value varchar(2000),
                              {t}_price double precision,
                              CONSTRAINT {t}_pkey PRIMARY KEY ({t}_key)
                                  USING INDEX TABLESPACE {ts})
            TABLESPACE {ts}""".format(t=t, ts=ts))
        cluster.sql("ALTER TABLE {t} ALTER COLUMN {t}_value SET STORAGE PLAIN"
                    .format(t=t))


def cluster_chown(path):
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "postgres:postgres", path], check=True)


def load_data(cluster, rows, tables=("a", "b")):
    """Insert rows into a and b as the essay's Figure 2 does; one session,
    so setseed() fixes every random() that follows."""
    value = "lpad(translate(i::bit(32)::text, '01', 'AB'), 2000, 'A')"
    with cluster.conn() as conn:
        conn.execute("SELECT setseed(0.2008)")
        for t in tables:
            conn.execute("""
                INSERT INTO {t} ({t}_key, {t}_value, {t}_price)
                SELECT key, {value}, floor(random() * 10)
                FROM (SELECT key, (row_number() OVER (ORDER BY random()) - 1)::int AS i
                      FROM generate_series(1, %s) key) shuffled
                ORDER BY i""".format(t=t, value=value), (rows,))
        for t in tables:
            conn.execute("VACUUM (ANALYZE) %s" % t)
    cluster.sql("CHECKPOINT")


def content_hash(cluster, table):
    """md5 over (key, value) in key order: what no move may change (prices
    change with the update streams, keys and values never do)."""
    return cluster.sql_scalar(
        "SELECT md5(string_agg(md5({t}_key::text || ',' || {t}_value), '' "
        "ORDER BY {t}_key)) FROM {t}".format(t=table))


def data_facts(cluster):
    """Sizes, counts and hashes of a and b."""
    facts = {}
    for t in ("a", "b"):
        facts[t] = {
            "rows": cluster.sql_scalar("SELECT count(*) FROM %s" % t),
            "heap_bytes": cluster.sql_scalar("SELECT pg_relation_size('%s')" % t),
            "index_bytes": cluster.sql_scalar("SELECT pg_relation_size('%s_pkey')" % t),
            "total_bytes": cluster.sql_scalar("SELECT pg_total_relation_size('%s')" % t),
            "hash": content_hash(cluster, t),
        }
    return facts


def plan_of_query(cluster, rows, qrange):
    """EXPLAIN of one SELECT of the stream, with the stream's settings.
    Returns (plan text, problem or None): the plan must be a merge join of
    index scans of a_pkey and b_pkey, with no sort."""
    bottom = max(0, rows // 2 - qrange // 2)
    with cluster.conn() as conn:
        for k, v in SELECT_SETTINGS.items():
            conn.execute("SET %s = %s" % (k, v))
        query = open(os.path.join(HERE, "select_ab.sql")).read()
        sql_text = query[query.index("\nSELECT") + 1:].rstrip().rstrip(";")
        for name, val in (("bottom", bottom), ("top", bottom + qrange),
                          ("a_price", 3), ("b_price", 5)):
            sql_text = sql_text.replace(":" + name, str(val))
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql_text))
    problem = None
    if "Merge Join" not in plan or "a_pkey" not in plan or "b_pkey" not in plan \
            or "Sort" in plan.replace("Sort Key", "") or "Seq Scan" in plan:
        problem = "the SELECT is not a merge join of two index scans:\n" + plan
    return plan, problem


# ---------------------------------------------------------------------------
# streams

class Stream:
    """One closed stream: a pgbench process (-c 1), restarted if it ends
    while it should run.  Each start is a segment with its own log."""

    def __init__(self, name, script, key_order, cluster, log_dir, rows, qrange,
                 max_seconds, rate=None):
        self.name = name
        self.script = os.path.join(HERE, script)
        self.key_order = key_order
        self.cluster = cluster
        self.log_dir = log_dir
        self.rows = rows
        self.qrange = qrange
        self.max_seconds = max_seconds
        self.rate = rate         # transactions/s (pgbench -R), None: closed
        self.segments = []       # (start epoch, log prefix, Popen)
        self.events = []         # (epoch, message): unexpected ends
        self.proc = None

    def start(self):
        prefix = os.path.join(self.log_dir, "%s.%d" % (self.name, len(self.segments)))
        env = dict(os.environ, PGAPPNAME=APP_PREFIX + self.name)
        if self.key_order:
            env["PGOPTIONS"] = " ".join("-c %s=%s" % kv for kv in SELECT_SETTINGS.items())
        argv = [os.path.join(PG_BIN, "pgbench"), "-n", "-c", "1", "-j", "1",
                "-T", str(int(self.max_seconds)), "-P", "5", "-f", self.script,
                "-D", "rows=%d" % self.rows, "-D", "range=%d" % self.qrange,
                "--log", "--log-prefix", prefix, self.cluster.conninfo()]
        if self.rate:
            argv[1:1] = ["-R", str(self.rate)]
        out = open(prefix + ".out", "w")
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     env=env, cwd=self.log_dir)
        out.close()
        self.segments.append((time.time(), prefix, self.proc))

    def ended(self):
        return self.proc is not None and self.proc.poll() is not None

    def last_output(self):
        prefix = self.segments[-1][1]
        try:
            with open(prefix + ".out") as f:
                lines = [l.strip() for l in f if "abort" in l or "ERROR" in l
                         or "FATAL" in l or "error" in l]
        except OSError:
            lines = []
        return "; ".join(lines[:3]) or "pgbench exited %s" % self.proc.returncode

    def wait_ended(self, timeout=60):
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def transactions(self):
        """(start epochs, end epochs) of the completed transactions and the
        count of failed ones, over every segment."""
        starts, ends, failed = [], [], 0
        for _, prefix, _ in self.segments:
            for path in glob.glob(prefix + ".[0-9]*"):
                with open(path) as f:
                    for line in f:
                        p = line.split()
                        if len(p) < 6:
                            continue
                        end = int(p[4]) + int(p[5]) / 1e6
                        if not p[2].isdigit():
                            failed += 1
                            continue
                        ends.append(end)
                        starts.append(end - int(p[2]) / 1e6)
        order = np.argsort(ends)
        return (np.asarray(starts)[order], np.asarray(ends)[order], failed)


class StreamSet:
    """The four streams; a monitor thread restarts a stream that ended while
    it should run (the event is kept: it shows what a method did to the
    workload, e.g. queries cancelled by pg_repack)."""

    def __init__(self, cluster, log_dir, rows, qrange, max_seconds, update_rate=None,
                 third_table=False):
        self.cluster = cluster
        self.streams = [Stream(n, s, k, cluster, log_dir, rows, qrange, max_seconds,
                               rate=None if k else update_rate)
                        for n, s, k in STREAMS + (THIRD_STREAMS if third_table else ())]
        self.should_run = False
        self.lock = threading.Lock()
        self.monitor = None
        self.stop_monitor = threading.Event()

    def start(self):
        with self.lock:
            for s in self.streams:
                s.start()
            self.should_run = True
        if self.monitor is None:
            self.monitor = threading.Thread(target=self._watch, daemon=True)
            self.monitor.start()

    def _watch(self):
        while not self.stop_monitor.wait(0.2):
            with self.lock:
                if not self.should_run:
                    continue
                for s in self.streams:
                    if s.ended():
                        s.events.append((time.time(), s.last_output()))
                        s.start()

    def pause(self):
        """Stop every stream: terminate their backends, so that pgbench ends
        and closes its logs.  Used at the end and around a server stop."""
        with self.lock:
            self.should_run = False
            try:
                with psycopg.connect(self.cluster.conninfo(), autocommit=True,
                                     connect_timeout=10) as conn:
                    conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                 "WHERE application_name LIKE %s", (APP_PREFIX + "%",))
            except psycopg.Error:
                pass            # server down: pgbench ends by itself
            for s in self.streams:
                s.wait_ended()

    def resume(self):
        with self.lock:
            for s in self.streams:
                s.start()
            self.should_run = True

    def close(self):
        self.stop_monitor.set()
        if self.monitor is not None:
            self.monitor.join()
        for s in self.streams:
            s.kill()


# ---------------------------------------------------------------------------
# throughput from the logs

def tpm_window(starts, ends, t1, t2):
    """Transactions per minute in [t1, t2], each transaction counted in
    proportion to the part of its run inside the window.  A 5-second query
    half inside a 10-second window adds 0.5, not 0 or 1: SELECT streams
    with few long queries get a smooth, unbiased rate."""
    if t2 <= t1 or len(ends) == 0:
        return 0.0
    dur = ends - starts
    overlap = np.clip(np.minimum(ends, t2) - np.maximum(starts, t1), 0, None)
    frac = np.where(dur > 0, overlap / np.where(dur > 0, dur, 1),
                    ((ends >= t1) & (ends <= t2)).astype(float))
    return float(frac.sum()) * 60.0 / (t2 - t1)


