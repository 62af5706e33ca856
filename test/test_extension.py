"""Installing and removing pg_tsmove, and loading it the wrong way.

DROP EXTENSION must leave the catalogs exactly as CREATE EXTENSION found
them, and a server that did not preload the library must refuse moves
with an error that says how to fix it.
"""

import psycopg
import pytest

# Every catalog row an extension script can add, by a stable identity, so
# that the snapshots taken before CREATE and after DROP compare equal.
CATALOG_SNAPSHOT_QUERIES = {
    "pg_namespace": "SELECT nspname FROM pg_namespace",
    "pg_class": "SELECT oid::regclass::text, relkind FROM pg_class",
    "pg_proc": "SELECT oid::regprocedure::text FROM pg_proc",
    "pg_type": "SELECT oid::regtype::text FROM pg_type",
    "pg_depend": "SELECT classid, objid, objsubid, refclassid, refobjid, "
                 "refobjsubid, deptype FROM pg_depend",
    "pg_init_privs": "SELECT objoid, classoid, objsubid, privtype, "
                     "initprivs::text FROM pg_init_privs",
    "pg_description": "SELECT objoid, classoid, objsubid FROM pg_description",
    "pg_extension": "SELECT extname FROM pg_extension",
}


def catalog_snapshot(cluster):
    return {catalog: set(cluster.sql(query))
            for catalog, query in CATALOG_SNAPSHOT_QUERIES.items()}


def test_drop_extension_leaves_nothing_behind(clusters):
    cluster = clusters.new("primary")
    before = catalog_snapshot(cluster)

    cluster.sql("CREATE EXTENSION pg_tsmove")
    ext_oid = cluster.sql_scalar(
        "SELECT oid FROM pg_extension WHERE extname = 'pg_tsmove'")
    members = cluster.sql_scalar(
        "SELECT count(*) FROM pg_depend WHERE refclassid = 'pg_extension'::regclass "
        "AND refobjid = %s AND deptype = 'e'", (ext_oid,))
    assert members > 0
    cluster.sql("DROP EXTENSION pg_tsmove")

    after = catalog_snapshot(cluster)
    differences = {catalog: {"added": sorted(after[catalog] - before[catalog],
                                             key=str),
                             "removed": sorted(before[catalog] - after[catalog],
                                               key=str)}
                   for catalog in CATALOG_SNAPSHOT_QUERIES
                   if after[catalog] != before[catalog]}
    assert differences == {}
    assert cluster.orphan_files() == []


def test_move_without_preload_names_shared_preload_libraries(clusters):
    cluster = clusters.new("nopreload", preload=False)
    cluster.create_tablespace("ts_b")
    cluster.sql("CREATE EXTENSION pg_tsmove")
    cluster.sql("CREATE TABLE t (i int)")

    with pytest.raises(psycopg.Error) as raised:
        cluster.sql("SELECT tsmove.move('t', 'ts_b')")
    error = raised.value
    assert error.sqlstate == "55000", error      # object_not_in_prerequisite_state
    assert "shared_preload_libraries" in (error.diag.message_hint or ""), error
    assert cluster.sql_scalar("SELECT count(*) FROM tsmove.job") == 0
    assert cluster.relation_files("t") == {"pg_default": [
        str(cluster.sql_scalar("SELECT pg_relation_filenode('t')"))]}
    assert cluster.orphan_files() == []
