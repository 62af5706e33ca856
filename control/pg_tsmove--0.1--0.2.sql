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

/*
 * Monitoring (src/monitor.c, tsio.c, relmap.c, coaccess.c, history.c,
 * sampler.c).  The C functions return raw rows; the views and functions
 * below name, join and derive.  Everything here is readable by pg_monitor;
 * the resets are for superusers (or whom they grant).
 */

/* Per-tablespace sample: device, logical and physical I/O (tsio.c). */
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
 * tsmove.advise(): ranked recommendations.  Three kinds, each one
 * relation to move, the best target for it, never a target on a busier,
 * slower or narrower device, nor one sharing a disk with the source:
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
 * (striping already spreads them: Nicola & Rizvi, Larson).
 */
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
               assumptions text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $advise$
#variable_conflict use_column
DECLARE
    block_bytes numeric := current_setting('block_size')::numeric;
    min_bytes numeric;
    rate_mb numeric;
    tick_s numeric;
    observed_s numeric;
    coaccess_since timestamptz;
BEGIN
    IF min_read_mb IS NULL OR min_read_mb < 0 THEN
        RAISE EXCEPTION 'min_read_mb must be zero or more'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass the volume, in MB read from outside shared buffers, below which a move is not worth its copy (default 64).';
    END IF;
    IF horizon IS NULL OR horizon <= interval '0' THEN
        RAISE EXCEPTION 'horizon must be a positive interval'
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

    RETURN QUERY
    WITH
    -- every tablespace on a known device, with its load over the horizon
    spc AS MATERIALIZED (
        SELECT s.spcoid, t.spcname, s.device, s.device_number,
               coalesce(string_to_array(nullif(s.disks, ''), ','), '{}'::text[]) AS disks,
               coalesce(s.rotational, true) AS rotational,
               s.free_bytes, s.util_pct AS util_now
        FROM tsmove.tablespace_io_stats() s
        JOIN pg_tablespace t ON t.oid = s.spcoid
        WHERE s.device IS NOT NULL AND t.spcname <> 'pg_global'),
    hist AS (
        SELECT h.spcoid, h.device,
               sum(h.device_io_ms) / nullif(sum(extract(epoch FROM h.end_time - h.start_time)) * 10, 0) AS util,
               count(*) AS nrows
        FROM tsmove.tablespace_io_history_rows() h
        WHERE h.device_valid AND h.end_time > now() - horizon
        GROUP BY h.spcoid, h.device),
    dev AS MATERIALIZED (
        SELECT spc.*,
               least(100, coalesce(hist.util, spc.util_now))::numeric AS util,
               coalesce(hist.nrows, 0) AS history_rows,
               greatest(cardinality(spc.disks), 1) AS parallelism
        FROM spc LEFT JOIN hist ON hist.spcoid = spc.spcoid AND hist.device = spc.device),
    -- relations this database could move, with their reads since the statistics reset
    rel AS MATERIALIZED (
        SELECT c.oid, c.relname, n.nspname, c.relkind,
               format('%I.%I', n.nspname, c.relname) AS qualified,
               CASE c.reltablespace WHEN 0 THEN d.dattablespace ELSE c.reltablespace END AS spcoid,
               greatest(pg_stat_get_blocks_fetched(c.oid) - pg_stat_get_blocks_hit(c.oid), 0) AS blocks_read
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_database d ON d.datname = current_database()
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
    -- co-accessed pairs on one device, with the evidence in blocks
    pair AS (
        SELECT p.rel_a::oid AS a, p.rel_b::oid AS b, p.executions, p.concurrent_ticks,
               p.blocks_read_a, p.blocks_read_b, p.coaccess_weight, p.coaccess_weight_read,
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
                                   (pr.b, pr.a, pr.blocks_read_b)) AS m(relid, partner, pair_reads)
        WHERE pr.evidence_blocks * block_bytes >= min_bytes AND pr.evidence_blocks > 0),
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
                    THEN -m.pair_reads::numeric ELSE pg_table_size(m.relid)::numeric END AS preference
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
               0::numeric AS preference
        FROM rel r
        JOIN dev src ON src.spcoid = r.spcoid
        JOIN dev tgt ON tgt.device <> src.device AND NOT (tgt.disks && src.disks)
        WHERE r.blocks_read * block_bytes >= min_bytes AND r.blocks_read > 0
          AND ((src.util >= 50 AND tgt.util <= src.util / 2)
               OR (src.rotational AND NOT tgt.rotational))),
    candidate AS (
        SELECT c.*, pg_table_size(c.relid) AS size_bytes,
               src.device AS src_device, src.util AS src_util, src.rotational AS src_rot,
               src.parallelism AS src_par, src.history_rows AS src_rows,
               tgt.device AS tgt_device, tgt.util AS tgt_util, tgt.rotational AS tgt_rot,
               tgt.parallelism AS tgt_par, tgt.free_bytes AS tgt_free
        FROM (SELECT * FROM coaccess_candidate UNION ALL SELECT * FROM single_candidate) c
        JOIN dev src ON src.spcoid = c.src_spc
        JOIN dev tgt ON tgt.spcoid = c.tgt_spc
        -- never busier, never slower, never fewer disks (unless faster), and room for the copy
        WHERE tgt.util <= src.util
          AND NOT (NOT src.rotational AND tgt.rotational)
          AND (tgt.parallelism >= src.parallelism OR (src.rotational AND NOT tgt.rotational))
          AND tgt.free_bytes >= pg_table_size(c.relid) * 1.2),
    best AS (
        -- per pair the preferred relation, per relation the best target and kind
        SELECT DISTINCT ON (c.relid) c.*
        FROM (SELECT DISTINCT ON (least(c.relid, coalesce(c.partner, c.relid)),
                                  greatest(c.relid, coalesce(c.partner, c.relid)), c.kind)
                     c.*
              FROM candidate c
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
                   OR (o.score_bytes = b.score_bytes AND o.relid < b.relid))))
    SELECT (row_number() OVER (ORDER BY b.score_bytes DESC, b.relid))::integer,
           b.kind,
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
                  'speed: the kernel''s rotational flag (%s %s, %s %s); parallelism: disks under the device (%s: %s, %s: %s); '
                  'co-access counted since %s; "outside shared buffers" includes reads the OS page cache served; '
                  'copy time %s, counting the page images in the WAL as the throttle does',
                  horizon, b.src_rows, b.src_device,
                  b.src_device, CASE WHEN b.src_rot THEN 'rotational' ELSE 'non-rotational' END,
                  b.tgt_device, CASE WHEN b.tgt_rot THEN 'rotational' ELSE 'non-rotational' END,
                  b.src_device, b.src_par, b.tgt_device, b.tgt_par,
                  coaccess_since,
                  CASE WHEN rate_mb > 0 THEN format('at pg_tsmove.max_rate_mb = %s MB/s', rate_mb)
                       ELSE 'not estimated: pg_tsmove.max_rate_mb = 0 (no ceiling: the pace depends on the load)' END)
    FROM kept b
    JOIN rel r ON r.oid = b.relid
    LEFT JOIN rel pr ON pr.oid = b.partner
    JOIN pg_tablespace ts ON ts.oid = b.src_spc
    JOIN pg_tablespace tt ON tt.oid = b.tgt_spc
    ORDER BY 1;
END
$advise$;
COMMENT ON FUNCTION tsmove.advise(numeric, interval) IS
    'ranked recommendations of relations to move, why, and the call to run';

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
REVOKE ALL ON FUNCTION tsmove.coaccess_reset() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.monitor_info() FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.advise(pg_catalog.numeric, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.report(pg_catalog.timestamptz, pg_catalog.interval) FROM PUBLIC;
REVOKE ALL ON tsmove.tablespace_io, tsmove.tablespace_io_history, tsmove.coaccess, tsmove.monitor_status FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.tablespace_io_stats() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.tablespace_io_history_rows() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.coaccess_pairs() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.monitor_info() TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.advise(pg_catalog.numeric, pg_catalog.interval) TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.report(pg_catalog.timestamptz, pg_catalog.interval) TO pg_monitor;
GRANT SELECT ON tsmove.tablespace_io, tsmove.tablespace_io_history, tsmove.coaccess, tsmove.monitor_status TO pg_monitor;
