-- Moves that succeed: the data is equal afterwards and lives in the target.
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE TABLE mv (id int PRIMARY KEY, small text, big text);
CREATE INDEX mv_small_idx ON mv (small);
-- big values are TOASTed (random, so not compressible)
INSERT INTO mv
SELECT g, 'row ' || g,
       CASE WHEN g % 50 = 0 THEN
         (SELECT pg_catalog.string_agg(pg_catalog.md5(g::text || ':' || i), '') FROM pg_catalog.generate_series(1, 200) i)
       END
FROM pg_catalog.generate_series(1, 5000) g;
CREATE TEMPORARY TABLE mv_before AS
SELECT pg_catalog.md5(pg_catalog.string_agg(mv::text, ',' ORDER BY id)) AS hash FROM mv;

-- the table with its TOAST table and TOAST index, online
SELECT tsmove.move('mv', 'regress_ts_a') AS job \gset
SELECT tsmove.wait(:job);
SELECT relation, relkind, source_tablespace, target_tablespace, mode, state,
       blocks_total > 0 AS copied_something, blocks_copied = blocks_total AS all_copied,
       bytes_written >= blocks_total * pg_catalog.current_setting('block_size')::int AS bytes_cover_blocks,
       wal_bytes > 0 AS logged, switch_attempts >= 1 AS switched, switch_ms IS NOT NULL AS timed,
       finished_at >= started_at AS ordered, error
FROM tsmove.jobs WHERE job_id = :job;
-- as a person reads it in psql: share done, size in human units, whole seconds, rounded times
SELECT progress,
       size = pg_catalog.pg_size_pretty(blocks_total * pg_catalog.current_setting('block_size')::bigint) AS size_readable,
       duration >= '0'::interval AND duration = pg_catalog.date_trunc('second', duration) AS whole_seconds,
       switch_ms = pg_catalog.round(switch_ms::numeric, 1)::double precision AS switch_ms_rounded
FROM tsmove.jobs WHERE job_id = :job;
-- where the files are now: all three file sets in the target
SELECT pg_catalog.count(*) AS in_target FROM pg_catalog.pg_class c
WHERE c.oid IN ('mv'::pg_catalog.regclass,
                (SELECT reltoastrelid FROM pg_catalog.pg_class WHERE oid = 'mv'::pg_catalog.regclass),
                (SELECT i.indexrelid FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class t ON i.indrelid = t.reltoastrelid
                 WHERE t.oid = 'mv'::pg_catalog.regclass))
  AND c.reltablespace = (SELECT oid FROM pg_catalog.pg_tablespace WHERE spcname = 'regress_ts_a');
SELECT (SELECT hash FROM mv_before) = pg_catalog.md5(pg_catalog.string_agg(mv::text, ',' ORDER BY id)) AS data_equal FROM mv;
SELECT pg_catalog.count(*) AS heap_problems FROM verify_heapam('mv');
SELECT bt_index_check('mv_pkey', true), bt_index_check('mv_small_idx', true);

-- an index on its own
SELECT tsmove.move('mv_small_idx', 'regress_ts_b') AS job \gset
SELECT tsmove.wait(:job);
SELECT relation, relkind, target_tablespace, state FROM tsmove.jobs WHERE job_id = :job;
SELECT bt_index_check('mv_small_idx', true);
SELECT pg_catalog.count(*) FROM mv WHERE small = 'row 4242';

-- with_indexes: one job per index not yet in the target, run after the table
SELECT tsmove.move('mv', 'regress_ts_b', with_indexes => true) AS job \gset
SELECT tsmove.wait(job_id) FROM tsmove.job WHERE job_id = :job OR parent_job = :job ORDER BY job_id;
SELECT v.relation, v.relkind, v.state, j.parent_job IS NOT NULL AS chained
FROM tsmove.jobs v JOIN tsmove.job j USING (job_id)
WHERE job_id = :job OR j.parent_job = :job ORDER BY job_id;
SELECT c.relname, t.spcname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname LIKE 'mv%' ORDER BY 1;
SELECT bt_index_check('mv_pkey', true);

-- quiesce mode: writes wait during the copy, same result
SELECT tsmove.move('mv', 'pg_default', mode => 'quiesce') AS job \gset
SELECT tsmove.wait(:job);
SELECT mode, state FROM tsmove.jobs WHERE job_id = :job;
SELECT (SELECT hash FROM mv_before) = pg_catalog.md5(pg_catalog.string_agg(mv::text, ',' ORDER BY id)) AS data_equal FROM mv;
SELECT pg_catalog.count(*) AS heap_problems FROM verify_heapam('mv');

