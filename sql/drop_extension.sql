-- DROP EXTENSION removes everything; CREATE again works.
DROP EXTENSION pg_tsmove;
SELECT pg_catalog.count(*) AS leftover_objects FROM pg_catalog.pg_class WHERE relnamespace IN
  (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'tsmove');
SELECT pg_catalog.count(*) AS leftover_schema FROM pg_catalog.pg_namespace WHERE nspname = 'tsmove';
CREATE EXTENSION pg_tsmove;
DROP EXTENSION pg_tsmove;
-- the upgrade from 0.2 adds wait_for() (and, through 0.5, the autopilot; 0.6, local_jobs())
CREATE EXTENSION pg_tsmove VERSION '0.2';
SELECT pg_catalog.to_regprocedure('tsmove.wait_for(bigint, interval, text)') IS NULL AS no_wait_for;
ALTER EXTENSION pg_tsmove UPDATE;
SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_tsmove';
SELECT pg_catalog.to_regclass('tsmove.decisions') IS NOT NULL AS has_decisions;
SELECT p.prokind, pg_catalog.pg_get_function_arguments(p.oid)
FROM pg_catalog.pg_proc p WHERE p.oid = 'tsmove.wait_for(bigint, interval, text)'::pg_catalog.regprocedure;
DROP EXTENSION pg_tsmove;
DROP TABLESPACE regress_ts_a;
DROP TABLESPACE regress_ts_b;
