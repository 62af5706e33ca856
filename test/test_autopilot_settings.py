"""The autopilot's step runs as itself whatever a tenant's database says
(issue 27).

A role with LOGIN CREATEDB and no superuser owns a database with the
extension and puts on it every setting that could make the step fail or
run as someone else (ALTER DATABASE ... SET, applied at connection).  The
step in that database must still run: no "permission denied", no step
that "did not answer", in any cycle.  With role = tenant alone, every
step there failed and the pilot acted nowhere in the cluster.
"""

import time

import psycopg
import pytest

from moves import wait_for

TENANT_SETTINGS = [
    ("role", "tenant"),
    ("default_transaction_read_only", "on"),
    ("default_transaction_isolation", "serializable"),
    ("default_transaction_deferrable", "on"),
    ("statement_timeout", "1"),
    ("lock_timeout", "1"),
    ("search_path", "tenant_schema, public"),
    ("exit_on_error", "on"),
    ("row_security", "off"),
    ("DateStyle", "SQL, DMY"),
    ("IntervalStyle", "sql_standard"),
    ("TimeZone", "Pacific/Chatham"),
    ("extra_float_digits", "-15"),
    ("check_function_bodies", "off"),
    ("work_mem", "64kB"),
    ("client_min_messages", "error"),
]


@pytest.mark.pg_conf("pg_tsmove.autopilot = propose", "pg_tsmove.autopilot_interval = '1s'",
                     "pg_tsmove.sample_interval = '1s'")
def test_tenant_database_settings_do_not_stop_the_step(primary):
    primary.sql("CREATE ROLE tenant LOGIN CREATEDB")
    primary.sql("CREATE DATABASE tenantdb", user="tenant")
    primary.sql("CREATE EXTENSION pg_tsmove", dbname="tenantdb")
    primary.sql("CREATE SCHEMA tenant_schema AUTHORIZATION tenant", dbname="tenantdb")
    for name, value in TENANT_SETTINGS:
        primary.sql("ALTER DATABASE tenantdb SET %s = '%s'" % (name, value), user="tenant")
    tenant_oid = primary.sql_scalar("SELECT oid FROM pg_database WHERE datname = 'tenantdb'")
    logged_before = len(primary.log_contents())
    # the settings are the tenant's own: a session of theirs has them (its
    # statement_timeout of 1 ms can cancel even this on a loaded machine)
    def tenant_user():
        try:
            return primary.sql_scalar("SELECT current_user", dbname="tenantdb", user="tenant")
        except psycopg.errors.QueryCanceled:
            return None
    assert wait_for(tenant_user, 30, interval_s=0.1, what="a tenant session") == "tenant"
    # a few cycles of the pilot, a step in each database per cycle
    wait_for(lambda: primary.sql_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_tsmove autopilot' "
        "AND datname = 'tenantdb'") > 0 or "tenantdb" in primary.log_contents()[logged_before:],
        30, interval_s=0.02, what="a step in the tenant's database")
    time.sleep(6)
    log = primary.log_contents()[logged_before:]
    assert "permission denied for function autopilot_step" not in log, log[-3000:]
    assert "the step in database %d did not answer" % tenant_oid not in log, log[-3000:]
    assert "autopilot" not in "".join(
        line for line in log.splitlines() if "ERROR" in line or "FATAL" in line), log[-3000:]
