"""Retire a disk on every node of a Patroni cluster (issue 28): etcd and
Patroni from Debian's packages, three PostgreSQL nodes on loopback
(hacluster.py).  Under TPC-B on the leader, tablespace ts_a is relocated on
the leader (a primary's relocation) and on both replicas (a hot standby's,
src/relocation/relocation_standby.c), all three at once, while a query runs
on each replica; then a switchover and a failover (kill -9 of the leader's
Patroni and PostgreSQL).  After each step every node passes the logical
checks (one live row per key by sequential scan, the TPC-B balance
invariant, the shadow table, amcheck) and has the leader's data, Patroni
reports a healthy cluster, and no replica was rebuilt.
"""

import os
import threading
import time

import pytest

from hacluster import Etcd, PatroniCluster
from integrity import ShadowTpcb
from moves import start_long_reader, wait_for
from pgcluster import make_server_dir


def relocate(cluster, location):
    return cluster.sql_scalar("SELECT tsmove.relocate_tablespace('ts_a', %s)", (location,))


def job_state(cluster, job):
    return cluster.sql_scalar("SELECT state FROM tsmove.jobs WHERE job_id = %s", (job,))


def wait_job_end(cluster, job, timeout_s=180):
    return wait_for(lambda: (lambda s: s if s in ("done", "failed", "cancelled") else None)(
        job_state(cluster, job)), timeout_s, interval_s=0.2, what="job %d to end" % job)


def location_of(cluster):
    return cluster.sql_scalar("SELECT pg_tablespace_location(oid) FROM pg_tablespace "
                              "WHERE spcname = 'ts_a'")


class LagSampler(threading.Thread):
    """Every 100 ms: each replica's replay lag behind the leader, in bytes,
    and the time a short query on it takes; keeps the worst of each."""

    def __init__(self, leader, replicas):
        super().__init__(daemon=True)
        self.leader, self.replicas = leader, replicas
        self.max_lag = {r.name: 0 for r in replicas}
        self.max_query_ms = {r.name: 0.0 for r in replicas}
        self.samples = 0
        self.stop_event = threading.Event()

    def run(self):
        conns = {r.name: r.conn() for r in self.replicas}
        with self.leader.conn() as lconn:
            while not self.stop_event.is_set():
                lsn = lconn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
                for r in self.replicas:
                    t0 = time.monotonic()
                    lag = conns[r.name].execute(
                        "SELECT pg_wal_lsn_diff(%s::pg_lsn, pg_last_wal_replay_lsn())::bigint, "
                        "(SELECT sum(abalance) FROM pgbench_accounts WHERE aid < 200)",
                        (lsn,)).fetchone()[0]
                    ms = (time.monotonic() - t0) * 1000
                    self.max_lag[r.name] = max(self.max_lag[r.name], lag)
                    self.max_query_ms[r.name] = max(self.max_query_ms[r.name], ms)
                self.samples += 1
                time.sleep(0.1)
        for c in conns.values():
            c.close()

    def stop(self):
        self.stop_event.set()
        self.join(30)


def check_nodes(ha, shadow, leader):
    """Every node: the shadow's checks, amcheck, and the leader's rows."""
    leader_pg = leader.pg
    assert leader_pg.amcheck() == []            # creates amcheck for the replicas too
    for node in ha.nodes.values():
        if node is not leader:
            leader_pg.wait_for_replay(node.pg)
    expected = leader_pg.row_hash("pgbench_accounts", "aid")
    for node in ha.nodes.values():
        assert shadow.problems(node.pg) == [], node.name
        assert node.pg.amcheck() == [], node.name
        assert node.pg.row_hash("pgbench_accounts", "aid") == expected, node.name


