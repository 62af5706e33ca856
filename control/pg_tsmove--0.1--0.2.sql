/* pg_tsmove 0.1 -> 0.2 */

\echo Use "ALTER EXTENSION pg_tsmove UPDATE TO '0.2'" to load this file. \quit

/*
 * There is no pg_tsmove--0.2.sql: CREATE EXTENSION runs pg_tsmove--0.1.sql
 * and then this script (as pg_stat_statements does), so a fresh install
 * and an upgrade from 0.1 take the same path and cannot drift apart.
 * search_path is pg_catalog while an extension script runs (the control
 * file's schema); every name outside pg_catalog is qualified anyway.
 */

-- ---- engine: job record, queue, security (issues 6, 7, 9) -----------------

/*
 * One unfinished job per relation: move() checks first, and this index
 * stops two transactions that checked at the same time.
 */
CREATE UNIQUE INDEX job_one_active_per_relation ON tsmove.job (relid)
    WHERE state NOT IN ('done', 'failed', 'cancelled');

/*
 * Logical replication (see src/jobrecord.c): FOR ALL TABLES publications
 * carry tsmove.job's changes; on a subscriber with pg_tsmove installed this
 * REPLICA trigger discards them, so the publisher's jobs never queue there.
 */
CREATE FUNCTION tsmove.job_ignore_replicated_change()
RETURNS trigger
AS 'MODULE_PATHNAME', 'tsm_job_ignore_replicated_change'
LANGUAGE C;
REVOKE ALL ON FUNCTION tsmove.job_ignore_replicated_change() FROM PUBLIC;
CREATE TRIGGER job_ignore_replicated_change
    BEFORE INSERT OR UPDATE OR DELETE ON tsmove.job
    FOR EACH ROW EXECUTE FUNCTION tsmove.job_ignore_replicated_change();
ALTER TABLE tsmove.job ENABLE REPLICA TRIGGER job_ignore_replicated_change;

/* Why the queued jobs of this database wait (tsmove.jobs shows it). */
CREATE FUNCTION tsmove.queue_note()
RETURNS text
AS 'MODULE_PATHNAME', 'tsm_queue_note_sql'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION tsmove.queue_note() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.queue_note() TO pg_monitor;

CREATE OR REPLACE VIEW tsmove.jobs AS
SELECT j.job_id,
       j.relid::pg_catalog.regclass AS relation,
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
       p.rate_mb_s,
       coalesce(p.max_rate_mb, j.max_rate_mb::double precision) AS max_rate_mb_s,
       CASE WHEN p.rate_mb_s > 0 AND p.blocks_total > p.blocks_copied
            THEN pg_catalog.make_interval(secs =>
                 (p.blocks_total - p.blocks_copied)::double precision
                 * pg_catalog.current_setting('block_size')::double precision
                 * 2 / (p.rate_mb_s * 1048576))
       END AS eta,
       coalesce(p.switch_attempts, j.switch_attempts) AS switch_attempts,
       coalesce(p.lock_wait_ms, j.lock_wait_ms) AS lock_wait_ms,
       coalesce(p.switch_ms, j.switch_ms) AS switch_ms,
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
                END) AS error
FROM tsmove.job j
LEFT JOIN tsmove.job_progress() p ON p.job_id = j.job_id
LEFT JOIN tsmove.job parent ON parent.job_id = j.parent_job
LEFT JOIN pg_catalog.pg_tablespace src ON src.oid = j.source_tablespace
LEFT JOIN pg_catalog.pg_tablespace dst ON dst.oid = j.target_tablespace;

-- ---- monitoring: tablespace I/O, co-access, advice, history (issue 8) -----
