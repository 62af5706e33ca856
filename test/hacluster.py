"""A real high-availability stack for the tests: etcd and Patroni from
Debian's packages (etcd-server, patroni), on loopback, managing PostgreSQL
nodes that are ordinary pgcluster.Cluster objects (the same data, socket
and tablespace directories, so every check of pgcluster works on them).

    etcd = Etcd(base_dir).start()
    ha = PatroniCluster(base_dir, etcd, scope="tsm")
    leader = ha.add_node("node1").start()        # bootstraps the cluster
    ha.wait_leader("node1")
    ...
    ha.add_node("node2", tablespace_map={...}).start()   # a replica, by basebackup
    ha.wait_healthy(3)
    ha.switchover("node2"); ha.kill_leader(); ...
    ha.stop(); etcd.stop()

Patroni runs as the server's OS user, one process per node, with its REST
API on a free loopback port; `patronictl` talks to it through the first
node's configuration.  Nothing listens beyond 127.0.0.1.
"""

import json
import os
import signal
import subprocess
import urllib.request

import yaml

from moves import wait_for
from pgcluster import (PG_BIN, SERVER_USER, Cluster, chown_to_server_user,
                       find_free_port, make_server_dir, server_command)

ETCD = "/usr/bin/etcd"
PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"


class HaError(Exception):
    pass


def wait_until(condition, timeout_s, what, interval_s=0.2):
    return wait_for(condition, timeout_s, interval_s, what)


