"""A fresh install (pg_tsmove--0.8.sql) and the upgrade path give one extension.

CREATE EXTENSION runs pg_tsmove--0.8.sql alone; an installed 0.1 reaches
0.8 through pg_tsmove--0.1--0.2.sql and on.  Both paths are shipped, so
both must produce the same objects: a function, view or grant that only
one path has changes what a user gets depending on when they installed.

The test installs the extension both ways into two databases of one
cluster and compares what the catalogs say about the extension's objects:
its member objects, function and procedure definitions, view, index,
constraint and trigger definitions, table columns (order, types, NOT NULL,
defaults, identity), sequences, types, owners, ACLs and the initial
privileges pg_dump relies on, comments, and the dependencies between the
objects.  Any difference fails the test with a diff of what differs.

What it leaves out on purpose, as it differs between any two installs:
OIDs, and what is named by them (the internal triggers of a foreign key,
RI_ConstraintTrigger_*_<oid>: the constraint itself is compared); the
pg_attver=<n> entry the server in use here writes into every column's
attoptions; and pg_attribute.atthasmissing / attmissingval: ALTER TABLE
... ADD COLUMN ... DEFAULT (the 0.2 upgrade's new tsmove.job columns)
records the default as a "missing value" for rows written before the
column existed, where CREATE TABLE does not; reads return the same rows
either way.
"""

import difflib
import os

import pytest

pytestmark = pytest.mark.matrix

EXTENSION = "pg_tsmove"
FIRST_VERSION = "0.1"

# The extension's member objects (deptype 'e'), as (classid, objid).
_MEMBERS = """
    SELECT d.classid, d.objid
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
    WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
      AND d.deptype = 'e' AND e.extname = '""" + EXTENSION + "'"

# (class, oid) of the relations, functions, types and constraints in the schema
_SCHEMA_OBJECTS = """
                SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid FROM pg_catalog.pg_class c
                WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace
                UNION ALL
                SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid FROM pg_catalog.pg_proc p
                WHERE p.pronamespace = 'tsmove'::pg_catalog.regnamespace
                UNION ALL
                SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_type t
                WHERE t.typnamespace = 'tsmove'::pg_catalog.regnamespace
                UNION ALL
                SELECT 'pg_catalog.pg_constraint'::pg_catalog.regclass, co.oid FROM pg_catalog.pg_constraint co
                WHERE co.connamespace = 'tsmove'::pg_catalog.regnamespace"""

