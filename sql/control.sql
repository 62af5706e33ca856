-- pause(), resume() and purge_jobs(): refusals first, then what they do.
CREATE TABLE ctl_t AS SELECT g AS id, pg_catalog.md5(g::text) AS v
FROM pg_catalog.generate_series(1, 2000) g;
SELECT pg_catalog.md5(pg_catalog.string_agg(v, ',' ORDER BY id)) AS before_hash FROM ctl_t \gset

SELECT tsmove.pause(NULL);
SELECT tsmove.resume(NULL);
SELECT tsmove.pause(-1);
SELECT tsmove.resume(123456789);
SELECT tsmove.purge_jobs(NULL);
SELECT tsmove.purge_jobs('-1 day');
SELECT tsmove.purge_jobs('1000 years');

-- no worker may start: the job stays queued, and pausing it holds it
ALTER SYSTEM SET pg_tsmove.max_workers = 0;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(0.2);
SELECT tsmove.move('ctl_t', 'regress_ts_a') AS ctl_job \gset
SELECT tsmove.pause(:ctl_job);
SELECT state, pause_requested FROM tsmove.job WHERE job_id = :ctl_job;
-- wait() returns for a paused job: it cannot progress
SELECT tsmove.wait(:ctl_job);
CALL tsmove.wait_for(:ctl_job);
-- in a transaction block wait_for() cannot commit, and waits as wait() does
BEGIN;
CALL tsmove.wait_for(:ctl_job);
COMMIT;

-- the role that submitted nothing may not steer it
CREATE ROLE regress_ctl_other;
GRANT USAGE ON SCHEMA tsmove TO regress_ctl_other;
GRANT EXECUTE ON FUNCTION tsmove.pause(bigint), tsmove.resume(bigint),
    tsmove.purge_jobs(interval) TO regress_ctl_other;
SET ROLE regress_ctl_other;
SELECT tsmove.resume(:ctl_job);
SELECT tsmove.pause(:ctl_job);
-- its purge deletes nothing it may not steer
SELECT tsmove.purge_jobs('0');
RESET ROLE;
SELECT state FROM tsmove.job WHERE job_id = :ctl_job;

-- resumed, it is queued again, and runs once a worker may start
SELECT tsmove.resume(:ctl_job);
SELECT state, pause_requested FROM tsmove.job WHERE job_id = :ctl_job;
ALTER SYSTEM RESET pg_tsmove.max_workers;
SELECT pg_catalog.pg_reload_conf();
-- wait_for() commits between polls, and sees the job run and end
CALL tsmove.wait_for(:ctl_job);
SELECT pg_catalog.md5(pg_catalog.string_agg(v, ',' ORDER BY id)) = :'before_hash' AS same_rows FROM ctl_t;
SELECT t.spcname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE c.oid = 'ctl_t'::pg_catalog.regclass;
-- pausing or resuming an ended job says so and changes nothing
SELECT tsmove.pause(:ctl_job);
SELECT tsmove.resume(:ctl_job);
SELECT state FROM tsmove.job WHERE job_id = :ctl_job;

-- purge: a job that ended just now is kept by a day's margin, gone with '0'
SELECT tsmove.purge_jobs('1 day');
SELECT pg_catalog.count(*) FROM tsmove.job WHERE job_id = :ctl_job;
SELECT tsmove.purge_jobs('0') >= 1 AS purged;
SELECT pg_catalog.count(*) FROM tsmove.job WHERE job_id = :ctl_job;
-- a chain is purged whole or not at all: a table job with a queued index job stays
CREATE INDEX ctl_t_id ON ctl_t (id);
ALTER SYSTEM SET pg_tsmove.max_workers = 0;
SELECT pg_catalog.pg_reload_conf();
SELECT pg_catalog.pg_sleep(0.2);
SELECT tsmove.move('ctl_t', 'regress_ts_b', with_indexes => true) AS chain_job \gset
UPDATE tsmove.job SET state = 'failed', finished_at = pg_catalog.clock_timestamp() - '2 days'::interval
WHERE job_id = :chain_job;
SELECT tsmove.purge_jobs('1 day');
SELECT pg_catalog.count(*) FROM tsmove.job WHERE COALESCE(parent_job, job_id) = :chain_job;
UPDATE tsmove.job SET state = 'cancelled', finished_at = pg_catalog.clock_timestamp() - '2 days'::interval
WHERE parent_job = :chain_job;
SELECT tsmove.purge_jobs('1 day');
SELECT pg_catalog.count(*) FROM tsmove.job WHERE COALESCE(parent_job, job_id) = :chain_job;
ALTER SYSTEM RESET pg_tsmove.max_workers;
SELECT pg_catalog.pg_reload_conf();
REVOKE ALL ON SCHEMA tsmove FROM regress_ctl_other;
REVOKE ALL ON FUNCTION tsmove.pause(bigint), tsmove.resume(bigint),
    tsmove.purge_jobs(interval) FROM regress_ctl_other;
DROP ROLE regress_ctl_other;
DROP TABLE ctl_t;
