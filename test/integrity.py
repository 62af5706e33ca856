"""TPC-B with a shadow, and the checks that see a row lost or brought back.

amcheck and pg_visibility find broken structure, not an old row version
that is live again: a page image older than its relation's other pages
(the bug of a resumed move that read stale buffers) passes verify_heapam
and bt_index_check and still holds two live versions of a key.  So every
test that moves data under load or crashes also checks the data
logically:

    shadow = ShadowTpcb(primary, scale=10, tablespace="ts_a")
    bench = shadow.run_background(seconds=20)
    ... move, crash, restart ...
    assert shadow.problems() == []            # on the primary
    assert shadow.problems(standby) == []     # and on a standby

ShadowTpcb is pgbench's TPC-B whose every transaction also adds its delta
to shadow_accounts, a copy of (aid, abalance) in pg_default that no move
touches.  problems() returns descriptions of what is wrong:
  - live rows per key, by sequential scans: count(*) = count(DISTINCT key)
    for accounts, tellers and branches, and the account count unchanged;
  - the TPC-B balance invariant (accounts, tellers, branches and history
    sum to the same);
  - the accounts' (aid, abalance) equal to the shadow's, row for row;
  - amcheck (verify_heapam, bt_index_check with heapallindexed), on the
    primary only (a standby cannot CREATE EXTENSION; it reads the same
    pages the primary's WAL wrote).
"""

import os

from pgcluster import chown_to_server_user

# pgbench's built-in TPC-B, and the same delta added to the shadow.
SHADOW_SCRIPT = """\
\\set aid random(1, 100000 * :scale)
\\set bid random(1, 1 * :scale)
\\set tid random(1, 10 * :scale)
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
UPDATE shadow_accounts SET abalance = abalance + :delta WHERE aid = :aid;
END;
"""

# Sequential scans only: an index would hide a second live version.
SEQSCAN_ONLY = ("SET enable_indexscan = off; SET enable_indexonlyscan = off; "
                "SET enable_bitmapscan = off; ")


class ShadowTpcb:
    def __init__(self, cluster, scale=10, tablespace="ts_a", dbname="postgres"):
        self.cluster, self.scale, self.dbname = cluster, scale, dbname
        cluster.pgbench_init(scale, dbname, extra_args=["--tablespace=" + tablespace])
        cluster.sql("CREATE TABLE shadow_accounts TABLESPACE pg_default AS "
                    "SELECT aid, abalance FROM pgbench_accounts; "
                    "ALTER TABLE shadow_accounts ADD PRIMARY KEY (aid)", dbname=dbname)
        self.accounts = cluster.sql_scalar("SELECT count(*) FROM pgbench_accounts",
                                           dbname=dbname)
        self.script = os.path.join(cluster.root_dir, "shadow_tpcb.sql")
        with open(self.script, "w") as f:
            f.write(SHADOW_SCRIPT)
        chown_to_server_user(self.script)

    def run_background(self, seconds, clients=4, jobs=2):
        """pgbench with the shadow script; .wait() raises if it failed (a
        run that a crash interrupts fails: catch that)."""
        return self.cluster.pgbench_run_background(
            clients=clients, jobs=jobs, seconds=seconds, dbname=self.dbname,
            extra_args=["-f", self.script, "-s", str(self.scale)])

    def problems(self, cluster=None):
        cluster = cluster or self.cluster
        found = []
        with cluster.conn(self.dbname) as conn:
            conn.execute(SEQSCAN_ONLY)
            for table, key in (("pgbench_accounts", "aid"), ("pgbench_tellers", "tid"),
                               ("pgbench_branches", "bid"), ("shadow_accounts", "aid")):
                rows, keys = conn.execute(
                    "SELECT count(*), count(DISTINCT %s) FROM %s" % (key, table)).fetchone()
                if rows != keys:
                    found.append("%s: %d live rows for %d keys" % (table, rows, keys))
                if table in ("pgbench_accounts", "shadow_accounts") and keys != self.accounts:
                    found.append("%s: %d keys, not %d" % (table, keys, self.accounts))
            differing = conn.execute("""
                SELECT count(*) FROM (SELECT aid, abalance FROM pgbench_accounts
                                      EXCEPT ALL SELECT aid, abalance FROM shadow_accounts) d
                """).fetchone()[0]
            missing = conn.execute("""
                SELECT count(*) FROM (SELECT aid, abalance FROM shadow_accounts
                                      EXCEPT ALL SELECT aid, abalance FROM pgbench_accounts) d
                """).fetchone()[0]
            if differing or missing:
                found.append("pgbench_accounts differs from its shadow: %d rows not in "
                             "the shadow, %d shadow rows not in it" % (differing, missing))
        found += cluster.balance_invariant(self.dbname)
        if cluster is self.cluster:
            found += cluster.amcheck(self.dbname)
        return found
