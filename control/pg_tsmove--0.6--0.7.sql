-- pg_tsmove 0.6 -> 0.7: the autopilot's measured outcome counts work as
-- what the devices did.
--   tsmove.autopilot_measure()  work is the two devices' kB read and
--                               written per second, no longer blocks read
--                               from outside shared buffers (page-cache
--                               hits, a fresh copy's among them, counted
--                               as work); `measured` has <period>_<side>_kb_s
--                               instead of <period>_blocks_read_s.

\echo Use "ALTER EXTENSION pg_tsmove UPDATE TO '0.7'" to load this file. \quit

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
 * among them, as work); the measured benefit is the busier
 * device's utilisation before, less its utilisation after scaled to the
 * work before (max(U_s', U_t') * work before / work after): the same
 * quantity the prediction gives, at equal work, whether the workload
 * answered the move by doing more (closed) or by loading the disk less
 * (open).  NULL (not measurable) unless both devices have history in both
 * windows and the devices moved at least 80 kB/s in each, the work after
 * within 1/4 and 4 times the work before: a workload that stopped or
 * changed is no verdict on the move.  Clamped to [-100, 100].
 */
CREATE OR REPLACE FUNCTION tsmove.autopilot_measure(p_job bigint, evidence interval,
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
    benefit_pct := round(greatest(-100, least(100, before_max - after_max * work_before / work_after)), 1);
END
$measure$;
REVOKE ALL ON FUNCTION tsmove.autopilot_measure(bigint, interval) FROM PUBLIC;