def test_a_disk_retired_on_every_node_of_a_patroni_cluster(pg_base_dir):
    base = os.path.join(pg_base_dir, "ha")
    make_server_dir(base, 0o755)
    etcd = Etcd(base).start()
    ha = PatroniCluster(base, etcd)
    try:
        node1 = ha.add_node("node1").start()
        ha.wait_leader("node1")
        p1 = node1.pg
        wait_for(lambda: p1.sql_scalar("SELECT NOT pg_is_in_recovery()"), 60, what="node1")
        ts1 = make_server_dir(os.path.join(p1.tablespace_root, "ts_a"))
        p1.sql("CREATE TABLESPACE ts_a LOCATION '%s'" % ts1)
        p1.tablespaces["ts_a"] = ts1
        p1.sql("CREATE EXTENSION pg_tsmove")
        shadow = ShadowTpcb(p1, scale=5, tablespace="ts_a")
        p1.sql("CHECKPOINT")
        replicas = []
        for name in ("node2", "node3"):
            node = ha.add_node(name, tablespace_map={ts1: os.path.join(
                base, name, "tablespaces", "ts_a")})
            replicas.append(node)
            node.start()
        ha.wait_healthy(3)
        for node in replicas:
            p1.wait_for_replay(node.pg)
            node.pg.sql("CHECKPOINT")           # a restartpoint after ts_a's creation
        check_nodes(ha, shadow, node1)

        # the disk is retired on all three nodes at once, under TPC-B, with a
        # query running on each replica
        new_dirs = {n.name: make_server_dir(os.path.join(base, n.name, "new_disk"))
                    for n in ha.nodes.values()}
        readers = [start_long_reader(n.pg, "pgbench_accounts", 25) for n in replicas]
        sampler = LagSampler(p1, [n.pg for n in replicas])
        sampler.start()
        bench = shadow.run_background(seconds=30, clients=2, jobs=1)
        time.sleep(3)
        jobs = {n.name: relocate(n.pg, new_dirs[n.name]) for n in ha.nodes.values()}
        for node in ha.nodes.values():
            assert wait_job_end(node.pg, jobs[node.name]) == "done", (
                node.name, node.pg.sql("SELECT error FROM tsmove.jobs WHERE job_id = %s",
                                       (jobs[node.name],)))
        bench.wait()
        sampler.stop()
        for reader in readers:
            reader.join(60)
            assert reader.sqlstate is None, reader.sqlstate
        for node in ha.nodes.values():
            assert location_of(node.pg) == new_dirs[node.name], node.name
            log = node.pg.log_contents()
            assert "database system is ready" in log, node.name    # the log is there
            assert "conflict with recovery" not in log, node.name
        print("\nreplay lag (max bytes) %s, replica query (max ms) %s, %d samples"
              % (sampler.max_lag, {k: round(v, 1) for k, v in sampler.max_query_ms.items()},
                 sampler.samples))
        ha.wait_healthy(3)
        check_nodes(ha, shadow, node1)

        # switchover to node2
        node2 = ha.switchover("node2")
        ha.wait_healthy(3)
        shadow.cluster = node2.pg
        shadow.run_background(seconds=5, clients=2, jobs=1).wait()
        check_nodes(ha, shadow, node2)

        # failover: node2 dies (Patroni and PostgreSQL) under TPC-B
        bench = shadow.run_background(seconds=10, clients=2, jobs=1)
        time.sleep(3)
        node2.kill9()
        try:
            bench.wait()
        except Exception:
            pass                                # its connections died with the leader
        new_leader = ha.wait_leader(timeout_s=180)
        assert new_leader.name in ("node1", "node3")
        node2.start()
        ha.wait_healthy(3)
        shadow.cluster = new_leader.pg
        shadow.run_background(seconds=5, clients=2, jobs=1).wait()
        check_nodes(ha, shadow, new_leader)
        for node in ha.nodes.values():
            assert location_of(node.pg) == new_dirs[node.name], node.name

        # no node was rebuilt: node2 and node3 were cloned once, node1 never
        for node in ha.nodes.values():
            log = node.log_contents()
            assert log.count("replica has been created using basebackup") == \
                (0 if node is node1 else 1), node.name
            assert "Removing data directory" not in log, node.name
    finally:
        ha.stop()
        etcd.stop()
