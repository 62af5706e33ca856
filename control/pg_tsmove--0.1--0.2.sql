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
 * Jobs of two kinds: 'move' (one relation) and 'relocate' (a whole
 * tablespace, to a new directory: relid 0, relname the tablespace's name,
 * relkind 't', source and target both the tablespace; old_location is
 * recorded before the first file is written, new_location on submission).
 * Mode 'exclusive' moves a relation under AccessExclusiveLock (unlogged
 * relations).  State 'skipped': move_tablespace() recorded a relation it
 * cannot move, with the reason in error.  blocks_under_lock: blocks copied
 * while the switch held its locks.  State 'paused': tsmove.pause() of a
 * job that had not started (a running job shows 'paused' only in
 * tsmove.jobs, from its worker); pause_requested keeps the request across
 * restarts.  restarts: how often the job was queued again to resume after
 * its worker was interrupted (a queued job with new_relfilenodes is one).
 */
ALTER TABLE tsmove.job
    ADD COLUMN job_kind text NOT NULL DEFAULT 'move',
    ADD COLUMN old_location text,
    ADD COLUMN new_location text,
    ADD COLUMN blocks_under_lock bigint NOT NULL DEFAULT 0,
    ADD COLUMN pause_requested boolean NOT NULL DEFAULT false,
    ADD COLUMN restarts integer NOT NULL DEFAULT 0,
    DROP CONSTRAINT job_state_check,
    ADD CONSTRAINT job_state_check CHECK (state IN
        ('queued', 'preparing', 'copying', 'catching_up', 'switching',
         'warming', 'done', 'failed', 'cancelled', 'skipped', 'paused')),
    DROP CONSTRAINT job_mode_check,
    ADD CONSTRAINT job_mode_check CHECK (mode IN ('online', 'quiesce', 'exclusive')),
    ADD CONSTRAINT job_kind_check CHECK (job_kind IN ('move', 'relocate'));

/*
 * One unfinished move per relation: move() checks first, and this index
 * stops two transactions that checked at the same time.
 */
CREATE UNIQUE INDEX job_one_active_per_relation ON tsmove.job (relid)
    WHERE job_kind = 'move' AND state NOT IN ('done', 'failed', 'cancelled', 'skipped');

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

CREATE FUNCTION tsmove.relocate_tablespace(tablespace pg_catalog.name,
                                           new_location pg_catalog.text,
                                           max_rate_mb pg_catalog.numeric DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tsm_relocate_tablespace'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.relocate_tablespace(pg_catalog.name, pg_catalog.text, pg_catalog.numeric) IS
    'move every file of a tablespace, in every database, to a new directory while it is in use; returns the job id';
REVOKE ALL ON FUNCTION tsmove.relocate_tablespace(pg_catalog.name, pg_catalog.text, pg_catalog.numeric) FROM PUBLIC;

CREATE FUNCTION tsmove.move_tablespace(source pg_catalog.name,
                                       target pg_catalog.name,
                                       mode pg_catalog.text DEFAULT 'online',
                                       max_rate_mb pg_catalog.numeric DEFAULT NULL)
RETURNS SETOF bigint
AS 'MODULE_PATHNAME', 'tsm_move_tablespace'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.move_tablespace(pg_catalog.name, pg_catalog.name, pg_catalog.text, pg_catalog.numeric) IS
    'queue a move to target of every relation of this database stored in source; returns the job ids';
REVOKE ALL ON FUNCTION tsmove.move_tablespace(pg_catalog.name, pg_catalog.name, pg_catalog.text, pg_catalog.numeric) FROM PUBLIC;

CREATE FUNCTION tsmove.pause(job pg_catalog.int8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tsm_pause'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.pause(pg_catalog.int8) IS
    'hold a job still (it copies nothing) until tsmove.resume(); false if it had ended';
REVOKE ALL ON FUNCTION tsmove.pause(pg_catalog.int8) FROM PUBLIC;

CREATE FUNCTION tsmove.resume(job pg_catalog.int8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tsm_resume'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.resume(pg_catalog.int8) IS
    'let a paused job go on; false if it had ended';
REVOKE ALL ON FUNCTION tsmove.resume(pg_catalog.int8) FROM PUBLIC;

CREATE FUNCTION tsmove.purge_jobs(older_than pg_catalog.interval)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tsm_purge_jobs'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.purge_jobs(pg_catalog.interval) IS
    'delete the jobs that ended longer ago than older_than (whole chains); returns how many';
REVOKE ALL ON FUNCTION tsmove.purge_jobs(pg_catalog.interval) FROM PUBLIC;

/* Why the queued jobs of this database wait (tsmove.jobs shows it). */
CREATE FUNCTION tsmove.queue_note()
RETURNS text
AS 'MODULE_PATHNAME', 'tsm_queue_note_sql'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION tsmove.queue_note() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.queue_note() TO pg_monitor;

/* job_progress() gains a column; the view that uses it is rebuilt. */
DROP VIEW tsmove.jobs;
DROP FUNCTION tsmove.job_progress();

CREATE FUNCTION tsmove.job_progress(
    OUT job_id bigint,
    OUT pid integer,
    OUT state text,
    OUT blocks_total bigint,
    OUT blocks_copied bigint,
    OUT blocks_recopied bigint,
    OUT dirty_backlog bigint,
    OUT bytes_written bigint,
    OUT wal_bytes bigint,
    OUT rate_mb_s double precision,
    OUT max_rate_mb double precision,
    OUT switch_attempts integer,
    OUT lock_wait_ms double precision,
    OUT switch_ms double precision,
    OUT note text,
    OUT blocks_under_lock bigint,
    OUT pace_mb_s double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_job_progress'
LANGUAGE C VOLATILE;
REVOKE ALL ON FUNCTION tsmove.job_progress() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.job_progress() TO pg_monitor;

CREATE VIEW tsmove.jobs AS
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
       p.rate_mb_s,
       coalesce(p.max_rate_mb, j.max_rate_mb::double precision) AS max_rate_mb_s,
       CASE WHEN p.rate_mb_s > 0 AND p.blocks_total > p.blocks_copied
            THEN pg_catalog.make_interval(secs =>
                 (p.blocks_total - p.blocks_copied)::double precision
                 * pg_catalog.current_setting('block_size')::double precision
                 * CASE j.job_kind WHEN 'move' THEN 2 ELSE 1 END
                 / (p.rate_mb_s * 1048576))
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
                END) AS error,
       j.job_kind,
       coalesce(p.blocks_under_lock, j.blocks_under_lock) AS blocks_under_lock,
       j.old_location,
       j.new_location,
       p.pace_mb_s,
       pg_catalog.pg_wal_lsn_diff(
           CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_current_wal_insert_lsn() END,
           slot.restart_lsn)::bigint AS wal_retained_bytes,
       j.restarts
FROM tsmove.job j
LEFT JOIN tsmove.job_progress() p ON p.job_id = j.job_id
LEFT JOIN tsmove.job parent ON parent.job_id = j.parent_job
LEFT JOIN pg_catalog.pg_tablespace src ON src.oid = j.source_tablespace
LEFT JOIN pg_catalog.pg_tablespace dst ON dst.oid = j.target_tablespace
LEFT JOIN pg_catalog.pg_replication_slots slot
       ON slot.slot_name = 'pg_tsmove_' || (SELECT d.oid FROM pg_catalog.pg_database d
                                            WHERE d.datname = pg_catalog.current_database())
                           || '_' || j.job_id;
GRANT SELECT ON tsmove.jobs TO pg_monitor;

-- ---- monitoring: tablespace I/O, co-access, advice, history (issue 8) -----
