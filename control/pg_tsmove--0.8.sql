/* pg_tsmove 0.8: online moves of tables and indexes between tablespaces */

\echo Use "CREATE EXTENSION pg_tsmove" to load this file. \quit

/*
 * A fresh CREATE EXTENSION runs this script alone.  An installed 0.1 to
 * 0.5 reaches 0.6 through the upgrade scripts (pg_tsmove--0.1--0.2.sql
 * and on), which stay; this script is their net effect, with nothing
 * created only to be dropped.  The two paths must give the same objects,
 * definitions, privileges and comments: test/test_install_script.py
 * compares them.  Changing an object means changing it here and in a new
 * upgrade script.
 *
 * search_path is pg_catalog while an extension script runs (the control
 * file's schema); every name outside pg_catalog is qualified anyway.
 */

/*
 * The extension's objects live in schema tsmove, created here (not by the
 * control file's schema option) so that DROP EXTENSION removes it too.
 * Functions are revoked from PUBLIC one by one below; the schema is usable.
 */
CREATE SCHEMA tsmove;
GRANT USAGE ON SCHEMA tsmove TO PUBLIC;

/*
 * One row per job.  The row is committed before the worker creates any
 * file, so after a crash it is the only record of the new storage; the
 * launcher's recovery pass reads it to remove what a dead job left behind.
 * The worker keeps live counters in shared memory (tsmove.job_progress());
 * it writes them here when the job ends.
 *
 * Jobs of two kinds: 'move' (one relation) and 'relocate' (a whole
 * tablespace, to a new directory: relid 0, relname the tablespace's name,
 * relkind 't', source and target both the tablespace; old_location is
 * recorded before the first file is written, new_location on submission).
 *
 * with_indexes makes one job per index, with parent_job naming the table's
 * job; the table's worker runs them after the table, one at a time.
 *
 * members / old_relfilenodes / new_relfilenodes are parallel arrays: the
 * relation itself, then its TOAST table and TOAST index, which switch with
 * it in one transaction.
 *
 * Mode 'exclusive' moves a relation under AccessExclusiveLock (unlogged
 * relations).  State 'skipped': move_tablespace() recorded a relation it
 * cannot move, with the reason in error.  blocks_under_lock: blocks copied
 * while the switch held its locks.  State 'paused': tsmove.pause() of a
 * job that had not started (a running job shows 'paused' only in
 * tsmove.jobs, from its worker); pause_requested keeps the request across
 * restarts.  restarts: how often the job was queued again to resume after
 * its worker was interrupted (a queued job with new_relfilenodes is one).
 *
 * The columns from job_kind on came in 0.2 (ALTER TABLE ... ADD COLUMN):
 * they stay last, so that a fresh install and an upgraded one have the
 * same column order.
 */
CREATE TABLE tsmove.job (
    job_id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    parent_job        bigint REFERENCES tsmove.job (job_id) ON DELETE CASCADE,
    relid             oid NOT NULL,
    relname           text NOT NULL,
    relkind           "char" NOT NULL,
    owner             oid NOT NULL,
    submitted_by      oid NOT NULL,
    mode              text NOT NULL,
    source_tablespace oid NOT NULL,
    target_tablespace oid NOT NULL,
    max_rate_mb       numeric NOT NULL,
    state             text NOT NULL DEFAULT 'queued',
    members           oid[] NOT NULL,
    old_relfilenodes  oid[] NOT NULL,
    new_relfilenodes  oid[],
    blocks_total      bigint NOT NULL DEFAULT 0,
    blocks_copied     bigint NOT NULL DEFAULT 0,
    blocks_recopied   bigint NOT NULL DEFAULT 0,
    bytes_written     bigint NOT NULL DEFAULT 0,
    wal_bytes         bigint NOT NULL DEFAULT 0,
    switch_attempts   integer NOT NULL DEFAULT 0,
    lock_wait_ms      double precision NOT NULL DEFAULT 0,
    switch_ms         double precision,
    submitted_at      timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    started_at        timestamptz,
    finished_at       timestamptz,
    error             text,
    job_kind          text NOT NULL DEFAULT 'move',
    old_location      text,
    new_location      text,
    blocks_under_lock bigint NOT NULL DEFAULT 0,
    pause_requested   boolean NOT NULL DEFAULT false,
    restarts          integer NOT NULL DEFAULT 0,
    CONSTRAINT job_state_check CHECK (state IN
        ('queued', 'preparing', 'copying', 'catching_up', 'switching',
         'warming', 'done', 'failed', 'cancelled', 'skipped', 'paused')),
    CONSTRAINT job_mode_check CHECK (mode IN ('online', 'quiesce', 'exclusive')),
    CONSTRAINT job_kind_check CHECK (job_kind IN ('move', 'relocate'))
);
CREATE INDEX job_relid_idx ON tsmove.job (relid);
REVOKE ALL ON tsmove.job FROM PUBLIC;

/*
 * One unfinished move per relation: move() checks first, and this index
 * stops two transactions that checked at the same time.
 */
CREATE UNIQUE INDEX job_one_active_per_relation ON tsmove.job (relid)
    WHERE job_kind = 'move' AND state NOT IN ('done', 'failed', 'cancelled', 'skipped');

/*
 * Logical replication (see src/move/job_record.c): FOR ALL TABLES
 * publications carry tsmove.job's changes; on a subscriber with pg_tsmove
 * installed this REPLICA trigger discards them, so the publisher's jobs
 * never queue there.
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

CREATE FUNCTION tsmove.move(rel pg_catalog.regclass,
                            target pg_catalog.name,
                            mode pg_catalog.text DEFAULT 'online',
                            max_rate_mb pg_catalog.numeric DEFAULT NULL,
                            with_indexes pg_catalog.bool DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'tsm_move'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.move(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.numeric, pg_catalog.bool) IS
    'start an online move of a relation to a tablespace; returns the job id';

CREATE FUNCTION tsmove.wait(job pg_catalog.int8,
                            timeout pg_catalog.interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'tsm_wait'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.wait(pg_catalog.int8, pg_catalog.interval) IS
    'wait until a move ends (or the timeout passes) and return its state';

CREATE FUNCTION tsmove.cancel(job pg_catalog.int8)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tsm_cancel'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION tsmove.cancel(pg_catalog.int8) IS
    'ask a running move to stop and remove its new files; true if it was running';

CREATE FUNCTION tsmove.set_rate(job pg_catalog.int8,
                                max_rate_mb pg_catalog.numeric)
RETURNS boolean
AS 'MODULE_PATHNAME', 'tsm_set_rate'
LANGUAGE C VOLATILE STRICT;
COMMENT ON FUNCTION tsmove.set_rate(pg_catalog.int8, pg_catalog.numeric) IS
    'change the byte budget of a running move (MB/s, 0 = unthrottled)';

REVOKE ALL ON FUNCTION tsmove.move(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.numeric, pg_catalog.bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.cancel(pg_catalog.int8) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.set_rate(pg_catalog.int8, pg_catalog.numeric) FROM PUBLIC;

/*
 * tsmove.wait() as a procedure.  CALLed on its own it commits after each
 * poll, so a long wait holds no snapshot: a SELECT tsmove.wait() beside an
 * update-heavy load keeps its dead row versions from being pruned, which
 * cost TPC-B 27-30 % of its throughput here.  The state comes back in the
 * INOUT column state; its input is ignored (PostgreSQL 15 procedures have
 * no other way to return a value that CALL may omit).
 */
CREATE PROCEDURE tsmove.wait_for(job pg_catalog.int8,
                                 timeout pg_catalog.interval DEFAULT NULL,
                                 INOUT state pg_catalog.text DEFAULT NULL)
AS 'MODULE_PATHNAME', 'tsm_wait_for'
LANGUAGE C;
COMMENT ON PROCEDURE tsmove.wait_for(pg_catalog.int8, pg_catalog.interval, pg_catalog.text) IS
    'wait until a move ends (or the timeout passes) without holding a snapshot; returns its state';

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

/* Live counters of the running jobs of this database, from shared memory. */
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

/*
 * tsmove.jobs: every job of this database, its record joined with the live
 * counters of its worker.  For a person in psql: rates and times rounded
 * (eta to whole seconds, rates to 0.1 MB/s, lock times to 0.1 ms; the
 * columns keep their types), and the last three columns (progress, the
 * share of the copy done; size in human units; duration in whole seconds,
 * running or ended) appended, so that the columns before keep their
 * places.
 */
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
GRANT SELECT ON tsmove.jobs TO pg_monitor;

-- ---- monitoring: tablespace I/O, co-access, history, report -------------

/*
 * Monitoring (src/monitor/: monitor.c, tablespace_io.c, relation_map.c,
 * coaccess.c, history.c, sampler.c).  The C functions return raw rows;
 * the views and functions below name, join and derive.  Everything here
 * is readable by pg_monitor; the resets are for superusers (or whom they
 * grant).
 */