# Every query returns rows of text; rows are compared as sorted sets, each
# row naming its object so that a difference says where it is.
CATALOG_QUERIES = {
    "extension": """
        SELECT e.extversion, e.extrelocatable::text, e.extnamespace::pg_catalog.regnamespace::text,
               pg_catalog.pg_get_userbyid(e.extowner)::text,
               coalesce(e.extconfig::pg_catalog.regclass[]::text, ''),
               coalesce(e.extcondition::text, ''),
               coalesce(pg_catalog.obj_description(e.oid, 'pg_extension'), '')
        FROM pg_catalog.pg_extension e WHERE e.extname = '""" + EXTENSION + "'",

    "members": """
        SELECT pg_catalog.pg_describe_object(m.classid, m.objid, 0) FROM (""" + _MEMBERS + """) m""",

    "schemas": """
        SELECT n.nspname::text, pg_catalog.pg_get_userbyid(n.nspowner)::text,
               coalesce(n.nspacl::text, '')
        FROM pg_catalog.pg_namespace n
        WHERE n.oid IN (SELECT m.objid FROM (""" + _MEMBERS + """) m
                        WHERE m.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass)""",

    # pg_get_functiondef: arguments, defaults, result, language, volatility,
    # strictness, security, SET clauses, parallel safety, cost and body
    "functions": """
        SELECT p.oid::pg_catalog.regprocedure::text, p.prokind::text,
               pg_catalog.pg_get_userbyid(p.proowner)::text,
               coalesce(p.proacl::text, ''),
               pg_catalog.pg_get_functiondef(p.oid)
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace = 'tsmove'::pg_catalog.regnamespace""",

    "relations": """
        SELECT c.oid::pg_catalog.regclass::text, c.relkind::text, c.relpersistence::text,
               pg_catalog.pg_get_userbyid(c.relowner)::text,
               coalesce(c.reloptions::text, ''), coalesce(c.relacl::text, ''),
               c.relhastriggers::text, c.relrowsecurity::text, c.relreplident::text,
               (c.reltoastrelid <> 0)::text,
               CASE WHEN c.relkind IN ('v', 'm') THEN pg_catalog.pg_get_viewdef(c.oid)
                    WHEN c.relkind = 'i' THEN pg_catalog.pg_get_indexdef(c.oid)
                    ELSE '' END
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace""",

    "columns": """
        SELECT c.oid::pg_catalog.regclass::text, a.attnum::text, a.attname::text,
               pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull::text,
               a.attidentity::text, a.attgenerated::text,
               coalesce(a.attcollation::pg_catalog.regcollation::text, ''),
               coalesce(pg_catalog.pg_get_expr(ad.adbin, ad.adrelid), ''),
               coalesce(a.attacl::text, ''), a.attstorage::text,
               coalesce((SELECT pg_catalog.array_agg(o ORDER BY o)
                         FROM pg_catalog.unnest(a.attoptions) o
                         WHERE o NOT LIKE 'pg\\_attver=%')::text, '')
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
        LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
        WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace
          AND a.attnum > 0 AND NOT a.attisdropped""",

    "constraints": """
        SELECT coalesce(co.conrelid::pg_catalog.regclass::text, co.contypid::pg_catalog.regtype::text),
               co.conname::text, co.contype::text, pg_catalog.pg_get_constraintdef(co.oid),
               co.convalidated::text
        FROM pg_catalog.pg_constraint co
        WHERE co.connamespace = 'tsmove'::pg_catalog.regnamespace""",

    "triggers": """
        SELECT t.tgrelid::pg_catalog.regclass::text, t.tgname::text, t.tgenabled::text,
               pg_catalog.pg_get_triggerdef(t.oid)
        FROM pg_catalog.pg_trigger t
        JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace AND NOT t.tgisinternal""",

    "sequences": """
        SELECT s.seqrelid::pg_catalog.regclass::text, s.seqtypid::pg_catalog.regtype::text,
               s.seqstart::text, s.seqincrement::text, s.seqmax::text, s.seqmin::text,
               s.seqcache::text, s.seqcycle::text,
               coalesce((SELECT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid)
                         FROM pg_catalog.pg_depend d
                         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                           AND d.objid = s.seqrelid AND d.deptype IN ('a', 'i')), '')
        FROM pg_catalog.pg_sequence s
        JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
        WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace""",

    "types": """
        SELECT t.oid::pg_catalog.regtype::text, t.typtype::text,
               pg_catalog.pg_get_userbyid(t.typowner)::text, coalesce(t.typacl::text, ''),
               coalesce(t.typrelid::pg_catalog.regclass::text, '')
        FROM pg_catalog.pg_type t
        WHERE t.typnamespace = 'tsmove'::pg_catalog.regnamespace""",

    # comments on every object in the schema and their columns, and on the schema
    "comments": """
        SELECT pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid), d.description
        FROM pg_catalog.pg_description d
        WHERE (d.classoid, d.objoid) IN (
""" + _SCHEMA_OBJECTS + """
                UNION ALL
                SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, 'tsmove'::pg_catalog.regnamespace::oid)""",

    # what GRANT/REVOKE in the scripts recorded for pg_dump (privtype 'e')
    "init_privs": """
        SELECT pg_catalog.pg_describe_object(ip.classoid, ip.objoid, ip.objsubid),
               ip.privtype::text, ip.initprivs::text
        FROM pg_catalog.pg_init_privs ip
        WHERE (ip.classoid, ip.objoid) IN (SELECT m.classid, m.objid FROM (""" + _MEMBERS + """) m)
           OR (ip.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND ip.objoid IN
                (SELECT c.oid FROM pg_catalog.pg_class c
                 WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace))""",

    # what each object of the schema depends on (the extension membership
    # is "members" above; dependencies on pinned objects are not recorded)
    "dependencies": """
        SELECT pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid),
               pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid),
               d.deptype::text
        FROM pg_catalog.pg_depend d
        WHERE d.deptype <> 'e'
          AND (d.classid, d.objid) IN (
""" + _SCHEMA_OBJECTS + """
                UNION ALL
                SELECT 'pg_catalog.pg_trigger'::pg_catalog.regclass, t.oid FROM pg_catalog.pg_trigger t
                JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
                WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace AND NOT t.tgisinternal
                UNION ALL
                SELECT 'pg_catalog.pg_rewrite'::pg_catalog.regclass, r.oid FROM pg_catalog.pg_rewrite r
                JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
                WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace
                UNION ALL
                SELECT 'pg_catalog.pg_attrdef'::pg_catalog.regclass, ad.oid FROM pg_catalog.pg_attrdef ad
                JOIN pg_catalog.pg_class c ON c.oid = ad.adrelid
                WHERE c.relnamespace = 'tsmove'::pg_catalog.regnamespace)""",
}


def extension_catalog(cluster, dbname):
    """{category: sorted list of text rows} describing the extension in dbname."""
    catalog = {}
    with cluster.conn(dbname) as conn:
        for category, query in CATALOG_QUERIES.items():
            rows = conn.execute(query).fetchall()
            catalog[category] = sorted(" | ".join(str(v) for v in row) for row in rows)
    return catalog