class Etcd:
    """One etcd member on loopback (v3 API, which Patroni's etcd3 uses)."""

    def __init__(self, base_dir):
        self.dir = make_server_dir(os.path.join(base_dir, "etcd"))
        self.client_port = find_free_port()
        self.peer_port = find_free_port()
        self.log_file = os.path.join(self.dir, "etcd.log")
        self.proc = None

    def start(self):
        url = "http://127.0.0.1:%d" % self.client_port
        peer = "http://127.0.0.1:%d" % self.peer_port
        argv = [ETCD, "--name", "tsm", "--data-dir", os.path.join(self.dir, "data"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", "tsm=" + peer, "--enable-v2=false"]
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(server_command(argv), stdout=log, stderr=log,
                                         cwd="/", start_new_session=True)
        wait_until(self._healthy, 30, "etcd")
        return self

    def _healthy(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.client_port,
                                        timeout=1) as r:
                return json.load(r).get("health") == "true"
        except OSError:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


class PatroniNode:
    """A PostgreSQL node under Patroni; .pg is its pgcluster.Cluster."""

    def __init__(self, ha, name, tablespace_map=None):
        self.ha, self.name = ha, name
        self.pg = Cluster(ha.base_dir, name)
        self.pg._make_dirs()
        self.api_port = find_free_port()
        self.config_file = os.path.join(self.pg.root_dir, "patroni.yml")
        self.log_file = os.path.join(self.pg.root_dir, "patroni.log")
        self.tablespace_map = tablespace_map or {}
        self.proc = None
        self._write_config()

    def _write_config(self):
        pg = self.pg
        hba = ["local all all trust", "host all all 127.0.0.1/32 trust",
               "host replication all 127.0.0.1/32 trust",
               "local replication all trust"]
        basebackup = [{"checkpoint": "fast"}]
        for old, new in self.tablespace_map.items():
            basebackup.append({"tablespace-mapping": "%s=%s" % (old, new)})
        config = {
            "scope": self.ha.scope,
            "namespace": "/tsm-tests/",
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": "127.0.0.1:%d" % self.api_port,
                        "connect_address": "127.0.0.1:%d" % self.api_port},
            "etcd3": {"hosts": "127.0.0.1:%d" % self.ha.etcd.client_port},
            "bootstrap": {
                "dcs": {
                    # not shorter: on a loaded 2-core machine a slow HA loop
                    # must not lose the leader key (a failover nobody asked for)
                    "ttl": 30, "loop_wait": 2, "retry_timeout": 10,
                    "maximum_lag_on_failover": 1 << 30,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": dict(self.ha.parameters),
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"},
                           "no-sync"],
                "pg_hba": hba,
            },
            "postgresql": {
                "listen": "127.0.0.1:%d" % pg.port,
                "connect_address": "127.0.0.1:%d" % pg.port,
                "data_dir": pg.data_dir,
                "bin_dir": PG_BIN,
                "pgpass": os.path.join(pg.root_dir, "pgpass"),
                "authentication": {"superuser": {"username": SERVER_USER},
                                   "replication": {"username": SERVER_USER},
                                   "rewind": {"username": SERVER_USER}},
                "parameters": {"unix_socket_directories": pg.socket_dir,
                               "cluster_name": self.name,
                               "log_line_prefix": "%m [%p] %q%a ",
                               # the server log where pgcluster reads it
                               "logging_collector": "on",
                               "log_directory": pg.root_dir,
                               "log_filename": os.path.basename(pg.log_file),
                               "log_rotation_size": 0, "log_rotation_age": 0},
                "pg_hba": hba,
                "basebackup": basebackup,
            },
            "tags": {"nofailover": False, "noloadbalance": False,
                     "clonefrom": False, "nosync": False},
        }
        with open(self.config_file, "w") as f:
            yaml.safe_dump(config, f, default_flow_style=False)
        chown_to_server_user(self.config_file)

    def start(self):
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(server_command([PATRONI, self.config_file]),
                                         stdout=log, stderr=log, cwd="/",
                                         start_new_session=True)
        return self

    def state(self):
        """Patroni's REST view of this node (role, state, lag...), or None."""
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/patroni" % self.api_port,
                                        timeout=2) as r:
                return json.load(r)
        except OSError as e:
            body = getattr(e, "read", None)
            if body is not None:        # 503 from a replica or a stopped node
                try:
                    return json.loads(body())
                except ValueError:
                    return None
            return None

    def log_contents(self):
        with open(self.log_file, errors="replace") as f:
            return f.read()

    def kill9(self):
        """SIGKILL Patroni and every PostgreSQL process of the node: a crash
        of the machine as far as the cluster can tell."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        pid = self.pg.postmaster_pid()
        if pid is not None and self.pg.is_running():
            os.kill(pid, signal.SIGKILL)
            self.pg._wait_all_exited(60)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        if self.pg.is_running():
            self.pg.stop("immediate")


class PatroniCluster:
    def __init__(self, base_dir, etcd, scope="tsm", parameters=None):
        self.base_dir, self.etcd, self.scope = base_dir, etcd, scope
        self.parameters = {
            "wal_level": "replica", "hot_standby": "on", "wal_log_hints": "on",
            "max_wal_senders": 10, "max_replication_slots": 10,
            "max_worker_processes": 16, "hot_standby_feedback": "on",
            "shared_preload_libraries": "pg_tsmove",
            "max_connections": 50,
        }
        self.parameters.update(parameters or {})
        self.nodes = {}

    def add_node(self, name, tablespace_map=None):
        node = PatroniNode(self, name, tablespace_map)
        self.nodes[name] = node
        return node

    def states(self):
        return {name: node.state() for name, node in self.nodes.items()}

    def leader(self):
        for name, state in self.states().items():
            if state and state.get("role") in ("master", "primary") and \
                    state.get("state") == "running":
                return self.nodes[name]
        return None

    def wait_leader(self, name=None, timeout_s=120):
        def found():
            leader = self.leader()
            return leader if leader and (name is None or leader.name == name) else None
        return wait_until(found, timeout_s, "leader %s" % (name or "(any)"))

    def healthy(self, n):
        """Every node running, one leader, the others streaming replicas."""
        states = [s for s in self.states().values() if s]
        if len(states) != n or any(s.get("state") != "running" for s in states):
            return False
        roles = sorted(s.get("role") for s in states)
        leaders = [r for r in roles if r in ("master", "primary")]
        if not (len(leaders) == 1 and all(r == "replica" for r in roles if r not in leaders)):
            return False
        # "running" may be a server still recovering to consistency
        for node in self.nodes.values():
            try:
                node.pg.sql("SELECT 1")
            except Exception:
                return False
        return True

    def wait_healthy(self, n, timeout_s=300):
        try:
            return wait_until(lambda: self.healthy(n), timeout_s, "%d healthy nodes" % n)
        except AssertionError as e:
            raise HaError("%s\nPatroni says: %s\n%s" % (e, self.states(), self.logs_tail())) from None

    def logs_tail(self, lines=25):
        """The end of every node's Patroni and PostgreSQL logs, for a failure."""
        out = []
        for node in self.nodes.values():
            for label, path in (("patroni", node.log_file), ("postgres", node.pg.log_file)):
                try:
                    with open(path, errors="replace") as f:
                        tail = f.read().splitlines()[-lines:]
                except OSError:
                    tail = ["(no log)"]
                out.append("----- %s %s -----\n%s" % (node.name, label, "\n".join(tail)))
        return "\n".join(out)

    def patronictl(self, *args):
        node = next(iter(self.nodes.values()))
        proc = subprocess.run(server_command([PATRONICTL, "-c", node.config_file] + list(args)),
                              capture_output=True, text=True, timeout=120, cwd="/")
        if proc.returncode != 0:
            raise HaError("patronictl %s failed: %s %s" % (" ".join(args), proc.stdout,
                                                            proc.stderr))
        return proc.stdout

    def switchover(self, candidate):
        leader = self.leader()
        self.patronictl("switchover", self.scope, "--leader", leader.name,
                        "--candidate", candidate, "--force")
        return self.wait_leader(candidate)

    def stop(self):
        for node in self.nodes.values():
            node.stop()