/* Per-tablespace sample: device, logical and physical I/O (tablespace_io.c). */
CREATE FUNCTION tsmove.tablespace_io_stats(
    OUT spcoid oid,
    OUT path text,
    OUT device text,
    OUT device_number text,
    OUT disks text,
    OUT device_note text,
    OUT rotational boolean,
    OUT free_bytes bigint,
    OUT fs_bytes bigint,
    OUT window_start timestamptz,
    OUT window_end timestamptz,
    OUT window_seconds double precision,
    OUT data_blocks_read_s double precision,
    OUT data_blocks_hit_s double precision,
    OUT index_blocks_read_s double precision,
    OUT index_blocks_hit_s double precision,
    OUT data_blocks_read bigint,
    OUT data_blocks_hit bigint,
    OUT index_blocks_read bigint,
    OUT index_blocks_hit bigint,
    OUT reads_s double precision,
    OUT writes_s double precision,
    OUT read_kb_s double precision,
    OUT write_kb_s double precision,
    OUT r_await_ms double precision,
    OUT w_await_ms double precision,
    OUT avg_queue_size double precision,
    OUT util_pct double precision,
    OUT device_reads bigint,
    OUT device_writes bigint,
    OUT device_read_kb bigint,
    OUT device_write_kb bigint,
    OUT stats_reset timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_tablespace_io_stats'
LANGUAGE C VOLATILE;

CREATE FUNCTION tsmove.tablespace_io_reset()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tsm_tablespace_io_reset'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.tablespace_io_reset() IS
    'zero the totals of tsmove.tablespace_io; returns the reset time';

CREATE VIEW tsmove.tablespace_io AS
WITH s AS MATERIALIZED (SELECT * FROM tsmove.tablespace_io_stats())
SELECT t.spcname AS tablespace,
       CASE WHEN pg_catalog.pg_tablespace_location(t.oid) = '' THEN s.path
            ELSE pg_catalog.pg_tablespace_location(t.oid) END AS location,
       s.device,
       s.device_number,
       pg_catalog.string_to_array(s.disks, ',') AS disks,
       CASE WHEN s.spcoid IS NULL
            THEN 'not sampled yet: see pg_tsmove.sample_interval'
            ELSE s.device_note END AS device_note,
       (SELECT pg_catalog.array_agg(t2.spcname ORDER BY t2.spcname)
        FROM s s2 JOIN pg_catalog.pg_tablespace t2 ON t2.oid = s2.spcoid
        WHERE s2.device_number = s.device_number AND s2.spcoid <> s.spcoid) AS same_device_as,
       s.rotational,
       pg_catalog.pg_tablespace_size(t.oid) AS size,
       s.free_bytes,
       s.window_start,
       s.window_end,
       s.window_seconds,
       s.data_blocks_read_s,
       s.data_blocks_hit_s,
       s.index_blocks_read_s,
       s.index_blocks_hit_s,
       s.data_blocks_read,
       s.data_blocks_hit,
       s.index_blocks_read,
       s.index_blocks_hit,
       s.reads_s,
       s.writes_s,
       s.read_kb_s,
       s.write_kb_s,
       s.r_await_ms,
       s.w_await_ms,
       s.avg_queue_size,
       s.util_pct,
       s.device_reads,
       s.device_writes,
       s.device_read_kb,
       s.device_write_kb,
       s.stats_reset
FROM pg_catalog.pg_tablespace t
LEFT JOIN s ON s.spcoid = t.oid;

/*
 * Each relation's recent I/O (recent_io.c): this database's relations with
 * their blocks read, rows changed and rows that changed every index, as
 * sums decayed with the time constant nearest half the horizon, how long
 * the sampler has kept them (since the server started), when rows were
 * last changed, and the tablespace they were counted in (they restart in
 * another).
 */
CREATE FUNCTION tsmove.relation_recent_io(
    horizon interval,
    OUT relid oid,
    OUT blocks_read double precision,
    OUT rows_changed double precision,
    OUT index_rows double precision,
    OUT time_constant_s double precision,
    OUT followed_s double precision,
    OUT spcoid oid,
    OUT last_written timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_relation_recent_io'
LANGUAGE C VOLATILE;

/*
 * Every database's recent reads and writes per tablespace (recent_io.c):
 * the same decayed sums as relation_recent_io()'s, fed where each relation
 * was at the time (a dropped relation's count until they fade), so that a
 * relation's share of its tablespace counts the other databases' reads
 * there too.
 */
CREATE FUNCTION tsmove.tablespace_recent_io(
    horizon interval,
    OUT spcoid oid,
    OUT blocks_read double precision,
    OUT rows_changed double precision,
    OUT index_rows double precision,
    OUT time_constant_s double precision,
    OUT followed_s double precision,
    OUT last_written timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_tablespace_recent_io'
LANGUAGE C VOLATILE;

/* The load history (history.c): one row per tablespace per interval. */
CREATE FUNCTION tsmove.tablespace_io_history_rows(
    OUT start_time timestamptz,
    OUT end_time timestamptz,
    OUT spcoid oid,
    OUT device text,
    OUT samples integer,
    OUT data_blocks_read bigint,
    OUT data_blocks_hit bigint,
    OUT index_blocks_read bigint,
    OUT index_blocks_hit bigint,
    OUT peak_blocks_read_s double precision,
    OUT device_reads bigint,
    OUT device_writes bigint,
    OUT device_read_kb bigint,
    OUT device_write_kb bigint,
    OUT device_read_ms bigint,
    OUT device_write_ms bigint,
    OUT device_io_ms bigint,
    OUT device_weighted_ms bigint,
    OUT peak_util_pct double precision,
    OUT peak_queue_size double precision,
    OUT device_valid boolean)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_tablespace_io_history'
LANGUAGE C VOLATILE;

CREATE VIEW tsmove.tablespace_io_history AS
WITH h AS (
    SELECT h.*, pg_catalog.date_part('epoch', h.end_time - h.start_time) AS seconds
    FROM tsmove.tablespace_io_history_rows() h)
SELECT coalesce(t.spcname, h.spcoid::pg_catalog.text::pg_catalog.name) AS tablespace,
       h.device,
       h.start_time,
       h.end_time,
       h.seconds,
       h.samples,
       h.data_blocks_read / nullif(h.seconds, 0) AS data_blocks_read_s,
       h.data_blocks_hit / nullif(h.seconds, 0) AS data_blocks_hit_s,
       h.index_blocks_read / nullif(h.seconds, 0) AS index_blocks_read_s,
       h.index_blocks_hit / nullif(h.seconds, 0) AS index_blocks_hit_s,
       h.peak_blocks_read_s,
       h.device_reads / nullif(h.seconds, 0) AS reads_s,
       h.device_writes / nullif(h.seconds, 0) AS writes_s,
       h.device_read_kb / nullif(h.seconds, 0) AS read_kb_s,
       h.device_write_kb / nullif(h.seconds, 0) AS write_kb_s,
       h.device_read_ms::double precision / nullif(h.device_reads, 0) AS r_await_ms,
       h.device_write_ms::double precision / nullif(h.device_writes, 0) AS w_await_ms,
       h.device_weighted_ms / nullif(h.seconds * 1000, 0) AS avg_queue_size,
       least(100, h.device_io_ms / nullif(h.seconds * 10, 0)) AS util_pct,
       h.peak_util_pct,
       h.peak_queue_size
FROM h
LEFT JOIN pg_catalog.pg_tablespace t ON t.oid = h.spcoid;

/* Co-access pairs of every database (coaccess.c). */
CREATE FUNCTION tsmove.coaccess_pairs(
    OUT dbid oid,
    OUT rel_a oid,
    OUT rel_b oid,
    OUT executions bigint,
    OUT blocks_a bigint,
    OUT blocks_b bigint,
    OUT blocks_read_a bigint,
    OUT blocks_read_b bigint,
    OUT concurrent_ticks bigint,
    OUT first_seen timestamptz,
    OUT last_seen timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_coaccess_pairs'
LANGUAGE C VOLATILE;

CREATE FUNCTION tsmove.coaccess_reset()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'tsm_coaccess_reset'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION tsmove.coaccess_reset() IS
    'forget every co-access pair of every database; returns the reset time';

/* The pairs of this database, both relations still present. */
CREATE VIEW tsmove.coaccess AS
WITH pairs AS MATERIALIZED (
    SELECT p.*
    FROM tsmove.coaccess_pairs() p
    JOIN pg_catalog.pg_database d ON d.oid = p.dbid
    WHERE d.datname = pg_catalog.current_database()),
devices AS MATERIALIZED (
    SELECT s.spcoid, s.device_number FROM tsmove.tablespace_io_stats() s),
rels AS (
    SELECT c.oid,
           CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END AS spcoid
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_database d ON d.datname = pg_catalog.current_database())
SELECT p.rel_a::pg_catalog.regclass AS rel_a,
       p.rel_b::pg_catalog.regclass AS rel_b,
       ta.spcname AS tablespace_a,
       tb.spcname AS tablespace_b,
       (da.device_number = db.device_number) AS same_device,
       p.executions,
       p.blocks_a,
       p.blocks_b,
       p.blocks_read_a,
       p.blocks_read_b,
       p.blocks_a + p.blocks_b AS coaccess_weight,
       p.blocks_read_a + p.blocks_read_b AS coaccess_weight_read,
       p.concurrent_ticks,
       p.first_seen,
       p.last_seen
FROM pairs p
JOIN rels ra ON ra.oid = p.rel_a
JOIN rels rb ON rb.oid = p.rel_b
LEFT JOIN pg_catalog.pg_tablespace ta ON ta.oid = ra.spcoid
LEFT JOIN pg_catalog.pg_tablespace tb ON tb.oid = rb.spcoid
LEFT JOIN devices da ON da.spcoid = ra.spcoid
LEFT JOIN devices db ON db.spcoid = rb.spcoid;

/* The machinery itself (monitor.c). */
CREATE FUNCTION tsmove.monitor_info(
    OUT sampler_pid integer,
    OUT last_sample timestamptz,
    OUT track_coaccess boolean,
    OUT coaccess_pairs bigint,
    OUT coaccess_max_pairs integer,
    OUT coaccess_evictions bigint,
    OUT coaccess_reset timestamptz,
    OUT relations_mapped bigint,
    OUT relation_map_size integer,
    OUT relation_map_full boolean,
    OUT unattributed_blocks bigint,
    OUT history_rows bigint,
    OUT history_size integer,
    OUT history_oldest timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'tsm_monitor_info'
LANGUAGE C VOLATILE;

/*
 * tsmove.report(since, compare): per tablespace, the load averages and
 * peaks of the history since `since`; then every move and relocation that
 * finished since then, with the load of its tablespaces' devices over
 * `compare` before it started and after it finished (history rows wholly
 * in those windows; the window after starts pg_tsmove.relation_map_refresh
 * after the end, once the moved relation's blocks count for its new
 * tablespace).  Reads tsmove.job, so it runs as the extension's owner,
 * with a fixed search_path; its only inputs are a timestamp and an
 * interval.
 */
CREATE FUNCTION tsmove.report(since timestamptz,
                              compare interval DEFAULT '15 minutes')
RETURNS TABLE (section text,
               tablespace name,
               device text,
               job_id bigint,
               relation text,
               side text,
               period text,
               period_start timestamptz,
               period_end timestamptz,
               samples bigint,
               blocks_read_s numeric,
               blocks_read_s_peak numeric,
               blocks_hit_s numeric,
               reads_s numeric,
               writes_s numeric,
               read_kb_s numeric,
               write_kb_s numeric,
               await_ms numeric,
               util_pct numeric,
               util_pct_peak numeric,
               note text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $report$
#variable_conflict use_column
DECLARE
    -- blocks of a moved relation count for its new tablespace once the
    -- relation map has been read again: the window after starts then
    settle interval := make_interval(secs => (SELECT s.setting::double precision FROM pg_settings s
                                              WHERE s.name = 'pg_tsmove.relation_map_refresh'));
BEGIN
    IF since IS NULL THEN
        RAISE EXCEPTION 'since must not be null'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the start of the period to report, for example now() - interval ''1 day''.';
    END IF;
    IF compare IS NULL OR compare <= interval '0' THEN
        RAISE EXCEPTION 'compare must be a positive interval'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the length of the windows compared before and after each move, for example ''15 minutes''.';
    END IF;

    RETURN QUERY
    WITH
    hist AS MATERIALIZED (
        SELECT h.*, extract(epoch FROM h.end_time - h.start_time) AS seconds
        FROM tsmove.tablespace_io_history_rows() h),
    job AS (
        SELECT j.job_id, j.relname, j.source_tablespace, j.target_tablespace,
               j.started_at, j.finished_at,
               coalesce(to_jsonb(j) ->> 'job_kind', 'move') AS job_kind
        FROM tsmove.job j
        WHERE j.state = 'done' AND j.started_at IS NOT NULL
          AND j.finished_at >= since),
    win AS (
        -- the whole period, per tablespace with history in it
        SELECT 1 AS ord, 'tablespace'::text AS section, h.spcoid, NULL::bigint AS job_id,
               NULL::text AS relation, NULL::text AS side, 'whole'::text AS period,
               greatest(since, min(h.start_time)) AS w_start, max(h.end_time) AS w_end,
               NULL::text AS job_note
        FROM hist h
        WHERE h.end_time > since
        GROUP BY h.spcoid
        UNION ALL
        -- before and after each move, on each side; a relocation has one side
        SELECT 2, j.job_kind, s.spcoid, j.job_id, j.relname, s.side, p.period,
               CASE p.period WHEN 'before' THEN j.started_at - compare ELSE j.finished_at + settle END,
               CASE p.period WHEN 'before' THEN j.started_at ELSE j.finished_at + settle + compare END,
               format('%s %s: %s -> %s, started %s, took %s',
                      j.job_kind, coalesce(j.relname, ''),
                      coalesce((SELECT spcname FROM pg_tablespace WHERE oid = j.source_tablespace),
                               j.source_tablespace::text),
                      coalesce((SELECT spcname FROM pg_tablespace WHERE oid = j.target_tablespace),
                               j.target_tablespace::text),
                      date_trunc('second', j.started_at),
                      justify_interval(date_trunc('second', j.finished_at - j.started_at)))
        FROM job j
        CROSS JOIN LATERAL (VALUES ('source', j.source_tablespace, 1),
                                   ('target', j.target_tablespace, 2)) AS s(side, spcoid, side_ord)
        CROSS JOIN (VALUES ('before', 1), ('after', 2)) AS p(period, period_ord)
        WHERE j.job_kind <> 'relocate' OR s.side = 'source'),
    measured AS (
        SELECT w.*, m.*
        FROM win w
        CROSS JOIN LATERAL (
            SELECT string_agg(DISTINCT h.device, ', ') AS device,
                   coalesce(sum(h.samples), 0) AS samples,
                   sum(h.data_blocks_read + h.index_blocks_read) / nullif(sum(h.seconds), 0) AS read_s,
                   max(h.peak_blocks_read_s) AS read_s_peak,
                   sum(h.data_blocks_hit + h.index_blocks_hit) / nullif(sum(h.seconds), 0) AS hit_s,
                   sum(h.device_reads) / nullif(sum(h.seconds) FILTER (WHERE h.device_valid), 0) AS dev_reads_s,
                   sum(h.device_writes) / nullif(sum(h.seconds) FILTER (WHERE h.device_valid), 0) AS dev_writes_s,
                   sum(h.device_read_kb) / nullif(sum(h.seconds) FILTER (WHERE h.device_valid), 0) AS dev_read_kb_s,
                   sum(h.device_write_kb) / nullif(sum(h.seconds) FILTER (WHERE h.device_valid), 0) AS dev_write_kb_s,
                   (sum(h.device_read_ms) + sum(h.device_write_ms))::numeric
                     / nullif(sum(h.device_reads) + sum(h.device_writes), 0) AS dev_await,
                   least(100, sum(h.device_io_ms) / nullif(sum(h.seconds) FILTER (WHERE h.device_valid) * 10, 0)) AS dev_util,
                   max(h.peak_util_pct) AS dev_util_peak
            FROM hist h
            WHERE h.spcoid = w.spcoid
              AND CASE w.period
                  -- rows wholly before the move started / after it settled
                  WHEN 'before' THEN h.end_time <= w.w_end AND h.end_time > w.w_start
                  WHEN 'after' THEN h.start_time >= w.w_start AND h.start_time < w.w_end
                  ELSE h.end_time > w.w_start AND h.start_time < w.w_end END) m),
    compared AS (
        SELECT m.*,
               lag(m.dev_util) OVER (PARTITION BY m.job_id, m.side ORDER BY m.w_start) AS util_before,
               lag(m.read_s) OVER (PARTITION BY m.job_id, m.side ORDER BY m.w_start) AS read_s_before,
               lag(m.samples) OVER (PARTITION BY m.job_id, m.side ORDER BY m.w_start) AS samples_before
        FROM measured m)
    SELECT c.section,
           coalesce(t.spcname, c.spcoid::text::name),
           c.device,
           c.job_id,
           c.relation,
           c.side,
           c.period,
           c.w_start,
           c.w_end,
           c.samples::bigint,
           round(c.read_s::numeric, 1),
           round(c.read_s_peak::numeric, 1),
           round(c.hit_s::numeric, 1),
           round(c.dev_reads_s::numeric, 1),
           round(c.dev_writes_s::numeric, 1),
           round(c.dev_read_kb_s::numeric, 1),
           round(c.dev_write_kb_s::numeric, 1),
           round(c.dev_await, 2),
           round(c.dev_util::numeric, 1),
           round(c.dev_util_peak::numeric, 1),
           CASE
           WHEN c.period = 'before' THEN c.job_note
           WHEN c.period = 'after' AND (c.samples = 0 OR c.samples_before = 0) THEN
               'no load history in one of the windows'
               || CASE WHEN c.w_end > now() THEN ' (the window after ends in the future)' ELSE '' END
           WHEN c.period = 'after' THEN
               format('%s: utilisation %s%% before, %s%% after (%s); blocks read from outside shared buffers %s/s before, %s/s after%s',
                      coalesce(c.device, 'no device'),
                      coalesce(round(c.util_before::numeric, 1)::text, '?'),
                      coalesce(round(c.dev_util::numeric, 1)::text, '?'),
                      CASE WHEN c.util_before IS NULL OR c.dev_util IS NULL THEN 'not comparable'
                           WHEN c.dev_util < c.util_before * 0.9 THEN 'lower after'
                           WHEN c.dev_util > c.util_before * 1.1 THEN 'higher after'
                           ELSE 'about the same' END,
                      coalesce(round(c.read_s_before::numeric, 1)::text, '?'),
                      coalesce(round(c.read_s::numeric, 1)::text, '?'),
                      CASE WHEN c.w_end > now() THEN '; the window after is not over yet' ELSE '' END)
           END
    FROM compared c
    LEFT JOIN pg_tablespace t ON t.oid = c.spcoid
    ORDER BY c.ord, c.job_id NULLS FIRST, t.spcname, c.side, c.w_start;
END
$report$;
COMMENT ON FUNCTION tsmove.report(timestamptz, interval) IS
    'per-tablespace load since a time, and every move or relocation in it with the load before and after';

CREATE VIEW tsmove.monitor_status AS SELECT * FROM tsmove.monitor_info();

REVOKE ALL ON FUNCTION tsmove.tablespace_io_stats() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.tablespace_io_reset() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.tablespace_io_history_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.coaccess_pairs() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.relation_recent_io(pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.tablespace_recent_io(pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.coaccess_reset() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.monitor_info() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.report(pg_catalog.timestamptz, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON tsmove.tablespace_io, tsmove.tablespace_io_history, tsmove.coaccess, tsmove.monitor_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.tablespace_io_stats() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.tablespace_io_history_rows() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.coaccess_pairs() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.relation_recent_io(pg_catalog.interval) TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.tablespace_recent_io(pg_catalog.interval) TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.monitor_info() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.report(pg_catalog.timestamptz, pg_catalog.interval) TO pg_monitor;
GRANT SELECT ON tsmove.tablespace_io, tsmove.tablespace_io_history, tsmove.coaccess, tsmove.monitor_status TO pg_monitor;

-- ---- the autopilot: candidates, advice, decisions (0.5) ---------------------

/*
 * tsmove.advise_candidates(min_read_mb, horizon): every (relation, target)
 * pair advise() considers, with `verdict_code` and `verdict` saying why one
 * is not recommended (NULL: recommended; then it is what advise() lists).
 * Three kinds, each one relation to move, the best target for it, never a
 * target on a busier, slower or narrower device, nor one sharing a disk
 * with the source:
 *   co-access     two relations read together (tsmove.coaccess) on one
 *                 device: move one of them to another device (the hotter
 *                 one if the target is faster, else the smaller one);
 *   faster device a relation read heavily from outside shared buffers on
 *                 a rotational device, a non-rotational one available;
 *   busy device   a device at least 50 % busy over the horizon next to one
 *                 at most half as busy: move the relation read most.
 * Evidence below min_read_mb (MB read from outside shared buffers) is not
 * worth a copy.  The score (MB) weighs the evidence by what a seek costs:
 * co-access reads count fully on a rotational source, a quarter on a
 * non-rotational one, divided by the number of disks under the source
 * (striping already spreads them: Nicola & Rizvi, Larson).  A co-accessed
 * pair last seen before the horizon, or a source device with no load
 * history in it, is stale.  Each candidate carries a predicted benefit,
 * from a share-of-busy-time model over the horizon's history:
 *   U_s, U_t   utilisation of the source and target devices (%)
 *   r          the source device's read share of its busy time
 *              (read ms / (read + write ms))
 *   f_r        the relation's share of the blocks read from outside shared
 *              buffers on the source device over the horizon: its share of
 *              every database's reads of its tablespace (sums the sampler
 *              decays with the time constant nearest half the horizon,
 *              tsmove.relation_recent_io() over
 *              tsmove.tablespace_recent_io(); a table's TOAST counts as its
 *              own), times the tablespace's share of the device's reads in
 *              the history (none where nothing was read there).  Until
 *              the sampler has kept its sums for a time constant (after a
 *              start-up), this database's share of the cumulative counters
 *              instead; with no history, the cumulative share of the
 *              device.  tsmove.autopilot_step() does not act on those.
 *   f_w        its share of the pages written: the rows it and its TOAST
 *              changed, decayed as f_r's reads (an index: its table's
 *              inserts and non-HOT updates; only where some rows were
 *              changed within the horizon: a decayed sum never reaches 0)
 *              times its miss ratio (a page that stays in shared buffers
 *              takes the next change before it is written), over this
 *              database's on the device, times this database's share of
 *              every database's rows written there over the horizon (the
 *              same sums, per tablespace: tablespace_recent_io(); rows
 *              changed and index rows, both where their table is; not
 *              scaled where none are counted, as for an index stored apart
 *              from its table); until the sampler's sums count, from
 *              the cumulative counters,
 *              times this database's share of the reads there (no counter
 *              says what other databases wrote).  Bulk inserts count as
 *              hits, so they look cheap
 * A share with no denominator (no reads or no rows changed there) is 0.
 *   moved      = U_s * (r * f_r + (1 - r) * f_w), the busy time that
 *              follows the relation
 *   after      U_s' = U_s - moved, U_t' = U_t + moved (same speed), each
 *              times (1 - k * r) where the move separates interleaved
 *              reads (0.8): the relation and another each did a tenth of
 *              the source's reads at least, and the device is left with
 *              one relation's (the source: another does 90 % of what
 *              stays; the target: its own load is under a tenth of what
 *              arrives).  k = 0.2, calibrated on the evaluation's emulated
 *              disks, where a stream read alone took 20-30 % less busy
 *              time per request than interleaved (doc/autopilot.md)
 *   benefit    = max(U_s, U_t) - max(U_s', U_t'): points of utilisation the
 *              busier device loses at today's load
 *   await      the source's await scaled as in an M/M/1 queue:
 *              await' = await * (1 - U_s) / (1 - U_s')
 *   capacity   max(U_s, U_t) / max(U_s', U_t') - 1: how much more of
 *              today's work the two devices could serve (bottleneck law)
 * The model predicts from a steady load: when a device's utilisation in
 * the newer half of the horizon differs from the older half's by more than
 * 25 points (each half two history rows at least), the verdict is
 * load_changing and there is no recommendation; a move whose benefit is
 * below -1 point (the target would end busier than the busier device is
 * now) is no_gain, unless the target is faster (non-rotational, the
 * source rotational), where the model's equal speed does not hold.  It is an estimate, not a
 * promise: doc/autopilot.md gives how it compared with what happened.
 */
CREATE FUNCTION tsmove.advise_candidates(min_read_mb numeric DEFAULT 64,
                                         horizon interval DEFAULT '1 hour')
RETURNS TABLE (kind text,
               relation regclass,
               source_tablespace name,
               target_tablespace name,
               reason text,
               partner regclass,
               executions bigint,
               concurrent_ticks bigint,
               evidence_mb numeric,
               score_mb numeric,
               relation_mb numeric,
               source_device text,
               source_util_pct numeric,
               target_device text,
               target_util_pct numeric,
               estimated_copy_time interval,
               command text,
               assumptions text,
               read_share_pct numeric,
               benefit_pct numeric,
               source_util_after_pct numeric,
               target_util_after_pct numeric,
               source_await_ms numeric,
               source_await_after_ms numeric,
               capacity_gain_pct numeric,
               coaccess_mb_separated numeric,
               last_evidence timestamptz,
               verdict_code text,
               verdict text,
               relation_bytes bigint,
               relation_owner name)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $candidates$
#variable_conflict use_column
DECLARE
    block_bytes numeric := current_setting('block_size')::numeric;
    min_bytes numeric;
    rate_mb numeric;
    tick_s numeric;
    observed_s numeric;
    coaccess_since timestamptz;
    recent_text text;
    recent_ok boolean;
    written_since timestamptz;
    declared_disks text := coalesce(current_setting('pg_tsmove.device_disks', true), '');
BEGIN
    IF min_read_mb IS NULL OR min_read_mb < 0 THEN
        RAISE EXCEPTION 'min_read_mb must be zero or more'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the volume, in MB read from outside shared buffers, below which a move is not worth its copy (default 64).';
    END IF;
    IF horizon IS NULL OR horizon <= interval '0' OR horizon > interval '1000 years' THEN
        RAISE EXCEPTION 'horizon must be a positive interval of at most 1000 years'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the period over which device load is averaged, for example ''1 hour''.';
    END IF;
    -- first, so that a server without the library preloaded says so
    SELECT m.coaccess_reset INTO coaccess_since FROM tsmove.monitor_info() m;
    min_bytes := min_read_mb * 1048576;
    rate_mb := current_setting('pg_tsmove.max_rate_mb')::numeric;
    SELECT s.setting::numeric / 1000 INTO tick_s
    FROM pg_settings s WHERE s.name = 'pg_tsmove.coaccess_sample_interval';
    observed_s := greatest(1, extract(epoch FROM now() - coaccess_since));
    -- the sampler's decayed sums count once it has fed them for a time
    -- constant (decided once, for the relations' and the tablespaces')
    SELECT coalesce(bool_and(x.followed_s >= x.time_constant_s), false),
           format('over the horizon (sums decayed with a time constant of %s s)', max(x.time_constant_s))
    INTO recent_ok, recent_text FROM tsmove.tablespace_recent_io(horizon) x;
    -- rows changed count where some were within the horizon, give or take
    -- how late they reach the sums: a sample interval, and the 10 s an
    -- idle backend may keep its counts before it publishes them
    SELECT now() - horizon - make_interval(secs => s.setting::double precision / 1000 + 10)
    INTO written_since
    FROM pg_settings s WHERE s.name = 'pg_tsmove.sample_interval';

    RETURN QUERY
    WITH
    declared AS (
        SELECT split_part(e, ':', 1) AS device, split_part(e, ':', 2)::integer AS ndisks
        FROM unnest(string_to_array(replace(declared_disks, ' ', ''), ',')) AS e
        WHERE e <> ''),
    -- every tablespace on a known device, with its load over the horizon
    spc AS MATERIALIZED (
        SELECT s.spcoid, t.spcname, s.device, s.device_number,
               coalesce(string_to_array(nullif(s.disks, ''), ','), '{}'::text[]) AS disks,
               coalesce(s.rotational, true) AS rotational,
               s.free_bytes, s.util_pct AS util_now, s.r_await_ms AS await_now,
               coalesce(s.data_blocks_read, 0) + coalesce(s.index_blocks_read, 0) AS all_blocks_read
        FROM tsmove.tablespace_io_stats() s
        JOIN pg_tablespace t ON t.oid = s.spcoid
        WHERE s.device IS NOT NULL AND t.spcname <> 'pg_global'),
    hist AS (
        SELECT h.spcoid, h.device,
               sum(h.device_io_ms) / nullif(sum(extract(epoch FROM h.end_time - h.start_time)) * 10, 0) AS util,
               sum(h.device_read_ms)::numeric / nullif(sum(h.device_read_ms) + sum(h.device_write_ms), 0) AS read_share,
               (sum(h.device_read_ms) + sum(h.device_write_ms))::numeric
                 / nullif(sum(h.device_reads) + sum(h.device_writes), 0) AS await,
               sum(h.data_blocks_read + h.index_blocks_read) AS window_blocks_read,
               -- the two halves of the horizon, to tell a steady load from a changing one
               -- (each half judged on two history rows at least)
               CASE WHEN count(*) FILTER (WHERE h.end_time <= now() - horizon / 2) >= 2
                     AND count(*) FILTER (WHERE h.end_time > now() - horizon / 2) >= 2 THEN
                   sum(h.device_io_ms) FILTER (WHERE h.end_time <= now() - horizon / 2)
                     / nullif(sum(extract(epoch FROM h.end_time - h.start_time))
                                FILTER (WHERE h.end_time <= now() - horizon / 2) * 10, 0) END AS util_older,
               CASE WHEN count(*) FILTER (WHERE h.end_time <= now() - horizon / 2) >= 2
                     AND count(*) FILTER (WHERE h.end_time > now() - horizon / 2) >= 2 THEN
                   sum(h.device_io_ms) FILTER (WHERE h.end_time > now() - horizon / 2)
                     / nullif(sum(extract(epoch FROM h.end_time - h.start_time))
                                FILTER (WHERE h.end_time > now() - horizon / 2) * 10, 0) END AS util_newer,
               max(h.end_time) AS last_end,
               count(*) AS nrows
        FROM tsmove.tablespace_io_history_rows() h
        WHERE h.device_valid AND h.end_time > now() - horizon
        GROUP BY h.spcoid, h.device),
    dev AS MATERIALIZED (
        SELECT spc.spcoid, spc.spcname, spc.device, spc.device_number,
               -- a device named in pg_tsmove.device_disks stands on disks of its own
               CASE WHEN dd.ndisks IS NOT NULL THEN ARRAY[spc.device] ELSE spc.disks END AS disks,
               spc.rotational, spc.free_bytes, spc.util_now, spc.await_now,
               least(100, coalesce(hist.util, spc.util_now, 0))::numeric AS util,
               coalesce(hist.read_share, 1)::numeric AS read_share,
               coalesce(hist.await, spc.await_now)::numeric AS await,
               hist.last_end,
               hist.window_blocks_read,
               least(100, hist.util_older)::numeric AS util_older,
               least(100, hist.util_newer)::numeric AS util_newer,
               coalesce(hist.nrows, 0) AS history_rows,
               coalesce(dd.ndisks, greatest(cardinality(spc.disks), 1)) AS parallelism
        FROM spc
        LEFT JOIN hist ON hist.spcoid = spc.spcoid AND hist.device = spc.device
        LEFT JOIN (SELECT declared.device, max(declared.ndisks) AS ndisks
                   FROM declared GROUP BY declared.device) dd ON dd.device = spc.device),
    -- what each relation of this database read and changed lately: sums
    -- decayed with the time constant nearest half the horizon (the sampler
    -- keeps them since the server started: used once that is one time
    -- constant at least)
    recent AS MATERIALIZED (
        SELECT x.relid, x.spcoid, x.blocks_read::numeric AS blocks_read,
               -- rows changed only where some were within the horizon: a
               -- decayed sum never reaches 0, and a relation's share of a
               -- device's writes would keep one long ago whole
               CASE WHEN x.last_written >= written_since THEN x.rows_changed::numeric ELSE 0 END AS rows_changed,
               CASE WHEN x.last_written >= written_since THEN x.index_rows::numeric ELSE 0 END AS index_rows,
               x.time_constant_s
        FROM tsmove.relation_recent_io(horizon) x
        WHERE recent_ok),
    -- every database's recent reads of each tablespace (the same sums, fed
    -- where each relation was when it read)
    spc_recent AS MATERIALIZED (
        SELECT x.spcoid, x.blocks_read::numeric AS blocks_read,
               CASE WHEN x.last_written >= written_since
                    THEN (x.rows_changed + x.index_rows)::numeric ELSE 0 END AS rows_written
        FROM tsmove.tablespace_recent_io(horizon) x
        WHERE recent_ok),
    -- the recent reads of each table's indexes, by table (a TOAST table's
    -- index counts as its table's)
    recent_index_reads AS MATERIALIZED (
        SELECT ti.indrelid, x.spcoid, sum(x.blocks_read) AS blocks_read
        FROM recent x JOIN pg_index ti ON ti.indexrelid = x.relid
        GROUP BY ti.indrelid, x.spcoid),
    -- relations this database could move, with their reads since the statistics reset
    rel AS MATERIALIZED (
        SELECT c.oid, c.relname, n.nspname, c.relkind,
               format('%I.%I', n.nspname, c.relname) AS qualified,
               pg_get_userbyid(c.relowner) AS owner,
               CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END AS spcoid,
               -- a table's TOAST (and its index) moves with it: their reads count as its
               greatest(pg_stat_get_blocks_fetched(c.oid) - pg_stat_get_blocks_hit(c.oid), 0)
                 + CASE WHEN c.reltoastrelid <> 0 THEN
                       greatest(pg_stat_get_blocks_fetched(c.reltoastrelid) - pg_stat_get_blocks_hit(c.reltoastrelid), 0)
                       + coalesce((SELECT sum(greatest(pg_stat_get_blocks_fetched(ti.indexrelid)
                                                       - pg_stat_get_blocks_hit(ti.indexrelid), 0))
                                   FROM pg_index ti WHERE ti.indrelid = c.reltoastrelid), 0)
                   ELSE 0 END AS blocks_read,
               -- what it writes to the device, in pages: the rows it changed
               -- (a table's own, an index's through its table: inserts and
               -- updates that are not HOT), each a page written unless the
               -- page stays in shared buffers to take the next change too, as
               -- often as its reads find their page there
               CASE WHEN c.relkind = 'i'
                    THEN (SELECT greatest(pg_stat_get_tuples_inserted(x.indrelid)
                                          + pg_stat_get_tuples_updated(x.indrelid)
                                          - pg_stat_get_tuples_hot_updated(x.indrelid), 0)
                          FROM pg_index x WHERE x.indexrelid = c.oid)
                    ELSE pg_stat_get_tuples_inserted(c.oid) + pg_stat_get_tuples_updated(c.oid)
                         + pg_stat_get_tuples_deleted(c.oid) END
                 * coalesce(greatest(pg_stat_get_blocks_fetched(c.oid) - pg_stat_get_blocks_hit(c.oid), 0)::numeric
                            / nullif(pg_stat_get_blocks_fetched(c.oid), 0), 1)
                 -- and its TOAST's, which moves with it
                 + CASE WHEN c.reltoastrelid <> 0 THEN
                       (pg_stat_get_tuples_inserted(c.reltoastrelid) + pg_stat_get_tuples_deleted(c.reltoastrelid))
                       * coalesce(greatest(pg_stat_get_blocks_fetched(c.reltoastrelid)
                                           - pg_stat_get_blocks_hit(c.reltoastrelid), 0)::numeric
                                  / nullif(pg_stat_get_blocks_fetched(c.reltoastrelid), 0), 1)
                   ELSE 0 END AS pages_written,
               -- the same two over the horizon, from the decayed sums
               coalesce(rr.blocks_read, 0) + coalesce(rt.blocks_read, 0) + coalesce(rti.blocks_read, 0)
                 AS recent_read,
               CASE WHEN c.relkind = 'i' THEN coalesce(rix.index_rows, 0) ELSE coalesce(rr.rows_changed, 0) END
                 * coalesce(greatest(pg_stat_get_blocks_fetched(c.oid) - pg_stat_get_blocks_hit(c.oid), 0)::numeric
                            / nullif(pg_stat_get_blocks_fetched(c.oid), 0), 1)
                 + coalesce(rt.rows_changed, 0)
                   * coalesce(greatest(pg_stat_get_blocks_fetched(c.reltoastrelid)
                                       - pg_stat_get_blocks_hit(c.reltoastrelid), 0)::numeric
                              / nullif(pg_stat_get_blocks_fetched(c.reltoastrelid), 0), 1) AS recent_written
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_database d ON d.datname = current_database()
        -- (its reads where it is now: a relation moved and not read since
        --  has none there; its sums restart when it is)
        LEFT JOIN recent rr ON rr.relid = c.oid AND rr.spcoid = CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END
        LEFT JOIN recent rt ON c.reltoastrelid <> 0 AND rt.relid = c.reltoastrelid
                           AND rt.spcoid = CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END
        LEFT JOIN recent_index_reads rti ON c.reltoastrelid <> 0 AND rti.indrelid = c.reltoastrelid
                                        AND rti.spcoid = CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END
        LEFT JOIN pg_index xi ON xi.indexrelid = c.oid
        LEFT JOIN recent rix ON rix.relid = xi.indrelid
        WHERE c.relkind IN ('r', 'm', 'i') AND c.relpersistence = 'p'
          AND c.oid >= 16384
          AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
          -- an extension's own tables (this one's job table) are its business
          AND NOT EXISTS (SELECT FROM pg_depend e
                          WHERE e.classid = 'pg_class'::regclass AND e.objid = c.oid
                            AND e.deptype = 'e')
          AND NOT EXISTS (SELECT FROM pg_index x
                          JOIN pg_depend e ON e.classid = 'pg_class'::regclass
                                          AND e.objid = x.indrelid AND e.deptype = 'e'
                          WHERE x.indexrelid = c.oid)
          AND NOT EXISTS (SELECT FROM tsmove.jobs j
                          WHERE j.relation = c.oid::regclass
                            AND j.state NOT IN ('done', 'failed', 'cancelled'))),
    -- what was read from each device, for each relation's share: every
    -- database's reads there (tsmove.tablespace_io's totals), or this
    -- one's if its statistics go back further
    device_reads AS (
        SELECT dev.device,
               greatest(sum(r.blocks_read),
                        (SELECT sum(a.all_blocks_read) FROM spc a WHERE a.device = dev.device)) AS blocks_read,
               sum(r.blocks_read) AS own_blocks_read,
               sum(r.pages_written) AS pages_written,
               sum(r.recent_written) AS recent_written,
               -- the rows this database and every database wrote there
               -- over the horizon (the same decayed sums: rows changed and
               -- index rows, both where their table is); NULL where the
               -- sampler has no sums of the device's tablespaces
               (SELECT sum(x.rows_changed + x.index_rows) FROM recent x
                JOIN dev d ON d.spcoid = x.spcoid WHERE d.device = dev.device) AS own_recent_rows,
               (SELECT sum(s.rows_written) FROM spc_recent s
                JOIN dev d ON d.spcoid = s.spcoid WHERE d.device = dev.device) AS all_recent_rows,
               (SELECT sum(d.window_blocks_read) FROM dev d WHERE d.device = dev.device) AS window_blocks_read
        FROM rel r JOIN dev ON dev.spcoid = r.spcoid
        GROUP BY dev.device),
    -- what was read from each tablespace over the horizon, by every
    -- database (the decayed sums; this database's since the statistics'
    -- reset when there are none): the relation's share of it, times the
    -- tablespace's share of its device's reads over the horizon, is its
    -- share of the device's reads over the horizon (a relation read
    -- heavily long ago is not blamed for today's load of another, nor a
    -- quiet database's for a busy one's)
    spc_reads AS (
        SELECT r.spcoid, sum(r.blocks_read) AS blocks_read,
               -- (every database's; this one's where the sampler does not
               -- follow the tablespace)
               coalesce(max(sx.blocks_read), sum(r.recent_read)) AS recent_read
        FROM rel r
        LEFT JOIN spc_recent sx ON sx.spcoid = r.spcoid
        GROUP BY r.spcoid),
    -- each relation's share of its device's reads over the horizon (its
    -- share of every database's reads of its tablespace times the
    -- tablespace's share of the device's in the history; none where there
    -- were none); until the sampler's sums count (after a start-up), its
    -- share of this database's since the counters' resets, times the
    -- tablespace's share where the history has it (least() ignores a
    -- NULL: a share with no denominator is 0)
    rel_share AS MATERIALIZED (
        SELECT r.oid AS relid, d.device,
               least(1, coalesce(CASE WHEN recent_ok
                                      -- (none where nothing was read lately)
                                      THEN CASE WHEN dr.window_blocks_read > 0 AND d.window_blocks_read IS NOT NULL
                                                THEN r.recent_read / nullif(sr.recent_read, 0)
                                                     * d.window_blocks_read / dr.window_blocks_read END
                                      WHEN dr.window_blocks_read > 0 AND d.window_blocks_read IS NOT NULL
                                      THEN r.blocks_read::numeric / nullif(sr.blocks_read, 0)
                                           * d.window_blocks_read / dr.window_blocks_read
                                      ELSE r.blocks_read::numeric / nullif(dr.blocks_read, 0) END, 0)) AS share
        FROM rel r
        JOIN dev d ON d.spcoid = r.spcoid
        LEFT JOIN device_reads dr ON dr.device = d.device
        LEFT JOIN spc_reads sr ON sr.spcoid = r.spcoid),
    -- the two largest shares of each device's reads, and whose the first is
    device_top AS (
        SELECT t.device, max(t.share) FILTER (WHERE t.n = 1) AS first_share,
               max(t.relid) FILTER (WHERE t.n = 1) AS first_relid,
               max(t.share) FILTER (WHERE t.n = 2) AS second_share
        FROM (SELECT x.device, x.relid, x.share,
                     row_number() OVER (PARTITION BY x.device ORDER BY x.share DESC, x.relid) AS n
              FROM rel_share x) t
        WHERE t.n <= 2
        GROUP BY t.device),
    -- co-accessed pairs on one device, with the evidence in blocks
    pair AS (
        SELECT p.rel_a::oid AS a, p.rel_b::oid AS b, p.executions, p.concurrent_ticks,
               p.blocks_read_a, p.blocks_read_b, p.coaccess_weight, p.coaccess_weight_read,
               p.last_seen,
               -- read at once by different sessions: the smaller one's reads, scaled
               -- by the share of the time both were seen being read
               2 * least(ra.blocks_read, rb.blocks_read)
                 * least(1, p.concurrent_ticks * tick_s / observed_s) AS concurrent_blocks,
               p.coaccess_weight_read
                 + 2 * least(ra.blocks_read, rb.blocks_read)
                     * least(1, p.concurrent_ticks * tick_s / observed_s) AS evidence_blocks
        FROM tsmove.coaccess p
        JOIN rel ra ON ra.oid = p.rel_a::oid
        JOIN rel rb ON rb.oid = p.rel_b::oid
        WHERE p.same_device),
    mover AS (
        SELECT pr.*, m.relid, m.partner, m.pair_reads
        FROM pair pr
        CROSS JOIN LATERAL (VALUES (pr.a, pr.b, pr.blocks_read_a),
                                   (pr.b, pr.a, pr.blocks_read_b)) AS m(relid, partner, pair_reads)),
    coaccess_candidate AS (
        SELECT 'co-access'::text AS kind, m.relid, m.partner, m.executions, m.concurrent_ticks,
               m.coaccess_weight * block_bytes AS together_bytes,
               m.coaccess_weight_read * block_bytes AS together_read_bytes,
               m.concurrent_blocks * block_bytes AS concurrent_bytes,
               m.evidence_blocks * block_bytes AS evidence_bytes,
               m.evidence_blocks * block_bytes
                 * CASE WHEN src.rotational THEN 1.0 ELSE 0.25 END / src.parallelism AS score_bytes,
               src.spcoid AS src_spc, tgt.spcoid AS tgt_spc,
               -- which of the two: the hotter one onto a faster device, else the smaller
               CASE WHEN src.rotational AND NOT tgt.rotational
                    THEN -m.pair_reads::numeric ELSE pg_table_size(m.relid)::numeric END AS preference,
               m.last_seen
        FROM mover m
        JOIN rel r ON r.oid = m.relid
        JOIN dev src ON src.spcoid = r.spcoid
        JOIN dev tgt ON tgt.device <> src.device AND NOT (tgt.disks && src.disks)),
    single_candidate AS (
        SELECT CASE WHEN src.util >= 50 AND tgt.util <= src.util / 2 THEN 'busy device'
                    ELSE 'faster device' END AS kind,
               r.oid AS relid, NULL::oid AS partner, NULL::bigint AS executions,
               NULL::bigint AS concurrent_ticks,
               NULL::numeric AS together_bytes, NULL::numeric AS together_read_bytes,
               NULL::numeric AS concurrent_bytes,
               r.blocks_read * block_bytes AS evidence_bytes,
               r.blocks_read * block_bytes
                 * CASE WHEN src.util >= 50 AND tgt.util <= src.util / 2
                        THEN (src.util - tgt.util) / 100 ELSE 0.5 END AS score_bytes,
               src.spcoid AS src_spc, tgt.spcoid AS tgt_spc,
               0::numeric AS preference,
               src.last_end AS last_seen
        FROM rel r
        JOIN dev src ON src.spcoid = r.spcoid
        JOIN dev tgt ON tgt.device <> src.device AND NOT (tgt.disks && src.disks)
        WHERE r.blocks_read * block_bytes >= min_bytes AND r.blocks_read > 0
          AND ((src.util >= 50 AND tgt.util <= src.util / 2)
               OR (src.rotational AND NOT tgt.rotational))),
    weighed AS (
        SELECT c.*, pg_table_size(c.relid) AS size_bytes,
               src.device AS src_device, src.util AS src_util, src.rotational AS src_rot,
               src.parallelism AS src_par, src.history_rows AS src_rows,
               src.read_share AS src_read_share, src.await AS src_await,
               tgt.device AS tgt_device, tgt.util AS tgt_util, tgt.rotational AS tgt_rot,
               tgt.parallelism AS tgt_par, tgt.free_bytes AS tgt_free,
               src.util_older AS src_util_older, src.util_newer AS src_util_newer,
               tgt.util_older AS tgt_util_older, tgt.util_newer AS tgt_util_newer,
               (dr.window_blocks_read > 0 AND src.window_blocks_read IS NOT NULL) AS src_window_reads,
               coalesce(dr.all_recent_rows > 0, false) AS recent_writes,
               rs.share AS read_share_f,
               -- the largest share of the device's reads another relation has
               CASE WHEN dt.first_relid = c.relid THEN dt.second_share ELSE dt.first_share END AS other_share_f,
               -- its share of the writes: of this database's pages written
               -- there, scaled by this database's share of every database's
               -- rows changed there over the horizon (since the statistics
               -- reset, until the sampler's sums count: its share of the
               -- reads, as no counter says what other databases wrote)
               -- (none if this database wrote nothing there lately; all of
               -- what it wrote if no other database's rows are counted
               -- there, as for an index stored apart from its table)
               least(1, coalesce(CASE WHEN recent_ok
                                      THEN coalesce(r.recent_written / nullif(dr.recent_written, 0), 0)
                                           * CASE WHEN dr.all_recent_rows > 0
                                                  THEN least(1, coalesce(dr.own_recent_rows, 0) / dr.all_recent_rows)
                                                  ELSE 1 END
                                      ELSE r.pages_written::numeric / nullif(dr.pages_written, 0)
                                           * coalesce(dr.own_blocks_read::numeric / nullif(dr.blocks_read, 0), 1) END, 0)) AS write_share_f
        FROM (SELECT * FROM coaccess_candidate UNION ALL SELECT * FROM single_candidate) c
        JOIN rel r ON r.oid = c.relid
        JOIN dev src ON src.spcoid = c.src_spc
        JOIN dev tgt ON tgt.spcoid = c.tgt_spc
        LEFT JOIN device_reads dr ON dr.device = src.device
        LEFT JOIN spc_reads sr ON sr.spcoid = r.spcoid
        LEFT JOIN rel_share rs ON rs.relid = r.oid
        LEFT JOIN device_top dt ON dt.device = src.device),
    -- the busy time that follows the relation, and the interference of
    -- interleaved streams: where the relation and another each did a tenth
    -- of the device's reads at least, a device left with one relation's
    -- reads (at least 90 % of what it still reads), or receiving the
    -- relation's alone (its own load under a tenth of what arrives),
    -- serves their reading at (1 - 0.2) of the busy time it took
    -- interleaved (calibrated on the evaluation's devices: doc/autopilot.md)
    modelled AS (
        SELECT w.*, m.moved, i.mixed_before, i.source_alone, i.target_alone,
               (w.src_util - m.moved)
                 * CASE WHEN i.mixed_before AND i.source_alone THEN 1 - 0.2 * w.src_read_share ELSE 1 END AS src_after,
               w.tgt_util + m.moved
                 * CASE WHEN i.mixed_before AND i.target_alone THEN 1 - 0.2 * w.src_read_share ELSE 1 END AS tgt_after
        FROM weighed w
        CROSS JOIN LATERAL (SELECT w.src_util * (w.src_read_share * coalesce(w.read_share_f, 0)
                                                 + (1 - w.src_read_share) * coalesce(w.write_share_f, 0)) AS moved) m
        CROSS JOIN LATERAL (
            -- the relation and another each did a tenth of the device's reads at least
            SELECT coalesce(w.read_share_f, 0) >= 0.1 AND coalesce(w.other_share_f, 0) >= 0.1 AS mixed_before,
                   coalesce(w.other_share_f, 0) >= 0.9 * (1 - coalesce(w.read_share_f, 0)) AS source_alone,
                   w.tgt_util <= 0.1 * m.moved AS target_alone) i),
    candidate AS (
        SELECT m.*,
               greatest(m.src_util, m.tgt_util) - greatest(m.src_after, m.tgt_after) AS benefit,
               -- the first reason not to, in the order a DBA would check them
               CASE
               WHEN m.kind = 'co-access' AND (m.evidence_bytes < min_bytes OR m.evidence_bytes <= 0) THEN 'evidence_below_min'
               WHEN m.last_seen IS NULL OR m.last_seen < now() - horizon OR m.src_rows = 0 THEN 'stale'
               -- the model predicts from a steady load: one that moved by more
               -- than 25 points between the halves of the horizon is no basis
               WHEN abs(m.src_util_newer - m.src_util_older) > 25
                    OR abs(m.tgt_util_newer - m.tgt_util_older) > 25 THEN 'load_changing'
               WHEN m.tgt_util > m.src_util THEN 'target_busier'
               WHEN NOT m.src_rot AND m.tgt_rot THEN 'target_slower'
               WHEN m.tgt_par < m.src_par AND NOT (m.src_rot AND NOT m.tgt_rot) THEN 'target_fewer_disks'
               WHEN m.tgt_free IS NULL OR m.tgt_free < m.size_bytes * 1.2 THEN 'target_full'
               -- the target would end busier than the busier device is now
               -- (a point of slack: on idle devices the prediction is noise);
               -- not onto a faster device, which the model takes as as fast
               WHEN NOT (m.src_rot AND NOT m.tgt_rot)
                    AND greatest(m.src_util, m.tgt_util) - greatest(m.src_after, m.tgt_after) < -1 THEN 'no_gain'
               END AS verdict_code
        FROM modelled m),
    best AS (
        -- per pair the preferred relation, per relation the best target and kind
        SELECT DISTINCT ON (c.relid) c.*
        FROM (SELECT DISTINCT ON (least(c.relid, coalesce(c.partner, c.relid)),
                                  greatest(c.relid, coalesce(c.partner, c.relid)), c.kind)
                     c.*
              FROM candidate c
              WHERE c.verdict_code IS NULL
              ORDER BY least(c.relid, coalesce(c.partner, c.relid)),
                       greatest(c.relid, coalesce(c.partner, c.relid)), c.kind,
                       c.preference, (NOT c.tgt_rot) DESC, c.tgt_util, c.tgt_free DESC) c
        ORDER BY c.relid, c.score_bytes DESC, (NOT c.tgt_rot) DESC, c.tgt_util, c.tgt_free DESC),
    kept AS (
        -- never undo a better recommendation: no move next to a relation it
        -- is co-accessed with that a higher-scoring one sends to that device
        SELECT b.*
        FROM best b
        WHERE NOT EXISTS (
            SELECT FROM best o
            JOIN pair pr ON (pr.a = o.relid AND pr.b = b.relid) OR (pr.b = o.relid AND pr.a = b.relid)
            WHERE o.tgt_device = b.tgt_device
              AND (o.score_bytes > b.score_bytes
                   OR (o.score_bytes = b.score_bytes AND o.relid < b.relid)))),
    rejected AS (
        -- per relation and target, the best-scoring rejected candidate
        SELECT DISTINCT ON (c.relid, c.tgt_spc) c.*
        FROM candidate c
        WHERE c.verdict_code IS NOT NULL
        ORDER BY c.relid, c.tgt_spc, c.score_bytes DESC),
    result AS (
        SELECT * FROM kept UNION ALL SELECT * FROM rejected)
    SELECT b.kind,
           b.relid::regclass,
           ts.spcname,
           tt.spcname,
           CASE b.kind
           WHEN 'co-access' THEN
               format('%s and %s were read together in %s executions (%s, %s of it from outside shared buffers)%s, both on %s; moving %s (%s) to %s on %s separates them',
                      r.qualified, pr.qualified, b.executions,
                      pg_size_pretty(b.together_bytes::bigint),
                      pg_size_pretty(b.together_read_bytes::bigint),
                      CASE WHEN b.concurrent_ticks > 0
                           THEN format(' and by different sessions at the same time in %s samples (about %s more)',
                                       b.concurrent_ticks, pg_size_pretty(b.concurrent_bytes::bigint))
                           ELSE '' END,
                      b.src_device, r.qualified,
                      CASE WHEN b.src_rot AND NOT b.tgt_rot THEN 'the hotter of the two, onto a faster device'
                           ELSE 'the smaller of the two' END,
                      tt.spcname, b.tgt_device)
           WHEN 'busy device' THEN
               format('%s is %s%% busy and %s only %s%% (averages over %s); %s is the relation read most from outside shared buffers there (%s since the statistics reset)',
                      b.src_device, round(b.src_util, 1), b.tgt_device, round(b.tgt_util, 1),
                      horizon, r.qualified, pg_size_pretty(b.evidence_bytes::bigint))
           ELSE
               format('%s was read %s from outside shared buffers since the statistics reset, on rotational %s; %s is non-rotational and no busier (%s%% vs %s%%): hot data belongs on the fastest device',
                      r.qualified, pg_size_pretty(b.evidence_bytes::bigint), b.src_device,
                      b.tgt_device, round(b.tgt_util, 1), round(b.src_util, 1))
           END,
           b.partner::regclass,
           b.executions,
           b.concurrent_ticks,
           round(b.evidence_bytes / 1048576, 1),
           round(b.score_bytes / 1048576, 1),
           round(b.size_bytes / 1048576.0, 1),
           b.src_device,
           round(b.src_util, 1),
           b.tgt_device,
           round(b.tgt_util, 1),
           CASE WHEN rate_mb > 0
                THEN make_interval(secs => ceil(b.size_bytes * 2 / (rate_mb * 1048576))::double precision) END,
           format('SELECT tsmove.move(%L, %L);', r.qualified, tt.spcname),
           format('device load: utilisation averaged over the last %s of history (%s rows for %s; the last sampling window where there are none); '
                  'speed: the kernel''s rotational flag (%s %s, %s %s); parallelism: disks under the device (%s: %s, %s: %s%s); '
                  'co-access counted since %s; "outside shared buffers" includes reads the OS page cache served; '
                  'copy time %s, counting the page images in the WAL as the throttle does; '
                  'benefit: share-of-busy-time model, the relation takes %s%% of the blocks read from %s (every database; within its tablespace %s, %s) and %s%% of its pages written (from rows changed %s), '
                  'and %s%% of %s''s busy time is reading, so about %s points of its %s%% follow the relation to %s (same speed assumed); await scaled as in an M/M/1 queue; '
                  'a load that changed within the horizon gives no prediction',
                  horizon, b.src_rows, b.src_device,
                  b.src_device, CASE WHEN b.src_rot THEN 'rotational' ELSE 'non-rotational' END,
                  b.tgt_device, CASE WHEN b.tgt_rot THEN 'rotational' ELSE 'non-rotational' END,
                  b.src_device, b.src_par, b.tgt_device, b.tgt_par,
                  CASE WHEN declared_disks <> '' THEN ', pg_tsmove.device_disks = ' || declared_disks ELSE '' END,
                  coaccess_since,
                  CASE WHEN rate_mb > 0 THEN format('at pg_tsmove.max_rate_mb = %s MB/s', rate_mb)
                       ELSE 'not estimated: pg_tsmove.max_rate_mb = 0 (no ceiling: the pace depends on the load)' END,
                  round(coalesce(b.read_share_f, 0) * 100, 1), b.src_device,
                  CASE WHEN recent_ok THEN recent_text ELSE 'since the statistics reset' END,
                  CASE WHEN b.src_window_reads THEN 'the tablespace''s share over the horizon'
                       WHEN recent_ok THEN 'none read there over the horizon'
                       ELSE 'the device''s since the counters'' resets: no history of its tablespaces' END,
                  round(coalesce(b.write_share_f, 0) * 100, 1),
                  CASE WHEN b.recent_writes
                       THEN recent_text || ', scaled by this database''s share of every database''s there'
                       WHEN recent_ok THEN recent_text || ': none written there'
                       ELSE 'since the statistics reset, scaled by this database''s share of the reads there' END,
                  round(b.src_read_share * 100, 1), b.src_device,
                  round(b.moved, 1), round(b.src_util, 1), b.tgt_device)
             || '; interference: ' || CASE
                WHEN NOT b.mixed_before THEN
                    format('none to remove (it and another relation did not each do a tenth of the reads from %s)', b.src_device)
                WHEN b.source_alone OR b.target_alone THEN
                    format('the reads interleaved on %s are separated, so %s with its reading at 0.8 of the busy time it took interleaved (calibrated on the evaluation''s emulated disks)',
                           b.src_device,
                           concat_ws(' and ',
                                     CASE WHEN b.source_alone THEN format('what stays on %s is served', b.src_device) END,
                                     CASE WHEN b.target_alone THEN format('what arrives on %s is served', b.tgt_device) END))
                ELSE format('none counted: %s and %s still serve several relations'' reads', b.src_device, b.tgt_device) END,
           round(coalesce(b.read_share_f, 0) * 100, 1),
           round(b.benefit, 1),
           round(b.src_after, 1),
           round(b.tgt_after, 1),
           round(b.src_await, 2),
           round(b.src_await * (1 - least(b.src_util, 99) / 100) / (1 - least(b.src_after, 99) / 100), 2),
           round((greatest(b.src_util, b.tgt_util) / nullif(greatest(b.src_after, b.tgt_after), 0) - 1) * 100, 1),
           round(b.together_read_bytes / 1048576, 1),
           b.last_seen,
           b.verdict_code,
           CASE b.verdict_code
           WHEN 'evidence_below_min' THEN
               format('%s and %s were read together in %s executions, but only %s of it from outside shared buffers (least worth a move: %s MB): the data is in the cache, a move would not change what the disk serves',
                      r.qualified, pr.qualified, b.executions, pg_size_pretty(b.evidence_bytes::bigint), min_read_mb)
           WHEN 'stale' THEN
               CASE WHEN b.src_rows = 0
                    THEN format('no load history of %s in the last %s: nothing recent to decide on',
                                b.src_device, horizon)
                    ELSE format('the evidence is older than the horizon: %s was last read %s at %s, more than %s ago',
                                r.qualified, CASE WHEN b.partner IS NOT NULL THEN 'together with ' || pr.qualified ELSE 'heavily' END,
                                date_trunc('second', b.last_seen), horizon) END
           WHEN 'load_changing' THEN
               format('the load changed within the last %s (%s: %s%% then %s%%; %s: %s%% then %s%%): the prediction assumes a steady load, so there is none until the load settles',
                      horizon, b.src_device, coalesce(round(b.src_util_older, 1)::text, '-'),
                      coalesce(round(b.src_util_newer, 1)::text, '-'),
                      b.tgt_device, coalesce(round(b.tgt_util_older, 1)::text, '-'),
                      coalesce(round(b.tgt_util_newer, 1)::text, '-'))
           WHEN 'target_busier' THEN
               format('%s (%s) is busier than %s: %s%% against %s%% over the last %s',
                      tt.spcname, b.tgt_device, b.src_device, round(b.tgt_util, 1), round(b.src_util, 1), horizon)
           WHEN 'target_slower' THEN
               format('%s is on rotational %s, slower than non-rotational %s where %s is', tt.spcname, b.tgt_device, b.src_device, r.qualified)
           WHEN 'target_fewer_disks' THEN
               format('%s stripes over %s disks and %s has %s: striping already spreads the co-accessed reads (Nicola & Rizvi, Larson), moving to fewer disks would lose that',
                      b.src_device, b.src_par, b.tgt_device, b.tgt_par)
           WHEN 'target_full' THEN
               format('%s has %s free on %s, and the copy of %s (%s) needs %s with room to spare',
                      tt.spcname, coalesce(pg_size_pretty(b.tgt_free), 'unknown space'), b.tgt_device, r.qualified,
                      pg_size_pretty(b.size_bytes), pg_size_pretty((b.size_bytes * 1.2)::bigint))
           WHEN 'no_gain' THEN
               format('%s would take about %s points of %s''s busy time to %s, which would then be %s%% busy, busier than the busier of the two is now (%s%%): no gain at today''s load',
                      r.qualified, round(b.moved, 1), b.src_device, b.tgt_device, round(b.tgt_after, 1),
                      round(greatest(b.src_util, b.tgt_util), 1))
           END,
           b.size_bytes,
           r.owner::name
    FROM result b
    JOIN rel r ON r.oid = b.relid
    LEFT JOIN rel pr ON pr.oid = b.partner
    JOIN pg_tablespace ts ON ts.oid = b.src_spc
    JOIN pg_tablespace tt ON tt.oid = b.tgt_spc
    ORDER BY b.verdict_code NULLS FIRST, b.score_bytes DESC, b.relid, tt.spcname;
END
$candidates$;
COMMENT ON FUNCTION tsmove.advise_candidates(numeric, interval) IS
    'every move advise() weighed, with its predicted benefit and, for those it rejects, why';

/* tsmove.advise(): the recommended candidates, ranked (its 0.2 columns, then the predicted benefit). */
CREATE FUNCTION tsmove.advise(min_read_mb numeric DEFAULT 64,
                              horizon interval DEFAULT '1 hour')
RETURNS TABLE (rank integer,
               kind text,
               relation regclass,
               source_tablespace name,
               target_tablespace name,
               reason text,
               partner regclass,
               executions bigint,
               concurrent_ticks bigint,
               evidence_mb numeric,
               score_mb numeric,
               relation_mb numeric,
               source_device text,
               source_util_pct numeric,
               target_device text,
               target_util_pct numeric,
               estimated_copy_time interval,
               command text,
               assumptions text,
               read_share_pct numeric,
               benefit_pct numeric,
               source_util_after_pct numeric,
               target_util_after_pct numeric,
               source_await_ms numeric,
               source_await_after_ms numeric,
               capacity_gain_pct numeric,
               coaccess_mb_separated numeric)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $advise$
    SELECT (row_number() OVER (ORDER BY c.score_mb DESC, c.relation::oid))::integer,
           c.kind, c.relation, c.source_tablespace, c.target_tablespace, c.reason,
           c.partner, c.executions, c.concurrent_ticks, c.evidence_mb, c.score_mb,
           c.relation_mb, c.source_device, c.source_util_pct, c.target_device,
           c.target_util_pct, c.estimated_copy_time, c.command, c.assumptions,
           c.read_share_pct, c.benefit_pct, c.source_util_after_pct, c.target_util_after_pct,
           c.source_await_ms, c.source_await_after_ms, c.capacity_gain_pct, c.coaccess_mb_separated
    FROM tsmove.advise_candidates(min_read_mb, horizon) c
    WHERE c.verdict_code IS NULL
    ORDER BY 1
$advise$;
COMMENT ON FUNCTION tsmove.advise(numeric, interval) IS
    'ranked recommendations of relations to move, why, the call to run and the predicted benefit';

/*
 * The autopilot's log: one row per decision.  Written only by
 * tsmove.autopilot_step() (the autopilot's worker) and
 * tsmove.autopilot_resume(); a decision repeated unchanged (the same
 * action, relation, target and reason) bumps `times` and `last_seen_at`
 * instead of adding a row.
 *   proposed  pg_tsmove.autopilot = propose: what it would start
 *   started   it started job_id
 *   skipped   it did not act, and reason says why
 *   done      job_id finished; measured_* once the window after it is over
 *   failed    job_id failed or was cancelled
 *   stopped   a move did not bring half its predicted benefit: no more
 *             moves until tsmove.autopilot_resume()
 *   resumed   tsmove.autopilot_resume() was called
 */
CREATE TABLE tsmove.decision (
    decision_id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    decided_at            timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_seen_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    times                 integer NOT NULL DEFAULT 1,
    mode                  text NOT NULL,
    action                text NOT NULL,
    relid                 oid,
    relname               text,
    kind                  text,
    source_tablespace     name,
    target_tablespace     name,
    relation_bytes        bigint,
    reason_code           text,
    reason                text,
    predicted_benefit_pct numeric,
    evidence              jsonb,
    job_id                bigint,
    measured_at           timestamptz,
    measured_benefit_pct  numeric,
    measured              jsonb,
    verdict               text,
    CONSTRAINT decision_action_check CHECK (action IN
        ('proposed', 'started', 'skipped', 'done', 'failed', 'stopped', 'resumed')));
CREATE INDEX decision_job_idx ON tsmove.decision (job_id);
CREATE INDEX decision_relid_idx ON tsmove.decision (relid, target_tablespace, decision_id);
REVOKE ALL ON tsmove.decision FROM PUBLIC;

CREATE VIEW tsmove.decisions AS
SELECT d.decision_id,
       d.decided_at,
       d.last_seen_at,
       d.times,
       d.mode,
       d.action,
       d.relname AS relation,
       d.kind,
       d.source_tablespace,
       d.target_tablespace,
       d.reason,
       d.predicted_benefit_pct,
       d.job_id,
       d.measured_benefit_pct,
       d.verdict,
       d.reason_code,
       d.relation_bytes,
       d.measured_at,
       d.evidence,
       d.measured
FROM tsmove.decision d;
REVOKE ALL ON tsmove.decisions FROM PUBLIC;
GRANT SELECT ON tsmove.decisions TO pg_monitor;

/* Log a decision, or bump the last one if it is the same. */
CREATE FUNCTION tsmove.autopilot_log(p_action text, p_relid oid, p_relname text, p_kind text,
                                     p_source name, p_target name, p_bytes bigint,
                                     p_reason_code text, p_reason text,
                                     p_benefit numeric, p_evidence jsonb, p_job bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $log$
DECLARE
    last_row tsmove.decision;
    new_id bigint;
BEGIN
    SELECT * INTO last_row FROM tsmove.decision d
    WHERE d.relid IS NOT DISTINCT FROM p_relid
      AND d.target_tablespace IS NOT DISTINCT FROM p_target
    ORDER BY d.decision_id DESC LIMIT 1;
    IF FOUND AND p_job IS NULL AND last_row.job_id IS NULL
       AND last_row.action = p_action
       AND last_row.reason_code IS NOT DISTINCT FROM p_reason_code
       AND last_row.target_tablespace IS NOT DISTINCT FROM p_target
       AND last_row.mode = current_setting('pg_tsmove.autopilot') THEN
        UPDATE tsmove.decision
        SET last_seen_at = now(), times = times + 1, reason = p_reason,
            predicted_benefit_pct = p_benefit, evidence = p_evidence,
            relname = p_relname, kind = p_kind, source_tablespace = p_source,
            relation_bytes = p_bytes
        WHERE decision_id = last_row.decision_id;
        RETURN last_row.decision_id;
    END IF;
    INSERT INTO tsmove.decision (mode, action, relid, relname, kind, source_tablespace,
                                 target_tablespace, relation_bytes, reason_code, reason,
                                 predicted_benefit_pct, evidence, job_id)
    VALUES (current_setting('pg_tsmove.autopilot'), p_action, p_relid, p_relname, p_kind,
            p_source, p_target, p_bytes, p_reason_code, p_reason, p_benefit, p_evidence, p_job)
    RETURNING decision_id INTO new_id;
    RETURN new_id;
END
$log$;
REVOKE ALL ON FUNCTION tsmove.autopilot_log(text, oid, text, text, name, name, bigint, text, text, numeric, jsonb, bigint) FROM PUBLIC;

/*
 * The measured outcome of a finished move: the devices of its source and
 * target tablespaces over `evidence` before it started and over `evidence`
 * after it settled.  The window after starts one `evidence` (plus
 * pg_tsmove.relation_map_refresh, once the relation's blocks count for its
 * new tablespace) after the end: right after a move, the kernel is still
 * writing the copy back and the new files' pages are not yet in the page
 * cache, which would charge the move's own cost to its outcome.  Work is
 * what the two devices read and wrote, in kB per second (0.7; blocks read
 * from outside shared buffers counted page-cache hits, a fresh copy's
 * among them, as work).  The measured benefit is the busier device's
 * utilisation before, less the busier one's after scaled to equal work:
 * the same quantity the prediction gives, whether the workload answered
 * the move by doing more (closed) or by loading the disk less (open).
 * Equal work is per device (0.8): each device's utilisation after, scaled
 * by the work the old workload puts on it in the new placement over the
 * work it did after: the source keeps (1 - s) of its work before, the
 * target gets its own and s of the source's, where s is the moved
 * relation's share of the source's reads: moved_share_pct if given (the
 * read_share_pct advise_candidates() gave before a move someone else
 * made), else its decision's read_share_pct.  Scaling both by the total
 * work (0.7, and still for a move with neither) is wrong when the
 * move changes the mix: a stream freed by it can multiply its work on the
 * target while the source, still saturated, does as much as before.  But s
 * comes from the counters the prediction read, so a wrong share would
 * vouch for itself: the benefit is the lesser of the two (`equal_work`
 * says which; `measured` has both).  NULL
 * (not measurable) unless both devices have history in both windows and
 * the devices moved at least 80 kB/s in each, the work after within 1/4
 * and 4 times the work before: a workload that stopped or changed is no
 * verdict on the move.  Clamped to [-100, 100].
 */
CREATE FUNCTION tsmove.autopilot_measure(p_job bigint, evidence interval,
                                         moved_share_pct numeric DEFAULT NULL,
                                         OUT benefit_pct numeric, OUT measured jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $measure$
DECLARE
    j record;
    settle interval := make_interval(secs => (SELECT s.setting::double precision FROM pg_settings s WHERE s.name = 'pg_tsmove.relation_map_refresh'));
    b record;
    a record;
    before_max numeric;
    after_max numeric;
    work_before numeric;
    work_after numeric;
    share numeric;
    source_equal numeric;
    target_equal numeric;
    benefit_total numeric;
    benefit_device numeric;
BEGIN
    IF moved_share_pct <= 0 OR moved_share_pct > 100 THEN
        RAISE EXCEPTION 'moved_share_pct must be above 0 and at most 100'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the read_share_pct advise_candidates() gave for the move, or NULL to take it from the autopilot''s decision.';
    END IF;
    SELECT * INTO j FROM tsmove.job WHERE job_id = p_job;
    IF NOT FOUND OR j.state <> 'done' THEN
        RETURN;
    END IF;
    -- per window: utilisation of the source's and target's devices, and the work
    WITH devs AS (
        SELECT DISTINCT h.device,
               CASE WHEN h.spcoid = j.source_tablespace THEN 'source' ELSE 'target' END AS side
        FROM tsmove.tablespace_io_history_rows() h
        WHERE h.spcoid IN (j.source_tablespace, j.target_tablespace) AND h.device_valid),
    win AS (
        SELECT 'before' AS period, j.started_at - evidence AS w_start, j.started_at AS w_end
        UNION ALL
        SELECT 'after', j.finished_at + settle + evidence, j.finished_at + settle + 2 * evidence),
    per AS (
        SELECT w.period, d.side,
               sum(h.device_io_ms) / nullif(sum(extract(epoch FROM h.end_time - h.start_time)) * 10, 0) AS util,
               sum(h.device_reads) / nullif(sum(extract(epoch FROM h.end_time - h.start_time)), 0) AS reads_s,
               (sum(h.device_read_ms) + sum(h.device_write_ms))::numeric
                 / nullif(sum(h.device_reads) + sum(h.device_writes), 0) AS await_ms,
               (sum(h.device_read_kb) + sum(h.device_write_kb))::numeric
                 / nullif(sum(extract(epoch FROM h.end_time - h.start_time)), 0) AS kb_s,
               count(*) AS nrows
        FROM win w
        CROSS JOIN devs d
        JOIN LATERAL (
            -- one row per device and history interval (tablespaces on one device repeat it)
            SELECT DISTINCT ON (h.start_time) h.*
            FROM tsmove.tablespace_io_history_rows() h
            WHERE h.device = d.device AND h.device_valid
              AND h.start_time >= w.w_start AND h.end_time <= w.w_end
            ORDER BY h.start_time) h ON true
        GROUP BY w.period, d.side)
    SELECT jsonb_object_agg(p.period || '_' || p.side || '_util_pct', round(p.util::numeric, 1))
             || jsonb_object_agg(p.period || '_' || p.side || '_await_ms', round(p.await_ms, 2))
             || jsonb_object_agg(p.period || '_' || p.side || '_history_rows', p.nrows)
             || jsonb_object_agg(p.period || '_' || p.side || '_kb_s', round(p.kb_s, 1))
    INTO measured
    FROM per p;
    IF measured IS NULL THEN
        RETURN;
    END IF;
    -- both devices measured in both windows, and work enough in each, of
    -- comparable size: else the outcome is not measurable (a workload that
    -- stopped or changed is no verdict on the move)
    IF (measured ->> 'before_source_util_pct') IS NULL OR (measured ->> 'before_target_util_pct') IS NULL
       OR (measured ->> 'after_source_util_pct') IS NULL OR (measured ->> 'after_target_util_pct') IS NULL THEN
        RETURN;
    END IF;
    before_max := greatest((measured ->> 'before_source_util_pct')::numeric, (measured ->> 'before_target_util_pct')::numeric);
    after_max := greatest((measured ->> 'after_source_util_pct')::numeric, (measured ->> 'after_target_util_pct')::numeric);
    -- the work: what the two devices read and wrote per second, as their
    -- utilisation counts it (reads the page cache served, such as a fresh
    -- copy's, are no device work; blocks read from outside shared buffers
    -- counted them)
    work_before := (measured ->> 'before_source_kb_s')::numeric + (measured ->> 'before_target_kb_s')::numeric;
    work_after := (measured ->> 'after_source_kb_s')::numeric + (measured ->> 'after_target_kb_s')::numeric;
    -- (kB/s are rounded to 0.1 in `measured`; the least of 80, ten blocks, makes that moot)
    IF work_before IS NULL OR work_after IS NULL OR work_before < 80 OR work_after < 80
       OR work_after / work_before NOT BETWEEN 0.25 AND 4 THEN
        RETURN;
    END IF;
    measured := measured || jsonb_build_object(
        'work_ratio', round(work_after / work_before, 2),
        'window_before', jsonb_build_array(j.started_at - evidence, j.started_at),
        'window_after', jsonb_build_array(j.finished_at + settle + evidence, j.finished_at + settle + 2 * evidence));
    -- the moved relation's share of the source's reads: as given (the
    -- prediction of a move someone else made), else when the autopilot
    -- decided to move it
    share := moved_share_pct / 100;
    IF share IS NULL THEN
        SELECT (s.evidence ->> 'read_share_pct')::numeric / 100 INTO share
        FROM tsmove.decision s
        WHERE s.job_id = p_job AND s.action = 'started'
        ORDER BY s.decision_id DESC LIMIT 1;
    END IF;
    IF NOT (share > 0 AND share <= 1) THEN
        share := NULL;
    END IF;
    IF share IS NOT NULL THEN
        -- each device at the work the old workload puts on it now; none
        -- for a device that did too little work after to scale, or whose
        -- work changed more than eightfold either way (then the total
        -- work alone counts)
        source_equal := (measured ->> 'after_source_util_pct')::numeric
            * (1 - share) * (measured ->> 'before_source_kb_s')::numeric
            / nullif((measured ->> 'after_source_kb_s')::numeric, 0);
        target_equal := (measured ->> 'after_target_util_pct')::numeric
            * ((measured ->> 'before_target_kb_s')::numeric + share * (measured ->> 'before_source_kb_s')::numeric)
            / nullif((measured ->> 'after_target_kb_s')::numeric, 0);
        IF (measured ->> 'after_source_kb_s')::numeric < 80 OR (measured ->> 'after_target_kb_s')::numeric < 80
           OR source_equal > 8 * (measured ->> 'after_source_util_pct')::numeric
           OR target_equal > 8 * (measured ->> 'after_target_util_pct')::numeric
           OR source_equal * 8 < (measured ->> 'after_source_util_pct')::numeric
           OR target_equal * 8 < (measured ->> 'after_target_util_pct')::numeric THEN
            share := NULL;
        END IF;
    END IF;
    benefit_total := before_max - after_max * work_before / work_after;
    IF share IS NOT NULL THEN
        benefit_device := before_max - greatest(source_equal, target_equal);
        -- the lesser of the two: the share comes from the same counters as
        -- the prediction's, and the total work is right only for a mix the
        -- move left alone; neither alone may vouch for the prediction
        measured := measured || jsonb_build_object(
            'moved_share_pct', round(share * 100, 1),
            'after_source_util_equal_pct', round(source_equal, 1),
            'after_target_util_equal_pct', round(target_equal, 1),
            'benefit_per_device_pct', round(benefit_device, 1),
            'benefit_total_work_pct', round(benefit_total, 1),
            'equal_work', CASE WHEN benefit_device <= benefit_total THEN 'per device' ELSE 'total' END);
        benefit_pct := least(benefit_device, benefit_total);
    ELSE
        measured := measured || jsonb_build_object('equal_work', 'total');
        benefit_pct := benefit_total;
    END IF;
    benefit_pct := round(greatest(-100, least(100, benefit_pct)), 1);
END
$measure$;
REVOKE ALL ON FUNCTION tsmove.autopilot_measure(bigint, interval, numeric) FROM PUBLIC;

/*
 * Whether pg_tsmove.autopilot_window (HH:MM-HH:MM, may wrap midnight; ''
 * is always open) is open at `at`.  The time of day is the server's: the
 * timezone of postgresql.conf, not one a database owner set for the
 * step's database.
 */
CREATE FUNCTION tsmove.autopilot_window_open(win text, at timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $window$
DECLARE
    tz text := coalesce((SELECT f.setting FROM pg_file_settings f
                         WHERE f.name = 'timezone' AND f.applied
                         ORDER BY f.seqno DESC LIMIT 1), 'GMT');
    t time := (at AT TIME ZONE tz)::time;
    w_from time;
    w_to time;
BEGIN
    IF win IS NULL OR win = '' THEN
        RETURN true;
    END IF;
    w_from := split_part(win, '-', 1)::time;
    w_to := split_part(win, '-', 2)::time;
    IF w_from < w_to THEN
        RETURN t >= w_from AND t < w_to;
    END IF;
    RETURN t >= w_from OR t < w_to;
END
$window$;
REVOKE ALL ON FUNCTION tsmove.autopilot_window_open(text, timestamptz) FROM PUBLIC;

/*
 * The entries of a comma-separated list of (possibly double-quoted, dotted)
 * names, each as its parts, case-folded as SQL folds identifiers; a last
 * part * (unquoted) stays '*'.  The check hooks in autopilot.c accept only
 * lists this parses.
 */
CREATE FUNCTION tsmove.autopilot_name_list(list text)
RETURNS SETOF text[]
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $names$
    SELECT CASE WHEN trim(e[1]) LIKE '%.*'
                THEN parse_ident(left(trim(e[1]), -2)) || '*'::text
                ELSE parse_ident(trim(e[1])) END
    FROM regexp_matches(coalesce(list, ''), '((?:[^,"]|"[^"]*")+)', 'g') AS e
    WHERE trim(e[1]) <> ''
$names$;
REVOKE ALL ON FUNCTION tsmove.autopilot_name_list(text) FROM PUBLIC;

/* One candidate as autopilot_step() carries it (advise_candidates()' columns and three more). */
CREATE TYPE tsmove.autopilot_candidate AS (
    kind text, relation regclass, source_tablespace name, target_tablespace name, reason text,
    partner regclass, executions bigint, concurrent_ticks bigint, evidence_mb numeric,
    score_mb numeric, relation_mb numeric, source_device text, source_util_pct numeric,
    target_device text, target_util_pct numeric, estimated_copy_time interval, command text,
    assumptions text, read_share_pct numeric, benefit_pct numeric, source_util_after_pct numeric,
    target_util_after_pct numeric, source_await_ms numeric, source_await_after_ms numeric,
    capacity_gain_pct numeric, coaccess_mb_separated numeric, last_evidence timestamptz,
    verdict_code text, verdict text, relation_bytes bigint, relation_owner name,
    nspname name, bare_name name, table_name name);

/*
 * tsmove.autopilot_step(act, ...): one step of the autopilot in this
 * database, run by its step worker (src/autopilot/pilot.c) as the
 * bootstrap superuser; the arguments after `act` are what the other
 * databases reported in this cycle.  In order:
 *  1. follow up its own decisions: a started move that ended gets a done
 *     or failed row; a done row whose window after is over gets its
 *     measured outcome and verdict; a move that brought less than half its
 *     predicted benefit stops the autopilot (a stopped row);
 *  2. weigh the candidates (tsmove.advise_candidates() over
 *     pg_tsmove.autopilot_evidence), then its policies: never-move list,
 *     allowed targets, relations it moved within pg_tsmove.autopilot_hold,
 *     shares that do not come from the sampler's sums yet (after a
 *     start-up, until they cover the window and a time constant), the
 *     least benefit; log why the relations it will not move are not
 *     moved (look pass only);
 *  3. when `act`: unless stopped, outside the window, waiting for fresh
 *     evidence after the last move, or past a daily limit (each logged as
 *     skipped), propose the best candidate or start it: tsmove.move() as
 *     the relation's owner (SET LOCAL ROLE), so it needs what a person
 *     would: EXECUTE on tsmove.move() and CREATE on the target.
 * Answers its best candidate's benefit (NULL if none) and what the pilot
 * sums over databases.
 */
CREATE FUNCTION tsmove.autopilot_step(act boolean,
                                      in_flight_elsewhere boolean,
                                      cluster_last_finished timestamptz,
                                      cluster_moves_today integer,
                                      cluster_bytes_today bigint,
                                      stopped_db oid,
                                      OUT best_benefit double precision,
                                      OUT in_flight boolean,
                                      OUT last_finished timestamptz,
                                      OUT moves_today integer,
                                      OUT bytes_today bigint,
                                      OUT stopped boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $step$
DECLARE
    autopilot_mode text := current_setting('pg_tsmove.autopilot');
    evidence_window interval := make_interval(secs => (SELECT s.setting::double precision FROM pg_settings s WHERE s.name = 'pg_tsmove.autopilot_evidence'));
    settle_time interval := make_interval(secs => (SELECT s.setting::double precision FROM pg_settings s WHERE s.name = 'pg_tsmove.relation_map_refresh'));
    hold_time interval := make_interval(secs => (SELECT s.setting::double precision FROM pg_settings s WHERE s.name = 'pg_tsmove.autopilot_hold'));
    min_benefit numeric := current_setting('pg_tsmove.autopilot_min_benefit')::numeric;
    min_read numeric := current_setting('pg_tsmove.autopilot_min_read_mb')::numeric;
    max_moves integer := current_setting('pg_tsmove.autopilot_max_moves_per_day')::integer;
    max_bytes bigint := (SELECT s.setting::bigint FROM pg_settings s WHERE s.name = 'pg_tsmove.autopilot_max_mb_per_day') * 1048576;
    rate numeric := nullif(current_setting('pg_tsmove.autopilot_max_rate_mb')::numeric, 0);
    win text := current_setting('pg_tsmove.autopilot_window');
    targets name[] := ARRAY(SELECT t[1] FROM tsmove.autopilot_name_list(current_setting('pg_tsmove.autopilot_targets')) t);
    never_list text := current_setting('pg_tsmove.autopilot_never_move');
    d record;
    c record;
    best record;
    have_best boolean := false;
    best_rel regclass;
    acceptable jsonb[] := '{}';
    i integer;
    code text;
    why text;
    m record;
    logged regclass[] := '{}';
    new_job bigint;
    win_from time;
    win_to time;
    blocker_code text;
    blocker text;
    shares_followed boolean;
    shares_why text;
BEGIN
    -- 1. follow-ups
    FOR d IN SELECT s.decision_id, s.job_id, s.relid, s.relname, s.kind, s.source_tablespace,
                    s.target_tablespace, s.relation_bytes, s.predicted_benefit_pct, s.evidence,
                    j.state, j.error
             FROM tsmove.decision s
             JOIN tsmove.job j ON j.job_id = s.job_id
             WHERE s.action = 'started' AND j.state IN ('done', 'failed', 'cancelled')
               AND NOT EXISTS (SELECT FROM tsmove.decision o
                               WHERE o.job_id = s.job_id AND o.action IN ('done', 'failed'))
    LOOP
        PERFORM tsmove.autopilot_log(CASE d.state WHEN 'done' THEN 'done' ELSE 'failed' END,
                                     d.relid, d.relname, d.kind, d.source_tablespace, d.target_tablespace,
                                     d.relation_bytes, 'job_' || d.state,
                                     CASE d.state WHEN 'done' THEN format('job %s finished; its outcome is measured over %s of history, from %s after its end (pg_tsmove.autopilot_evidence, to let it settle)', d.job_id, evidence_window, evidence_window)
                                          ELSE format('job %s ended %s: %s', d.job_id, d.state, coalesce(d.error, 'no error recorded')) END,
                                     d.predicted_benefit_pct, d.evidence, d.job_id);
    END LOOP;
    FOR d IN SELECT s.decision_id, s.job_id, s.relname, s.predicted_benefit_pct
             FROM tsmove.decision s
             JOIN tsmove.job j ON j.job_id = s.job_id
             WHERE s.action = 'done' AND s.measured_at IS NULL
               AND j.finished_at + 2 * evidence_window
                   + make_interval(secs => (SELECT s.setting::double precision FROM pg_settings s WHERE s.name = 'pg_tsmove.relation_map_refresh')) < now()
    LOOP
        SELECT * INTO m FROM tsmove.autopilot_measure(d.job_id, evidence_window);
        UPDATE tsmove.decision
        SET measured_at = now(), measured_benefit_pct = m.benefit_pct, measured = m.measured,
            verdict = CASE WHEN m.benefit_pct IS NULL THEN 'not measurable'
                           WHEN m.benefit_pct >= 0.5 * d.predicted_benefit_pct AND m.benefit_pct > 0 THEN 'helped'
                           ELSE 'did not help' END
        WHERE decision_id = d.decision_id;
        IF m.benefit_pct IS NOT NULL AND NOT (m.benefit_pct >= 0.5 * d.predicted_benefit_pct AND m.benefit_pct > 0) THEN
            PERFORM tsmove.autopilot_log('stopped', NULL, NULL, NULL, NULL, NULL, NULL, 'benefit_missing',
                format('job %s (%s) was predicted to take %s points off the busier device and measured %s: the autopilot makes no more moves until SELECT tsmove.autopilot_resume()',
                       d.job_id, d.relname, d.predicted_benefit_pct, m.benefit_pct),
                NULL, NULL, d.job_id);
        END IF;
    END LOOP;

    SELECT bool_or(j.state NOT IN ('done', 'failed', 'cancelled')) INTO in_flight
    FROM tsmove.decision s JOIN tsmove.job j ON j.job_id = s.job_id WHERE s.action = 'started';
    in_flight := coalesce(in_flight, false);
    SELECT max(j.finished_at) INTO last_finished
    FROM tsmove.decision s JOIN tsmove.job j ON j.job_id = s.job_id WHERE s.action = 'started';
    SELECT count(*), coalesce(sum(s.relation_bytes), 0) INTO moves_today, bytes_today
    FROM tsmove.decision s WHERE s.action = 'started' AND s.decided_at > now() - interval '1 day';
    SELECT s.action = 'stopped' INTO stopped
    FROM tsmove.decision s WHERE s.action IN ('stopped', 'resumed')
    ORDER BY s.decision_id DESC LIMIT 1;
    stopped := coalesce(stopped, false);
    IF autopilot_mode = 'off' THEN
        RETURN;
    END IF;
    -- the log keeps what it did for good, what it did not do for 30 days
    IF NOT act THEN
        DELETE FROM tsmove.decision
        WHERE action IN ('skipped', 'proposed') AND last_seen_at < now() - interval '30 days';
    END IF;

    BEGIN   -- an error from here on is logged, not only in the server log
    -- 2. the candidates, then the policies
    -- Until the sampler has followed the reads and writes for a time
    -- constant since the server started, advise_candidates() takes the
    -- shares from the counters since the statistics reset, which a clean
    -- restart keeps: they may be another load's, so no move rests on them;
    -- nor until it has followed them for the whole window, whose history
    -- (kept too) would otherwise weigh the tablespaces by reads the sums
    -- have not seen.
    SELECT coalesce(bool_and(x.followed_s >= greatest(x.time_constant_s, extract(epoch FROM evidence_window))), false),
           CASE WHEN count(*) = 0
                THEN 'the sampler has no sums of reads and writes yet'
                ELSE format('the sampler has followed reads and writes for %s s since the server started, and the shares over %s need %s s (the window, and a time constant of the sums)',
                            round(min(x.followed_s)::numeric), evidence_window,
                            round(greatest(max(x.time_constant_s), extract(epoch FROM evidence_window)))) END
             || ': until then they would come from the counters since the statistics reset, which a restart keeps and may be of another load'
    INTO shares_followed, shares_why
    FROM tsmove.tablespace_recent_io(evidence_window) x;
    FOR c IN SELECT x.*, n.nspname, cl.relname AS bare_name, tbl.relname AS table_name
             FROM tsmove.advise_candidates(min_read, evidence_window) x
             JOIN pg_class cl ON cl.oid = x.relation::oid
             JOIN pg_namespace n ON n.oid = cl.relnamespace
             LEFT JOIN pg_index ix ON ix.indexrelid = cl.oid
             LEFT JOIN pg_class tbl ON tbl.oid = ix.indrelid AND tbl.relnamespace = cl.relnamespace
             ORDER BY (x.verdict_code IS NULL) DESC, x.benefit_pct DESC NULLS LAST, x.score_mb DESC
    LOOP
        -- a tablespace it may not move into is not a candidate at all
        IF cardinality(targets) > 0 AND NOT (c.target_tablespace = ANY (targets)) THEN
            CONTINUE;
        END IF;
        code := c.verdict_code;
        why := c.verdict;
        -- never-move entries name a table (its indexes and TOAST with it) or an index
        IF code IS NULL AND EXISTS (
               SELECT FROM tsmove.autopilot_name_list(never_list) n
               CROSS JOIN LATERAL (VALUES (c.nspname, c.bare_name), (c.nspname, c.table_name)) AS r(nsp, rel)
               WHERE r.rel IS NOT NULL
                 AND CASE cardinality(n)
                     WHEN 2 THEN n[1] = r.nsp AND n[2] IN (r.rel, '*')
                     WHEN 3 THEN n[1] = current_database() AND n[2] = r.nsp AND n[3] IN (r.rel, '*')
                     ELSE false END) THEN
            code := 'never_move';
            why := format('%s is in pg_tsmove.autopilot_never_move', c.relation);
        END IF;
        IF code IS NULL THEN
            SELECT format('the autopilot moved %s at %s (job %s); it stays there until %s (pg_tsmove.autopilot_hold)',
                          c.relation, date_trunc('second', s.decided_at), s.job_id, date_trunc('second', s.decided_at + hold_time))
            INTO why
            FROM tsmove.decision s
            WHERE s.relid = c.relation::oid AND s.action IN ('started', 'done') AND s.decided_at > now() - hold_time
            ORDER BY s.decision_id DESC LIMIT 1;
            IF FOUND THEN
                code := 'held';
            ELSE
                why := NULL;
            END IF;
        END IF;
        IF code IS NULL AND NOT shares_followed THEN
            code := 'shares_not_recent';
            why := shares_why;
        END IF;
        IF code IS NULL AND EXISTS (
               SELECT FROM tsmove.decision s
               WHERE s.relid = c.relation::oid AND s.target_tablespace = c.target_tablespace
                 AND s.action = 'skipped' AND s.reason_code = 'move_refused'
                 AND s.last_seen_at > now() - evidence_window) THEN
            -- refused lately (logged then): others go first until a window has passed
            CONTINUE;
        END IF;
        IF code IS NULL AND c.benefit_pct < min_benefit THEN
            code := 'below_min_benefit';
            why := format('predicted benefit %s points of utilisation (%s at %s%%, %s after; %s at %s%%, %s after), below pg_tsmove.autopilot_min_benefit = %s',
                          c.benefit_pct, c.source_device, c.source_util_pct, c.source_util_after_pct,
                          c.target_device, c.target_util_pct, c.target_util_after_pct, min_benefit);
        END IF;
        IF code IS NULL THEN
            IF NOT have_best THEN
                best := c;
                best_rel := c.relation;
                have_best := true;
            END IF;
            acceptable := acceptable || to_jsonb(c);
            CONTINUE;
        END IF;
        -- log why not (look pass; not for the relation it will move)
        -- (the most promising reason per relation, ten relations at most)
        IF NOT act AND cardinality(logged) < 10 AND best_rel IS DISTINCT FROM c.relation
           AND NOT (c.relation = ANY (logged)) THEN
            PERFORM tsmove.autopilot_log('skipped', c.relation::oid, c.relation::text, c.kind,
                                         c.source_tablespace, c.target_tablespace, c.relation_bytes,
                                         code, why, c.benefit_pct, to_jsonb(c), NULL);
            logged := logged || c.relation;
        END IF;
    END LOOP;
    IF NOT have_best THEN
        RETURN;
    END IF;
    best_benefit := best.benefit_pct;
    IF NOT act THEN
        RETURN;
    END IF;

    -- 3. act, unless something says not now
    IF stopped OR stopped_db IS NOT NULL THEN
        blocker_code := 'stopped';
        blocker := format('the autopilot stopped itself after a move that did not bring its benefit (see the stopped row%s); SELECT tsmove.autopilot_resume() there lets it move again',
                          CASE WHEN stopped THEN '' ELSE ' in database ' || coalesce((SELECT datname FROM pg_database WHERE oid = stopped_db)::text, stopped_db::text) END);
    ELSIF in_flight OR in_flight_elsewhere THEN
        RETURN;
    ELSIF NOT tsmove.autopilot_window_open(win) THEN
        blocker_code := 'outside_window';
        blocker := format('outside pg_tsmove.autopilot_window (%s; server time now %s)', win,
                          to_char(now() AT TIME ZONE coalesce((SELECT f.setting FROM pg_file_settings f
                                                               WHERE f.name = 'timezone' AND f.applied
                                                               ORDER BY f.seqno DESC LIMIT 1), 'GMT'), 'HH24:MI'));
    END IF;
    -- the last move must settle and be measured before the next one: its
    -- window after must not hold another copy
    IF blocker_code IS NULL AND greatest(cluster_last_finished, last_finished)
                                > now() - 2 * evidence_window - settle_time THEN
        blocker_code := 'waiting_for_evidence';
        blocker := format('the last move ended at %s; the autopilot measures it over the window that starts %s after it, and moves again only after that (pg_tsmove.autopilot_evidence)',
                          date_trunc('second', greatest(cluster_last_finished, last_finished)),
                          evidence_window + settle_time);
    END IF;
    IF blocker_code IS NULL AND greatest(cluster_moves_today, moves_today) >= max_moves THEN
        blocker_code := 'daily_moves';
        blocker := format('%s moves started in the last 24 hours, the most pg_tsmove.autopilot_max_moves_per_day allows',
                          greatest(cluster_moves_today, moves_today));
    END IF;
    IF blocker_code IS NOT NULL THEN
        PERFORM tsmove.autopilot_log('skipped', best.relation::oid, best.relation::text, best.kind,
                                     best.source_tablespace, best.target_tablespace, best.relation_bytes,
                                     blocker_code, blocker, best.benefit_pct, to_jsonb(best), NULL);
        RETURN;
    END IF;
    -- the acceptable candidates, best first: one that is refused or too big
    -- for the day's limit does not hold up the next
    FOR i IN 1 .. cardinality(acceptable) LOOP
        best := jsonb_populate_record(NULL::tsmove.autopilot_candidate, acceptable[i]);
        IF max_bytes > 0 AND greatest(cluster_bytes_today, bytes_today) + best.relation_bytes > max_bytes THEN
            PERFORM tsmove.autopilot_log('skipped', best.relation::oid, best.relation::text, best.kind,
                                         best.source_tablespace, best.target_tablespace, best.relation_bytes,
                                         'daily_bytes',
                                         format('moving %s (%s) would take the last 24 hours past pg_tsmove.autopilot_max_mb_per_day (%s moved)',
                                                best.relation, pg_size_pretty(best.relation_bytes),
                                                pg_size_pretty(greatest(cluster_bytes_today, bytes_today))),
                                         best.benefit_pct, acceptable[i], NULL);
            CONTINUE;
        END IF;
        IF autopilot_mode = 'propose' THEN
            PERFORM tsmove.autopilot_log('proposed', best.relation::oid, best.relation::text, best.kind,
                                         best.source_tablespace, best.target_tablespace, best.relation_bytes,
                                         'proposal', best.reason || format('; predicted: %s points off the busier device', best.benefit_pct),
                                         best.benefit_pct, acceptable[i], NULL);
            RETURN;
        END IF;
        BEGIN
            EXECUTE format('SET LOCAL ROLE %I', best.relation_owner);
            new_job := tsmove.move(best.relation, best.target_tablespace, 'online', rate, false);
            RESET ROLE;
        EXCEPTION WHEN OTHERS THEN
            PERFORM tsmove.autopilot_log('skipped', best.relation::oid, best.relation::text, best.kind,
                                         best.source_tablespace, best.target_tablespace, best.relation_bytes,
                                         'move_refused',
                                         format('tsmove.move(%L, %L) as the owner, %s, failed: %s', best.relation::text,
                                                best.target_tablespace, best.relation_owner, SQLERRM),
                                         best.benefit_pct, acceptable[i], NULL);
            CONTINUE;
        END;
        PERFORM tsmove.autopilot_log('started', best.relation::oid, best.relation::text, best.kind,
                                     best.source_tablespace, best.target_tablespace, best.relation_bytes,
                                     'started', best.reason || format('; predicted: %s points off the busier device', best.benefit_pct),
                                     best.benefit_pct, acceptable[i], new_job);
        in_flight := true;
        RETURN;
    END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS why = MESSAGE_TEXT;
        PERFORM tsmove.autopilot_log('skipped', NULL, NULL, NULL, NULL, NULL, NULL, 'error',
                                     format('the autopilot''s step failed: %s', why), NULL, NULL, NULL);
        best_benefit := NULL;
    END;
END
$step$;
REVOKE ALL ON FUNCTION tsmove.autopilot_step(boolean, boolean, timestamptz, integer, bigint, oid) FROM PUBLIC;

/* tsmove.autopilot_resume(): let the autopilot move again after it stopped itself. */
CREATE FUNCTION tsmove.autopilot_resume()
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $resume$
BEGIN
    IF NOT EXISTS (SELECT FROM tsmove.decision WHERE action IN ('stopped', 'resumed'))
       OR (SELECT action FROM tsmove.decision WHERE action IN ('stopped', 'resumed')
           ORDER BY decision_id DESC LIMIT 1) <> 'stopped' THEN
        RAISE EXCEPTION 'the autopilot is not stopped in this database'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'tsmove.decisions shows a stopped row when a move did not bring its benefit; only then is there something to resume.';
    END IF;
    RETURN tsmove.autopilot_log('resumed', NULL, NULL, NULL, NULL, NULL, NULL, 'resumed',
                                format('resumed by %s', current_user), NULL, NULL, NULL);
END
$resume$;
COMMENT ON FUNCTION tsmove.autopilot_resume() IS
    'let the autopilot move again after a move that did not bring its benefit stopped it';
REVOKE ALL ON FUNCTION tsmove.autopilot_resume() FROM PUBLIC;

REVOKE ALL ON FUNCTION tsmove.advise_candidates(pg_catalog.numeric, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.advise(pg_catalog.numeric, pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.advise_candidates(pg_catalog.numeric, pg_catalog.interval) TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.advise(pg_catalog.numeric, pg_catalog.interval) TO pg_monitor;