def catalog_differences(expected, actual, expected_label, actual_label):
    """A unified diff per category where the two catalogs differ ('' if none)."""
    report = []
    for category in CATALOG_QUERIES:
        if expected[category] == actual[category]:
            continue
        # one line per row; multi-line definitions indented under their row
        def lines(rows):
            return [line for row in rows for line in (row.replace("\n", "\n    ") + "\n").splitlines(True)]
        report.append("".join(difflib.unified_diff(
            lines(expected[category]), lines(actual[category]),
            "%s: %s" % (expected_label, category), "%s: %s" % (actual_label, category))))
    return "\n".join(report)


def install_both_ways(cluster):
    """Databases 'fresh' (CREATE EXTENSION at the default version) and
    'upgraded' (the first version, then ALTER EXTENSION UPDATE)."""
    for dbname in ("fresh", "upgraded"):
        cluster.sql("CREATE DATABASE %s" % dbname)
    cluster.sql("CREATE EXTENSION %s" % EXTENSION, dbname="fresh")
    cluster.sql("CREATE EXTENSION %s VERSION '%s'" % (EXTENSION, FIRST_VERSION), dbname="upgraded")
    cluster.sql("ALTER EXTENSION %s UPDATE" % EXTENSION, dbname="upgraded")


def default_version(cluster):
    return cluster.sql_scalar(
        "SELECT default_version FROM pg_available_extensions WHERE name = %s", (EXTENSION,))


def test_fresh_install_equals_upgrade_from_first_version(clusters):
    cluster = clusters.new("install")
    version = default_version(cluster)
    sharedir = cluster.sql_scalar("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'")
    # a fresh install must run the version's own script, not the chain
    assert os.path.exists(os.path.join(sharedir, "extension", "%s--%s.sql" % (EXTENSION, version))), \
        "no install script for the default version %s" % version
    install_both_ways(cluster)
    fresh = extension_catalog(cluster, "fresh")
    upgraded = extension_catalog(cluster, "upgraded")
    assert fresh["extension"][0].startswith(version + " |")
    assert upgraded["extension"] == fresh["extension"]
    # every query found something to compare (a filter gone wrong finds nothing on both sides)
    assert [category for category, rows in fresh.items() if not rows] == []
    differences = catalog_differences(upgraded, fresh, "upgraded from " + FIRST_VERSION,
                                      "fresh " + version)
    assert differences == "", "the fresh install differs from the upgraded one:\n" + differences


# Each change must show in the comparison, under its category: proof that
# the test above would fail if pg_tsmove--X.Y.sql and the upgrade scripts
# disagreed on that kind of thing.
TAMPERINGS = [
    ("functions", "ALTER FUNCTION tsmove.autopilot_window_open(text, timestamptz) IMMUTABLE"),
    ("functions", "GRANT EXECUTE ON FUNCTION tsmove.pause(bigint) TO pg_monitor"),
    ("relations", "CREATE OR REPLACE VIEW tsmove.monitor_status AS "
                  "SELECT *, 1 AS extra FROM tsmove.monitor_info()"),
    ("relations", "REVOKE SELECT ON tsmove.jobs FROM pg_monitor"),
    ("columns", "ALTER TABLE tsmove.decision ALTER COLUMN times SET DEFAULT 2"),
    ("constraints", "ALTER TABLE tsmove.job DROP CONSTRAINT job_kind_check"),
    ("triggers", "ALTER TABLE tsmove.job ENABLE TRIGGER job_ignore_replicated_change"),
    ("comments", "COMMENT ON FUNCTION tsmove.cancel(bigint) IS 'something else'"),
    ("members", "ALTER EXTENSION pg_tsmove DROP FUNCTION tsmove.queue_note()"),
    # a grant outside an extension script leaves pg_init_privs alone: change it directly
    ("init_privs", "DELETE FROM pg_catalog.pg_init_privs "
                   "WHERE objoid = 'tsmove.job_progress()'::pg_catalog.regprocedure"),
]


def test_comparison_sees_each_kind_of_difference(clusters):
    cluster = clusters.new("install")
    cluster.sql("CREATE DATABASE fresh")
    cluster.sql("CREATE EXTENSION %s" % EXTENSION, dbname="fresh")
    fresh = extension_catalog(cluster, "fresh")
    for number, (category, statement) in enumerate(TAMPERINGS):
        dbname = "tampered%d" % number
        cluster.sql("CREATE DATABASE %s TEMPLATE fresh" % dbname)
        assert catalog_differences(fresh, extension_catalog(cluster, dbname), "fresh", dbname) == ""
        cluster.sql(statement, dbname=dbname)
        differences = catalog_differences(fresh, extension_catalog(cluster, dbname),
                                          "fresh", dbname)
        assert ("%s: %s" % (dbname, category)) in differences, \
            "%r did not show under %s:\n%s" % (statement, category, differences or "(no difference)")