-- an empty table, and a materialized view
CREATE TABLE mv_empty (id int);
SELECT tsmove.move('mv_empty', 'regress_ts_a') AS job \gset
SELECT tsmove.wait(:job);
CREATE MATERIALIZED VIEW mv_mat AS SELECT id, small FROM mv;
SELECT tsmove.move('mv_mat', 'regress_ts_a') AS job \gset
SELECT tsmove.wait(:job);
SELECT pg_catalog.count(*) FROM mv_mat;

-- an unlogged table moves in exclusive mode (everything waits: it cannot be mirrored)
CREATE UNLOGGED TABLE mv_unlogged (id int PRIMARY KEY, v text);
INSERT INTO mv_unlogged SELECT g, pg_catalog.md5(g::text) FROM pg_catalog.generate_series(1, 2000) g;
CREATE TEMPORARY TABLE mv_unlogged_before AS
SELECT pg_catalog.md5(pg_catalog.string_agg(mv_unlogged::text, ',' ORDER BY id)) AS hash FROM mv_unlogged;
SELECT tsmove.move('mv_unlogged', 'regress_ts_a', mode => 'exclusive', with_indexes => true) AS job \gset
SELECT tsmove.wait(job_id) FROM tsmove.job WHERE job_id = :job OR parent_job = :job ORDER BY job_id;
SELECT relation, mode, state, blocks_under_lock > 0 AS fsm_copied_under_lock FROM tsmove.jobs
WHERE job_id = :job;
SELECT c.relname, t.spcname, c.relpersistence FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname LIKE 'mv\_unlogged%' ORDER BY 1;
SELECT (SELECT hash FROM mv_unlogged_before) =
       pg_catalog.md5(pg_catalog.string_agg(mv_unlogged::text, ',' ORDER BY id)) AS data_equal
FROM mv_unlogged;
SELECT bt_index_check('mv_unlogged_pkey', true);

-- move_tablespace: every relation of a tablespace, what cannot move skipped with the reason
CREATE TABLE mvt_parted (id int) PARTITION BY RANGE (id) TABLESPACE regress_ts_a;
CREATE TABLE mvt_part PARTITION OF mvt_parted FOR VALUES FROM (0) TO (100) TABLESPACE regress_ts_a;
INSERT INTO mvt_parted SELECT pg_catalog.generate_series(0, 99);
CREATE TEMPORARY TABLE mvt_jobs AS
SELECT tsmove.move_tablespace('regress_ts_a', 'regress_ts_b') AS job_id;
SELECT pg_catalog.count(*) FILTER (WHERE tsmove.wait(job_id) = 'done') AS done,
       pg_catalog.count(*) FILTER (WHERE tsmove.wait(job_id) = 'skipped') AS skipped
FROM mvt_jobs;
SELECT j.relname, j.mode, j.state, j.error
FROM tsmove.jobs j JOIN mvt_jobs USING (job_id) WHERE j.state = 'skipped';
SELECT c.relname FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_tablespace t ON t.oid = c.reltablespace
WHERE t.spcname = 'regress_ts_a' ORDER BY 1;
SELECT pg_catalog.count(*) AS rows FROM mvt_parted;
SELECT (SELECT hash FROM mv_unlogged_before) =
       pg_catalog.md5(pg_catalog.string_agg(mv_unlogged::text, ',' ORDER BY id)) AS data_equal
FROM mv_unlogged;
SELECT tsmove.move_tablespace('regress_ts_a', 'regress_ts_a');
SELECT tsmove.move_tablespace('regress_ts_a', 'no_such_tablespace');
SELECT tsmove.move_tablespace('regress_ts_a', 'regress_ts_b', mode => 'offline');

-- relocate_tablespace: in-place tablespaces cannot move (their files are in the data directory)
SELECT tsmove.relocate_tablespace('regress_ts_a', '/nonexistent');
SELECT tsmove.relocate_tablespace('pg_default', '/nonexistent');
SELECT tsmove.relocate_tablespace('no_such_tablespace', '/nonexistent');
SELECT tsmove.relocate_tablespace(NULL, '/nonexistent');

-- set_rate on a finished job changes nothing
SELECT tsmove.set_rate(:job, 5);
SELECT tsmove.set_rate(:job, -5);

DROP MATERIALIZED VIEW mv_mat;
DROP TABLE mv, mv_empty, mv_unlogged, mvt_parted;
