-- Every input tsmove.move() refuses: a specific error, and nothing changes.
CREATE TABLE err_plain (id int PRIMARY KEY, payload text);
INSERT INTO err_plain SELECT g, pg_catalog.repeat('x', 10) FROM pg_catalog.generate_series(1, 100) g;
CREATE TEMPORARY TABLE err_temp (id int);
CREATE UNLOGGED TABLE err_unlogged (id int);
CREATE SEQUENCE err_seq;
CREATE VIEW err_view AS SELECT 1 AS one;
CREATE FOREIGN DATA WRAPPER err_fdw;
CREATE SERVER err_server FOREIGN DATA WRAPPER err_fdw;
CREATE FOREIGN TABLE err_foreign (id int) SERVER err_server;
CREATE TABLE err_parted (id int) PARTITION BY RANGE (id);
CREATE TABLE err_part1 PARTITION OF err_parted FOR VALUES FROM (0) TO (10);
CREATE INDEX err_parted_idx ON err_parted (id);
CREATE TYPE err_composite AS (a int);

-- unknown relation, unknown tablespace
SELECT tsmove.move('err_missing', 'regress_ts_a');
SELECT tsmove.move('err_plain', 'no_such_tablespace');
SELECT tsmove.move(NULL, 'regress_ts_a');
-- already there
SELECT tsmove.move('err_plain', 'pg_default');
-- what the mirror cannot see
SELECT tsmove.move('err_temp', 'regress_ts_a');
SELECT tsmove.move('err_unlogged', 'regress_ts_a');
SELECT tsmove.move('err_seq', 'regress_ts_a');
-- no storage
SELECT tsmove.move('err_view', 'regress_ts_a');
SELECT tsmove.move('err_foreign', 'regress_ts_a');
SELECT tsmove.move('err_composite', 'regress_ts_a');
SELECT tsmove.move('err_parted', 'regress_ts_a');
SELECT tsmove.move('err_parted_idx', 'regress_ts_a');
-- TOAST moves with its table
SELECT tsmove.move(reltoastrelid::regclass, 'regress_ts_a')
FROM pg_catalog.pg_class WHERE oid = 'err_plain'::pg_catalog.regclass \gset toast_
SELECT tsmove.move(i.indexrelid::pg_catalog.regclass, 'regress_ts_a')
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_index i ON i.indrelid = c.reltoastrelid
WHERE c.oid = 'err_plain'::pg_catalog.regclass;
-- catalogs
SELECT tsmove.move('pg_catalog.pg_class', 'regress_ts_a');
SELECT tsmove.move('pg_catalog.pg_proc', 'regress_ts_a');
SELECT tsmove.move('pg_catalog.pg_authid', 'regress_ts_a');
SELECT tsmove.move('err_plain', 'pg_global');
-- arguments
SELECT tsmove.move('err_plain', 'regress_ts_a', mode => 'offline');
SELECT tsmove.move('err_plain', 'regress_ts_a', max_rate_mb => -1);
SELECT tsmove.wait(NULL);
SELECT tsmove.wait(424242);
SELECT tsmove.cancel(424242);
SELECT tsmove.set_rate(424242, 10);

-- privileges: as core's SET TABLESPACE, owner and CREATE on the target
CREATE ROLE regress_tsmove_user;
SET ROLE regress_tsmove_user;
SELECT tsmove.move('err_plain', 'regress_ts_a');
RESET ROLE;
GRANT EXECUTE ON FUNCTION tsmove.move(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.numeric, pg_catalog.bool) TO regress_tsmove_user;
CREATE SCHEMA regress_owned AUTHORIZATION regress_tsmove_user;
SET ROLE regress_tsmove_user;
SELECT tsmove.move('err_plain', 'regress_ts_a');
CREATE TABLE regress_owned.err_owned (id int);
SELECT tsmove.move('regress_owned.err_owned', 'regress_ts_a');
RESET ROLE;
GRANT CREATE ON TABLESPACE regress_ts_a TO regress_tsmove_user;
SET ROLE regress_tsmove_user;
-- now allowed: the worker runs as this role, the job is theirs to wait for
SELECT tsmove.move('regress_owned.err_owned', 'regress_ts_a') AS owned_job \gset
SELECT tsmove.wait(:owned_job);
RESET ROLE;
SELECT c.relname, t.spcname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname = 'err_owned';
DROP SCHEMA regress_owned CASCADE;
REVOKE CREATE ON TABLESPACE regress_ts_a FROM regress_tsmove_user;

-- one job per relation; the limit of concurrent moves
SELECT tsmove.move('err_plain', 'regress_ts_a', max_rate_mb => 0.001) AS slow_job \gset
SELECT tsmove.move('err_plain', 'regress_ts_b');
ALTER SYSTEM SET pg_tsmove.max_workers = 1;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(0.2);
CREATE TABLE err_other (id int);
SELECT tsmove.move('err_other', 'regress_ts_a');
ALTER SYSTEM RESET pg_tsmove.max_workers;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(0.2);
-- cancel the slow job: it ends cancelled and the table stays where it was
SELECT tsmove.cancel(:slow_job);
SELECT tsmove.wait(:slow_job);
SELECT tsmove.cancel(:slow_job);
SELECT state, error FROM tsmove.jobs WHERE job_id = :slow_job;

-- nothing moved: every relation is still in its tablespace
SELECT c.relname, coalesce(t.spcname, 'default') AS tablespace
FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname LIKE 'err\_%' ORDER BY 1;
SELECT pg_catalog.count(*) AS rows, pg_catalog.sum(id) FROM err_plain;

DROP TABLE err_plain, err_unlogged, err_parted, err_other;
DROP SEQUENCE err_seq;
DROP VIEW err_view;
DROP FOREIGN TABLE err_foreign;
DROP SERVER err_server;
DROP FOREIGN DATA WRAPPER err_fdw;
DROP TYPE err_composite;
REVOKE ALL ON FUNCTION tsmove.move(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.numeric, pg_catalog.bool) FROM regress_tsmove_user;
DROP ROLE regress_tsmove_user;
