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
-- TOAST moves with its table (names carry OIDs: digits masked)
CREATE FUNCTION regress_masked_error(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE sql;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || pg_catalog.regexp_replace(SQLERRM, '[0-9]+', 'N', 'g');
END $$;
SELECT regress_masked_error(pg_catalog.format('SELECT tsmove.move(%L, %L)',
                                              reltoastrelid::regclass, 'regress_ts_a'))
FROM pg_catalog.pg_class WHERE oid = 'err_plain'::pg_catalog.regclass;
SELECT regress_masked_error(pg_catalog.format('SELECT tsmove.move(%L, %L)',
                                              i.indexrelid::pg_catalog.regclass, 'regress_ts_a'))
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
SELECT tsmove.move('err_plain', 'regress_ts_a', max_rate_mb => 'NaN');
SELECT tsmove.move('err_plain', 'regress_ts_a', max_rate_mb => 'Infinity');
SELECT tsmove.move('err_plain', 'regress_ts_a', max_rate_mb => '-Infinity');
SELECT tsmove.wait(NULL);
SELECT tsmove.wait(424242);
CALL tsmove.wait_for(NULL);
CALL tsmove.wait_for(424242);
SELECT tsmove.cancel(424242);
SELECT tsmove.set_rate(424242, 10);
SELECT tsmove.set_rate(424242, 'NaN');

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
CALL tsmove.wait_for(:owned_job);
SELECT tsmove.wait(:owned_job);
RESET ROLE;
-- a job is seen by its submitter, the relation's owner and pg_monitor
CREATE ROLE regress_tsmove_other;
SET ROLE regress_tsmove_other;
SELECT tsmove.wait(:owned_job);
CALL tsmove.wait_for(:owned_job);
SELECT * FROM tsmove.job;
SELECT * FROM tsmove.jobs;
RESET ROLE;
GRANT pg_monitor TO regress_tsmove_other;
SET ROLE regress_tsmove_other;
SELECT tsmove.wait(:owned_job);
CALL tsmove.wait_for(:owned_job, '1 s');
SELECT relname, state FROM tsmove.jobs WHERE job_id = :owned_job;
RESET ROLE;
DROP ROLE regress_tsmove_other;
-- wait()'s timeout
SELECT tsmove.wait(:owned_job, '-1 second');
SELECT tsmove.wait(:owned_job, '1000 years');
SELECT tsmove.wait(:owned_job, '0 seconds');
CALL tsmove.wait_for(:owned_job, '-1 second');
CALL tsmove.wait_for(:owned_job, '1000 years');
SELECT c.relname, t.spcname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname = 'err_owned';
DROP SCHEMA regress_owned CASCADE;
REVOKE CREATE ON TABLESPACE regress_ts_a FROM regress_tsmove_user;

-- one job per relation; beyond pg_tsmove.max_workers, jobs wait in the queue
CREATE FUNCTION regress_wait_for_state(job bigint, wanted text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  current text;
BEGIN
  FOR i IN 1 .. 1200 LOOP
    SELECT state INTO current FROM tsmove.jobs WHERE job_id = job;
    IF current = wanted THEN
      RETURN current;
    END IF;
    PERFORM pg_catalog.pg_sleep(0.05);
  END LOOP;
  RETURN current;
END $$;
ALTER SYSTEM SET pg_tsmove.max_workers = 1;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(0.2);
SELECT tsmove.move('err_plain', 'regress_ts_a', max_rate_mb => 0.0001) AS slow_job \gset
SELECT tsmove.move('err_plain', 'regress_ts_b');
SELECT regress_wait_for_state(:slow_job, 'copying');
CREATE TABLE err_other (id int);
SELECT tsmove.move('err_other', 'regress_ts_a') AS queued_job \gset
SELECT pg_catalog.pg_sleep(0.5);
SELECT state, error FROM tsmove.jobs WHERE job_id = :queued_job;
-- a queued job is cancelled at once; cancelling it again says it had ended
SELECT tsmove.cancel(:queued_job);
SELECT tsmove.cancel(:queued_job);
SELECT state, error FROM tsmove.jobs WHERE job_id = :queued_job;
ALTER SYSTEM RESET pg_tsmove.max_workers;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(0.2);
-- cancel the slow job: it ends cancelled and the table stays where it was
SELECT tsmove.cancel(:slow_job);
SELECT tsmove.wait(:slow_job);
SELECT tsmove.cancel(:slow_job);
SELECT state, error FROM tsmove.jobs WHERE job_id = :slow_job;

-- a transaction that submitted a move cannot be prepared
BEGIN;
SELECT tsmove.move('err_plain', 'regress_ts_a') > 0 AS queued;
PREPARE TRANSACTION 'regress_tsmove';
SELECT pg_catalog.count(*) AS queued_jobs FROM tsmove.job
WHERE relid = 'err_plain'::pg_catalog.regclass AND state = 'queued';

-- a job cannot be waited for in the transaction that submitted it
BEGIN;
SELECT tsmove.move('err_plain', 'regress_ts_a') AS same_xact_job \gset
SELECT tsmove.wait(:same_xact_job);
ROLLBACK;
BEGIN;
SELECT tsmove.move('err_plain', 'regress_ts_a') AS same_xact_job \gset
CALL tsmove.wait_for(:same_xact_job);
ROLLBACK;

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
DROP FUNCTION regress_masked_error(text), regress_wait_for_state(bigint, text);
REVOKE ALL ON FUNCTION tsmove.move(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.numeric, pg_catalog.bool) FROM regress_tsmove_user;
DROP ROLE regress_tsmove_user;
