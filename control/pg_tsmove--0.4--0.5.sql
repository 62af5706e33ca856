-- pg_tsmove 0.4 -> 0.5: the autopilot.
--   tsmove.advise_candidates()  every candidate move advise() weighed, the
--                               rejected ones with the reason, and for each
--                               its predicted benefit;
--   tsmove.advise()             the accepted ones, ranked, with the
--                               predicted benefit appended;
--   tsmove.decision, tsmove.decisions   the autopilot's log;
--   tsmove.autopilot_step()     one look (and maybe one act) of the
--                               autopilot in this database, run by its
--                               worker (src/autopilot/pilot.c);
--   tsmove.autopilot_resume()   after the autopilot stopped itself.

\echo Use "ALTER EXTENSION pg_tsmove UPDATE TO '0.5'" to load this file. \quit

/*
 * tsmove.advise_candidates(min_read_mb, horizon): every (relation, target)
 * pair advise() considers, with `verdict_code` and `verdict` saying why one
 * is not recommended (NULL: recommended; then it is what advise() lists).
 * The kinds and the choice of relation and target are advise()'s (see its
 * comment in 0.2).  New in 0.5: a co-accessed pair last seen before the
 * horizon, or a source device with no load history in it, is stale; and
 * each candidate carries a predicted benefit, from a share-of-busy-time
 * model over the horizon's history:
 *   U_s, U_t   utilisation of the source and target devices (%)
 *   r          the source device's read share of its busy time
 *              (read ms / (read + write ms))
 *   f          the relation's share of the blocks read from outside shared
 *              buffers on the source device (its reads since the
 *              statistics reset, over every database's reads there since
 *              tsmove.tablespace_io's reset, or this database's if more)
 *   moved      = U_s * r * f, the busy time that follows the relation
 *   after      U_s' = U_s - moved, U_t' = U_t + moved (same speed)
 *   benefit    = max(U_s, U_t) - max(U_s', U_t'): points of utilisation the
 *              busier device loses at today's load
 *   await      the source's await scaled as in an M/M/1 queue:
 *              await' = await * (1 - U_s) / (1 - U_s')
 *   capacity   max(U_s, U_t) / max(U_s', U_t') - 1: how much more of
 *              today's work the two devices could serve (bottleneck law)
 * It ignores what co-access costs beyond busy time (seeks between the two
 * relations on a rotational disk, which separation also saves), writes of
 * the relation, and other databases' reads: an estimate, not a promise.
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
    declared_disks text := coalesce(current_setting('pg_tsmove.device_disks', true), '');
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
               coalesce(hist.nrows, 0) AS history_rows,
               coalesce(dd.ndisks, greatest(cardinality(spc.disks), 1)) AS parallelism
        FROM spc
        LEFT JOIN hist ON hist.spcoid = spc.spcoid AND hist.device = spc.device
        LEFT JOIN (SELECT declared.device, max(declared.ndisks) AS ndisks
                   FROM declared GROUP BY declared.device) dd ON dd.device = spc.device),
    -- relations this database could move, with their reads since the statistics reset
    rel AS MATERIALIZED (
        SELECT c.oid, c.relname, n.nspname, c.relkind,
               format('%I.%I', n.nspname, c.relname) AS qualified,
               pg_get_userbyid(c.relowner) AS owner,
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
    -- what was read from each device, for each relation's share: every
    -- database's reads there (tsmove.tablespace_io's totals), or this
    -- one's if its statistics go back further
    device_reads AS (
        SELECT dev.device,
               greatest(sum(r.blocks_read),
                        (SELECT sum(a.all_blocks_read) FROM spc a WHERE a.device = dev.device)) AS blocks_read
        FROM rel r JOIN dev ON dev.spcoid = r.spcoid
        GROUP BY dev.device),
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
               least(1, r.blocks_read::numeric / nullif(dr.blocks_read, 0)) AS read_share_f
        FROM (SELECT * FROM coaccess_candidate UNION ALL SELECT * FROM single_candidate) c
        JOIN rel r ON r.oid = c.relid
        JOIN dev src ON src.spcoid = c.src_spc
        JOIN dev tgt ON tgt.spcoid = c.tgt_spc
        LEFT JOIN device_reads dr ON dr.device = src.device),
    modelled AS (
        SELECT w.*, m.moved, w.src_util - m.moved AS src_after, w.tgt_util + m.moved AS tgt_after
        FROM weighed w
        CROSS JOIN LATERAL (SELECT w.src_util * w.src_read_share * coalesce(w.read_share_f, 0) AS moved) m),
    candidate AS (
        SELECT m.*,
               greatest(m.src_util, m.tgt_util) - greatest(m.src_after, m.tgt_after) AS benefit,
               -- the first reason not to, in the order a DBA would check them
               CASE
               WHEN m.kind = 'co-access' AND (m.evidence_bytes < min_bytes OR m.evidence_bytes <= 0) THEN 'evidence_below_min'
               WHEN m.last_seen IS NULL OR m.last_seen < now() - horizon OR m.src_rows = 0 THEN 'stale'
               WHEN m.tgt_util > m.src_util THEN 'target_busier'
               WHEN NOT m.src_rot AND m.tgt_rot THEN 'target_slower'
               WHEN m.tgt_par < m.src_par AND NOT (m.src_rot AND NOT m.tgt_rot) THEN 'target_fewer_disks'
               WHEN m.tgt_free IS NULL OR m.tgt_free < m.size_bytes * 1.2 THEN 'target_full'
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
                  'benefit: share-of-busy-time model, the relation takes %s%% of the blocks read from %s (every database) and %s%% of %s''s busy time is reading, '
                  'so about %s points of its %s%% follow the relation to %s (same speed assumed); await scaled as in an M/M/1 queue; '
                  'seeks saved by separating co-accessed relations and the relation''s writes are not counted',
                  horizon, b.src_rows, b.src_device,
                  b.src_device, CASE WHEN b.src_rot THEN 'rotational' ELSE 'non-rotational' END,
                  b.tgt_device, CASE WHEN b.tgt_rot THEN 'rotational' ELSE 'non-rotational' END,
                  b.src_device, b.src_par, b.tgt_device, b.tgt_par,
                  CASE WHEN declared_disks <> '' THEN ', pg_tsmove.device_disks = ' || declared_disks ELSE '' END,
                  coaccess_since,
                  CASE WHEN rate_mb > 0 THEN format('at pg_tsmove.max_rate_mb = %s MB/s', rate_mb)
                       ELSE 'not estimated: pg_tsmove.max_rate_mb = 0 (no ceiling: the pace depends on the load)' END,
                  round(coalesce(b.read_share_f, 0) * 100, 1), b.src_device,
                  round(b.src_read_share * 100, 1), b.src_device,
                  round(b.moved, 1), round(b.src_util, 1), b.tgt_device),
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

/* tsmove.advise(): the recommended candidates, ranked (0.2's columns, then the predicted benefit). */
DROP FUNCTION tsmove.advise(numeric, interval);
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
 * the blocks read from outside shared buffers per second in every
 * tablespace on the two devices; the measured benefit is the busier
 * device's utilisation before, less its utilisation after scaled to the
 * work before (max(U_s', U_t') * work before / work after): the same
 * quantity the prediction gives, at equal work, whether the workload
 * answered the move by doing more (closed) or by loading the disk less
 * (open).  NULL (not measurable) unless both devices have history in both
 * windows and each window read at least 10 blocks/s with the work after
 * within 1/4 and 4 times the work before: a workload that stopped or
 * changed is no verdict on the move.  Clamped to [-100, 100].
 */
