"""pytest fixtures for pg_tsmove's integration tests.

Every test gets fresh clusters (initdb takes well under a second), so a
test may crash, corrupt or fill its clusters without affecting the next.

    def test_something(primary, standby):      # the common case
        primary.sql("CREATE TABLE t (i int) TABLESPACE ts_a")
        ...

    @pytest.mark.data_checksums                 # initdb --data-checksums
    @pytest.mark.pg_conf("pg_tsmove.some_guc = 1", "shared_buffers = 64MB")
    def test_other(primary): ...

    def test_custom(clusters):                  # any other setup
        plain = clusters.new("plain", preload=False)

Fixtures
    pg_base_dir   session: a temporary directory under /tmp, owned by the
                  server user; at session end no process may still run in
                  it, and it is removed.
    clusters      a ClusterFactory: new(name, checksums=False, preload=True,
                  extra_conf=()) returns a started Cluster; every cluster
                  (and standby) made through it is destroyed after the test.
    primary       started cluster with pg_tsmove preloaded, tablespaces ts_a
                  and ts_b, and CREATE EXTENSION pg_tsmove in "postgres".
    standby       streaming standby of primary (tablespaces mapped), started.

When a test fails, the server logs of its clusters are printed in the
report's teardown section.
"""

import os
import shutil
import tempfile

import pytest

from pgcluster import Cluster, chown_to_server_user, processes_under, reap


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "data_checksums: initdb the primary with --data-checksums")
    config.addinivalue_line(
        "markers", "pg_conf(*lines): extra postgresql.conf lines for the primary")
    config.addinivalue_line(
        "markers", "matrix: also run on every other PostgreSQL major in CI (moves, "
        "relocation, backups, crashes, resume)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, "report_" + report.when, report)
    return report


@pytest.fixture(scope="session")
def pg_base_dir():
    base = tempfile.mkdtemp(prefix="pgtsm_", dir="/tmp")
    os.chmod(base, 0o755)
    chown_to_server_user(base)
    yield base
    leftovers = processes_under(base)
    reap(leftovers)
    shutil.rmtree(base, ignore_errors=True)
    assert leftovers == {}, "server processes outlived their tests: %r" % leftovers


class ClusterFactory:
    """Makes started clusters in one test's directory and destroys them."""

    def __init__(self, test_dir):
        self.test_dir = test_dir
        self.created = []

    def new(self, name, checksums=False, preload=True, extra_conf=()):
        cluster = Cluster(self.test_dir, name)
        self.created.append(cluster)
        cluster.init(checksums=checksums, preload=preload, extra_conf=extra_conf)
        return cluster.start()

    def all_clusters(self):
        for cluster in self.created:
            yield cluster
            yield from cluster.standbys

    def destroy_all(self):
        for cluster in reversed(self.created):
            cluster.destroy()
        shutil.rmtree(self.test_dir, ignore_errors=True)


@pytest.fixture
def clusters(request, pg_base_dir):
    # Short paths: pg_basebackup's tar format limits a tablespace symlink
    # target to 100 bytes, and a socket path is limited to 107.
    test_dir = tempfile.mkdtemp(prefix="t", dir=pg_base_dir)
    os.chmod(test_dir, 0o755)
    chown_to_server_user(test_dir)
    factory = ClusterFactory(test_dir)
    yield factory
    call_report = getattr(request.node, "report_call", None)
    if call_report is not None and call_report.failed:
        for cluster in factory.all_clusters():
            print("\n===== server log of %s =====\n%s"
                  % (cluster.name, cluster.log_tail(200)))
    factory.destroy_all()


@pytest.fixture
def primary(request, clusters):
    conf_marker = request.node.get_closest_marker("pg_conf")
    cluster = clusters.new(
        "primary",
        checksums=request.node.get_closest_marker("data_checksums") is not None,
        extra_conf=conf_marker.args if conf_marker else ())
    cluster.create_tablespace("ts_a")
    cluster.create_tablespace("ts_b")
    cluster.sql("CREATE EXTENSION pg_tsmove")
    return cluster


@pytest.fixture
def standby(primary):
    return primary.make_standby("standby")
