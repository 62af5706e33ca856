-- The extension installs into schema tsmove; tablespaces for the tests.
CREATE EXTENSION pg_tsmove;
-- (not \dx: psql 18 adds a column)
SELECT e.extname, e.extversion, e.extnamespace::pg_catalog.regnamespace AS schema,
       pg_catalog.obj_description(e.oid, 'pg_extension') AS description
FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_tsmove';
SELECT pg_catalog.count(*) > 0 AS has_functions
FROM pg_catalog.pg_proc WHERE pronamespace = 'tsmove'::pg_catalog.regnamespace;
-- in-place tablespaces (allow_in_place_tablespaces) live under pg_tblspc
CREATE TABLESPACE regress_ts_a LOCATION '';
CREATE TABLESPACE regress_ts_b LOCATION '';
-- not relocatable: its C code names the schema
ALTER EXTENSION pg_tsmove SET SCHEMA public;
-- GUCs
SHOW pg_tsmove.max_rate_mb;
SHOW pg_tsmove.switch_lock_timeout;
SHOW pg_tsmove.switch_cancel_blockers_after;
SHOW pg_tsmove.switch_terminate_client_writers_after;
SHOW pg_tsmove.max_workers;
SHOW pg_tsmove.switch_backlog_blocks;
SHOW pg_tsmove.yield_to_ddl;
SHOW pg_tsmove.pacing;
SHOW pg_tsmove.pacing_target;
SHOW pg_tsmove.min_rate_mb;
SHOW pg_tsmove.total_max_rate_mb;
SHOW pg_tsmove.resume_after_restart;
SHOW pg_tsmove.resume_interval;
SHOW pg_tsmove.max_retained_wal;
-- bad values are refused
ALTER SYSTEM SET pg_tsmove.pacing = 'sometimes';
ALTER SYSTEM SET pg_tsmove.pacing_target = 120;
-- the prefix is reserved
SET pg_tsmove.no_such_setting = 1;