CREATE FUNCTION tsmove.autopilot_measure(p_job bigint, evidence interval,
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
BEGIN
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
        GROUP BY w.period, d.side),
    work AS (
        SELECT w.period,
               sum(h.data_blocks_read + h.index_blocks_read) AS blocks,
               max(h.end_time) - min(h.start_time) AS span
        FROM win w
        JOIN tsmove.tablespace_io_history_rows() h
          ON h.device IN (SELECT device FROM devs)
         AND h.start_time >= w.w_start AND h.end_time <= w.w_end
        GROUP BY w.period)
    SELECT jsonb_object_agg(p.period || '_' || p.side || '_util_pct', round(p.util::numeric, 1))
             || jsonb_object_agg(p.period || '_' || p.side || '_await_ms', round(p.await_ms, 2))
             || jsonb_object_agg(p.period || '_' || p.side || '_history_rows', p.nrows)
             || coalesce((SELECT jsonb_object_agg(k.period || '_blocks_read_s',
                                                  round((k.blocks / nullif(extract(epoch FROM k.span), 0))::numeric, 1))
                          FROM work k), '{}'::jsonb)
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
    work_before := (measured ->> 'before_blocks_read_s')::numeric;
    work_after := (measured ->> 'after_blocks_read_s')::numeric;
    -- (blocks read/s are rounded to 0.1 in `measured`; the least of 10 makes that moot)
    IF work_before IS NULL OR work_after IS NULL OR work_before < 10 OR work_after < 10
       OR work_after / work_before NOT BETWEEN 0.25 AND 4 THEN
        RETURN;
    END IF;
    measured := measured || jsonb_build_object(
        'work_ratio', round(work_after / work_before, 2),
        'window_before', jsonb_build_array(j.started_at - evidence, j.started_at),
        'window_after', jsonb_build_array(j.finished_at + settle + evidence, j.finished_at + settle + 2 * evidence));
    benefit_pct := round(greatest(-100, least(100, before_max - after_max * work_before / work_after)), 1);
END
$measure$;
REVOKE ALL ON FUNCTION tsmove.autopilot_measure(bigint, interval) FROM PUBLIC;

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
 *     the least benefit; log why the relations it will not move are not
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
