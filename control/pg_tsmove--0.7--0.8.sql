-- pg_tsmove 0.7 -> 0.8: the autopilot's prediction counts the
-- interference of interleaved streams, and its measure the work per device.
--   tsmove.advise_candidates()  a move that leaves a device with one
--                               relation's reads, of a device that served
--                               several at once, predicts that device's
--                               reading at 1 - 0.2 r of its busy time
--                               interleaved; `assumptions` says whether it
--                               did.  A relation's share of its tablespace
--                               counts every database's reads there, its
--                               share of the writes every database's rows
--                               written there (both over the horizon, and
--                               none where there were none: the counters
--                               since the statistics reset only until the
--                               sampler's sums count, after a start-up)
--   tsmove.tablespace_recent_io() (new) those reads: the recent sums per
--                               tablespace over every database
--   tsmove.autopilot_measure()  the lesser of equal work per device (from
--                               the moved relation's share of the source's
--                               reads: a new argument, else the autopilot's
--                               decision's) and by the total work;
--                               `measured` says which, and has both
--   tsmove.relation_recent_io(), tablespace_recent_io(): last_written,
--                               when rows were last changed; the advice
--                               counts rows changed only where it is
--                               within the horizon
--   tsmove.autopilot_step()     no move until the sampler has followed
--                               reads and writes for the window and a
--                               time constant (until then the shares
--                               would come from the counters since the
--                               statistics reset)

\echo Use "ALTER EXTENSION pg_tsmove UPDATE TO '0.8'" to load this file. \quit

/*
 * Each relation's recent I/O (recent_io.c): now with when its rows were
 * last changed, and the tablespace its sums were counted in (they restart
 * when it is seen in another).
 */
DROP FUNCTION tsmove.relation_recent_io(interval);
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
REVOKE ALL ON FUNCTION tsmove.relation_recent_io(pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.relation_recent_io(pg_catalog.interval) TO pg_monitor;

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
REVOKE ALL ON FUNCTION tsmove.tablespace_recent_io(pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tsmove.tablespace_recent_io(pg_catalog.interval) TO pg_monitor;

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
CREATE OR REPLACE FUNCTION tsmove.advise_candidates(min_read_mb numeric DEFAULT 64,
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
DROP FUNCTION tsmove.autopilot_measure(bigint, interval);
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
 * The autopilot's step: as 0.5's, and no move rests on shares from the
 * counters since the statistics reset (0.8).
 */
CREATE OR REPLACE FUNCTION tsmove.autopilot_step(act boolean,
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
