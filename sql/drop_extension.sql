-- DROP EXTENSION removes everything; CREATE again works.
DROP EXTENSION pg_tsmove;
SELECT pg_catalog.count(*) AS leftover_objects FROM pg_catalog.pg_class WHERE relnamespace IN
  (SELECT oid FROM pg_catalog.pg_namespace WHERE nspname = 'tsmove');
SELECT pg_catalog.count(*) AS leftover_schema FROM pg_catalog.pg_namespace WHERE nspname = 'tsmove';
CREATE EXTENSION pg_tsmove;
DROP EXTENSION pg_tsmove;
DROP TABLESPACE regress_ts_a;
DROP TABLESPACE regress_ts_b;
