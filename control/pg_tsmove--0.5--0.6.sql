-- pg_tsmove 0.5 -> 0.6: a hot standby's own relocations.
--   tsmove.local_jobs()  this server's jobs kept in files of its data
--                        directory (a standby's relocations), as rows of
--                        tsmove.job;
--   tsmove.jobs          shows them too; on a standby, them alone.

\echo Use "ALTER EXTENSION pg_tsmove UPDATE TO '0.6'" to load this file. \quit

/*
 * This server's own jobs that tsmove.job cannot hold: a hot standby's
 * relocations of its own copy of a tablespace, recorded in files of its
 * data directory (src/jobs/local_jobs.c), as rows of tsmove.job (0.6).
 * Their ids start at 10^12.  tsmove.jobs shows them with the table's rows
 * (on a standby, they alone: its tsmove.job is the primary's).
 */
CREATE FUNCTION tsmove.local_jobs()
RETURNS SETOF tsmove.job
AS 'MODULE_PATHNAME', 'tsm_local_jobs'
LANGUAGE C STABLE;
REVOKE ALL ON FUNCTION tsmove.local_jobs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.local_jobs() TO pg_monitor;
COMMENT ON FUNCTION tsmove.local_jobs() IS
    'this server''s jobs kept in files of its data directory (a hot standby''s relocations), as rows of tsmove.job';

CREATE OR REPLACE VIEW tsmove.jobs AS
SELECT j.job_id,
       CASE WHEN j.job_kind = 'move' THEN j.relid::pg_catalog.regclass END AS relation,
       j.relname,
       j.relkind,
       coalesce(src.spcname, j.source_tablespace::pg_catalog.text::pg_catalog.name) AS source_tablespace,
       coalesce(dst.spcname, j.target_tablespace::pg_catalog.text::pg_catalog.name) AS target_tablespace,
       j.mode,
       coalesce(p.state, j.state) AS state,
       coalesce(p.blocks_total, j.blocks_total) AS blocks_total,
       coalesce(p.blocks_copied, j.blocks_copied) AS blocks_copied,
       coalesce(p.blocks_recopied, j.blocks_recopied) AS blocks_recopied,
       coalesce(p.dirty_backlog, 0) AS dirty_backlog,
       coalesce(p.bytes_written, j.bytes_written) AS bytes_written,
       coalesce(p.wal_bytes, j.wal_bytes) AS wal_bytes,
       pg_catalog.round(p.rate_mb_s::numeric, 1)::double precision AS rate_mb_s,
       pg_catalog.round(coalesce(p.max_rate_mb, j.max_rate_mb::double precision)::numeric, 1)::double precision
           AS max_rate_mb_s,
       CASE WHEN p.rate_mb_s > 0 AND p.blocks_total > p.blocks_copied
            THEN pg_catalog.make_interval(secs => pg_catalog.ceil(
                 (p.blocks_total - p.blocks_copied)::double precision
                 * pg_catalog.current_setting('block_size')::double precision
                 * CASE j.job_kind WHEN 'move' THEN 2 ELSE 1 END
                 / (p.rate_mb_s * 1048576)))
       END AS eta,
       coalesce(p.switch_attempts, j.switch_attempts) AS switch_attempts,
       pg_catalog.round(coalesce(p.lock_wait_ms, j.lock_wait_ms)::numeric, 1)::double precision AS lock_wait_ms,
       pg_catalog.round(coalesce(p.switch_ms, j.switch_ms)::numeric, 1)::double precision AS switch_ms,
       p.pid,
       j.submitted_at,
       j.started_at,
       j.finished_at,
       coalesce(j.error, p.note,
                CASE WHEN j.state = 'queued' AND parent.state IS DISTINCT FROM 'done'
                          AND j.parent_job IS NOT NULL
                     THEN 'waits for job ' || j.parent_job || ' (' || parent.relname || ')'
                     WHEN j.state = 'queued'
                     THEN tsmove.queue_note()
                END) AS error,
       j.job_kind,
       coalesce(p.blocks_under_lock, j.blocks_under_lock) AS blocks_under_lock,
       j.old_location,
       j.new_location,
       pg_catalog.round(p.pace_mb_s::numeric, 1)::double precision AS pace_mb_s,
       pg_catalog.pg_wal_lsn_diff(
           CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_current_wal_insert_lsn() END,
           slot.restart_lsn)::bigint AS wal_retained_bytes,
       j.restarts,
              CASE WHEN coalesce(p.blocks_total, j.blocks_total) > 0
            THEN pg_catalog.round(100.0 * coalesce(p.blocks_copied, j.blocks_copied)
                                  / coalesce(p.blocks_total, j.blocks_total), 1) || ' %'
       END AS progress,
       pg_catalog.pg_size_pretty(coalesce(p.blocks_total, j.blocks_total)
                                 * pg_catalog.current_setting('block_size')::bigint) AS size,
       pg_catalog.date_trunc('second', coalesce(j.finished_at, pg_catalog.now()) - j.started_at)
           AS duration
FROM (SELECT * FROM tsmove.job WHERE NOT pg_catalog.pg_is_in_recovery()
      UNION ALL
      SELECT * FROM tsmove.local_jobs()) j
LEFT JOIN tsmove.job_progress() p ON p.job_id = j.job_id
LEFT JOIN tsmove.job parent ON parent.job_id = j.parent_job
LEFT JOIN pg_catalog.pg_tablespace src ON src.oid = j.source_tablespace
LEFT JOIN pg_catalog.pg_tablespace dst ON dst.oid = j.target_tablespace
LEFT JOIN pg_catalog.pg_replication_slots slot
       ON slot.slot_name = 'pg_tsmove_' || (SELECT d.oid FROM pg_catalog.pg_database d
                                            WHERE d.datname = pg_catalog.current_database())
                           || '_' || j.job_id;
