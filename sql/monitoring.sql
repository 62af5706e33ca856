-- Monitoring: the SQL surface, its refusals and its privileges.
-- (The behaviour under real workloads is tested by test/test_monitoring.py.)

-- the GUCs, and the prefix stays reserved
SHOW pg_tsmove.track_coaccess;
SHOW pg_tsmove.sample_interval;
SHOW pg_tsmove.coaccess_sample_interval;
SHOW pg_tsmove.coaccess_max_pairs;
SHOW pg_tsmove.history_interval;
SHOW pg_tsmove.history_size;
SHOW pg_tsmove.relation_map_size;
SHOW pg_tsmove.relation_map_refresh;
SHOW pg_tsmove.save_monitoring;
-- only a superuser may stop co-access tracking
CREATE ROLE regress_monitor_nobody;
SET ROLE regress_monitor_nobody;
SET pg_tsmove.track_coaccess = off;
RESET ROLE;

-- sample fast for the rest of this file
ALTER SYSTEM SET pg_tsmove.sample_interval = '100ms';
SELECT pg_catalog.pg_reload_conf();
DO $$
BEGIN
  -- wait until a sample covers both test tablespaces with a window
  FOR i IN 1 .. 300 LOOP
    EXIT WHEN (SELECT pg_catalog.count(*) FROM tsmove.tablespace_io
               WHERE tablespace IN ('regress_ts_a', 'regress_ts_b')
                 AND window_seconds IS NOT NULL) = 2;
    PERFORM pg_catalog.pg_sleep(0.05);
  END LOOP;
END
$$;

-- the views' columns
SELECT attname, pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
WHERE attrelid = 'tsmove.tablespace_io'::pg_catalog.regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
WHERE attrelid = 'tsmove.coaccess'::pg_catalog.regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
WHERE attrelid = 'tsmove.tablespace_io_history'::pg_catalog.regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
WHERE attrelid = 'tsmove.monitor_status'::pg_catalog.regclass AND attnum > 0 ORDER BY attnum;

-- every tablespace has a row; the in-place test tablespaces live in the
-- data directory, so they share its device (whatever the machine has)
SELECT tablespace,
       device IS NOT DISTINCT FROM (SELECT device FROM tsmove.tablespace_io
                                    WHERE tablespace = 'pg_default') AS on_data_directory_device,
       (device IS NULL) = (device_note IS NOT NULL) AS device_or_reason,
       window_seconds > 0 AS has_window,
       data_blocks_read >= 0 AND index_blocks_hit >= 0 AS has_totals,
       (device IS NULL) = (util_pct IS NULL) AS rates_iff_device,
       size >= 0 AS has_size
FROM tsmove.tablespace_io ORDER BY tablespace;
SELECT tablespace, same_device_as @> ARRAY['pg_default']::name[] OR device IS NULL AS shares_with_default
FROM tsmove.tablespace_io WHERE tablespace LIKE 'regress_ts_%' ORDER BY tablespace;
-- the sampler runs; the machinery's limits are the GUCs'
SELECT sampler_pid IS NOT NULL AS sampler_running, last_sample > pg_catalog.now() - interval '1 minute' AS recent,
       track_coaccess, coaccess_max_pairs, relation_map_size, history_size,
       coaccess_pairs >= 0 AS has_pairs_count
FROM tsmove.monitor_status;

-- co-access of a join in this database; a reset forgets it
SELECT tsmove.coaccess_reset() IS NOT NULL AS reset;
CREATE TABLE mon_a (id int PRIMARY KEY, v text);
CREATE TABLE mon_b (id int PRIMARY KEY, a_id int, v text);
INSERT INTO mon_a SELECT g, 'a' || g FROM pg_catalog.generate_series(1, 2000) g;
INSERT INTO mon_b SELECT g, g % 2000 + 1, 'b' || g FROM pg_catalog.generate_series(1, 4000) g;
ANALYZE mon_a, mon_b;
SELECT pg_catalog.count(*) FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
SELECT pg_catalog.count(*) FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
SELECT rel_a, rel_b, executions, coaccess_weight = blocks_a + blocks_b AS weight_is_blocks,
       coaccess_weight_read <= coaccess_weight AS read_part, same_device
FROM tsmove.coaccess
WHERE rel_a IN ('mon_a'::pg_catalog.regclass, 'mon_b'::pg_catalog.regclass)
  AND rel_b IN ('mon_a'::pg_catalog.regclass, 'mon_b'::pg_catalog.regclass);
-- statements that read one relation make no pair
SELECT pg_catalog.count(*) FROM mon_a;
SELECT pg_catalog.count(*) AS pairs_with_one_relation FROM tsmove.coaccess WHERE rel_a = rel_b;
-- a function reading mon_b for each row of mon_a: one execution reads both
CREATE FUNCTION mon_lookup(k int) RETURNS text LANGUAGE plpgsql STABLE
AS $$ BEGIN RETURN (SELECT v FROM mon_b WHERE id = k); END $$;
SELECT tsmove.coaccess_reset() IS NOT NULL AS reset;
SELECT pg_catalog.count(mon_lookup(id)) FROM mon_a;
SELECT rel_a, rel_b, executions FROM tsmove.coaccess
WHERE rel_a IN ('mon_a'::pg_catalog.regclass, 'mon_b'::pg_catalog.regclass)
  AND rel_b IN ('mon_a'::pg_catalog.regclass, 'mon_b'::pg_catalog.regclass);
-- errors caught inside, cursors, procedures that commit: counting goes on
DO $$
BEGIN
  FOR i IN 1 .. 3 LOOP
    BEGIN
      PERFORM pg_catalog.count(*) FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
      PERFORM 1 / (mon_a.id - mon_a.id) FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
    EXCEPTION WHEN division_by_zero THEN NULL;
    END;
  END LOOP;
END
$$;
BEGIN;
DECLARE mon_cursor CURSOR FOR SELECT mon_a.v, mon_b.v FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
FETCH 2 FROM mon_cursor \g /dev/null
FETCH 2 FROM mon_cursor \g /dev/null
CLOSE mon_cursor;
COMMIT;
CREATE PROCEDURE mon_commit_each() LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1 .. 3 LOOP
    PERFORM pg_catalog.count(*) FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
    COMMIT;
  END LOOP;
END
$$;
CALL mon_commit_each();
SELECT pg_catalog.count(*) FROM mon_a JOIN mon_b ON mon_b.a_id = mon_a.id;
-- 1 (function) + 3 (a statement that fails is not counted) + 1 (cursor)
-- + 3 (procedure) + 1 = 9
SELECT rel_a, rel_b, executions FROM tsmove.coaccess
WHERE rel_a IN ('mon_a'::pg_catalog.regclass, 'mon_b'::pg_catalog.regclass)
  AND rel_b IN ('mon_a'::pg_catalog.regclass, 'mon_b'::pg_catalog.regclass);
DROP PROCEDURE mon_commit_each();
DROP FUNCTION mon_lookup(int);
SELECT tsmove.coaccess_reset() IS NOT NULL AS reset;
SELECT pg_catalog.count(*) AS pairs_after_reset FROM tsmove.coaccess;
SELECT tsmove.tablespace_io_reset() AS io_reset \gset
SELECT pg_catalog.count(*) AS tablespaces_not_reset FROM tsmove.tablespace_io
WHERE stats_reset <> :'io_reset';

-- advise(): nothing to move with everything on one device
SELECT pg_catalog.count(*) AS recommendations FROM tsmove.advise();
SELECT pg_catalog.count(*) AS recommendations FROM tsmove.advise(min_read_mb => 0, horizon => '1 minute');
-- refusals: specific, and nothing changes
\set SHOW_CONTEXT never
SELECT * FROM tsmove.advise(min_read_mb => -1);
SELECT * FROM tsmove.advise(min_read_mb => NULL);
SELECT * FROM tsmove.advise(horizon => '0 seconds');
SELECT * FROM tsmove.report(NULL);
SELECT * FROM tsmove.report(pg_catalog.now(), compare => '-1 minute');
SELECT * FROM tsmove.relation_recent_io(NULL);
SELECT * FROM tsmove.relation_recent_io('0 seconds');
SELECT * FROM tsmove.relation_recent_io('1 day -25 hours');
SELECT * FROM tsmove.relation_recent_io('2000 years');
SELECT * FROM tsmove.tablespace_recent_io(NULL);
SELECT * FROM tsmove.tablespace_recent_io('-1 second');
\set SHOW_CONTEXT errors
-- each relation's recent I/O: the time constant nearest half the horizon
SELECT pg_catalog.count(*) FILTER (WHERE time_constant_s <> 1080) AS not_18_minutes,
       pg_catalog.count(*) FILTER (WHERE spcoid = 0) AS without_tablespace
FROM tsmove.relation_recent_io('1 hour');
-- and per tablespace, over every database (never 0: the default's own oid)
SELECT pg_catalog.count(*) FILTER (WHERE spcoid = 0 OR time_constant_s <> 30) AS wrong
FROM tsmove.tablespace_recent_io('1 minute');

-- report(): a move done in the period, before and after, on both sides
SELECT pg_catalog.clock_timestamp() AS before_move \gset
SELECT pg_catalog.md5(pg_catalog.string_agg(mon_a::text, ',' ORDER BY id)) AS mon_a_hash FROM mon_a \gset
SELECT tsmove.move('mon_a', 'regress_ts_b') AS mon_job \gset
SELECT tsmove.wait(:mon_job);
SELECT pg_catalog.md5(pg_catalog.string_agg(mon_a::text, ',' ORDER BY id)) = :'mon_a_hash' AS data_equal,
       (SELECT spcname FROM pg_catalog.pg_tablespace t JOIN pg_catalog.pg_class c ON c.reltablespace = t.oid
        WHERE c.oid = 'mon_a'::pg_catalog.regclass) AS now_in
FROM mon_a;
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS amcheck;
RESET client_min_messages;
SELECT pg_catalog.count(*) AS heap_problems FROM verify_heapam('mon_a');
SELECT section, relation, side, period, note IS NOT NULL AS has_note
FROM tsmove.report(:'before_move') WHERE job_id = :mon_job
ORDER BY side, period_start;
SELECT pg_catalog.count(*) AS moves_before_the_period
FROM tsmove.report(pg_catalog.clock_timestamp()) WHERE section <> 'tablespace';

-- privileges: nothing for a role outside pg_monitor
SET ROLE regress_monitor_nobody;
SELECT * FROM tsmove.tablespace_io;
SELECT * FROM tsmove.coaccess;
SELECT * FROM tsmove.tablespace_io_history;
SELECT * FROM tsmove.monitor_status;
SELECT * FROM tsmove.advise();
SELECT * FROM tsmove.report(pg_catalog.now());
SELECT tsmove.coaccess_reset();
SELECT tsmove.tablespace_io_reset();
SELECT * FROM tsmove.coaccess_pairs();
SELECT * FROM tsmove.tablespace_io_stats();
SELECT * FROM tsmove.tablespace_io_history_rows();
SELECT * FROM tsmove.monitor_info();
SELECT * FROM tsmove.relation_recent_io('1 hour');
SELECT * FROM tsmove.tablespace_recent_io('1 hour');
RESET ROLE;

-- pg_monitor reads everything, resets nothing, and an operator of its own,
-- first in its search_path, is never called by the extension's code
CREATE ROLE regress_monitor_reader IN ROLE pg_monitor;
CREATE SCHEMA regress_evil AUTHORIZATION regress_monitor_reader;
SET ROLE regress_monitor_reader;
-- every comparison operator on every type the extension compares
DO $$
DECLARE
  t text;
  op text;
BEGIN
  FOREACH t IN ARRAY ARRAY['oid', 'name', 'text', 'bigint', 'integer', 'numeric',
                           'double precision', 'regclass', 'timestamptz', 'interval',
                           'boolean', '"char"', 'text[]', 'name[]'] LOOP
    EXECUTE format('CREATE FUNCTION regress_evil.hijack(%s, %s) RETURNS boolean LANGUAGE plpgsql '
                   'AS $f$ BEGIN RAISE EXCEPTION ''hijacked by %%'', current_user; END $f$', t, t);
    FOREACH op IN ARRAY ARRAY['=', '<>', '<', '>', '<=', '>=', '&&', '@>'] LOOP
      EXECUTE format('CREATE OPERATOR regress_evil.%s (FUNCTION = regress_evil.hijack, LEFTARG = %s, RIGHTARG = %s)',
                     op, t, t);
    END LOOP;
  END LOOP;
END
$$;
SET search_path = regress_evil, pg_catalog, public;
SELECT 1::oid = 1::oid;
SELECT count(*) >= 4 AS tablespaces FROM tsmove.tablespace_io;
SELECT count(*) >= 0 AS pairs FROM tsmove.coaccess;
SELECT count(*) >= 0 AS history FROM tsmove.tablespace_io_history;
SELECT sampler_pid IS NOT NULL AS sampler_running FROM tsmove.monitor_status;
SELECT count(*) >= 0 AS recent FROM tsmove.tablespace_recent_io('1 hour');
SELECT count(*) AS recommendations FROM tsmove.advise(min_read_mb => 0);
SELECT count(*) > 0 AS reported FROM tsmove.report(now() - interval '1 hour');
SELECT tsmove.coaccess_reset();
SELECT tsmove.tablespace_io_reset();
RESET search_path;
RESET ROLE;

DROP TABLE mon_a, mon_b;
SET client_min_messages = warning;
DROP SCHEMA regress_evil CASCADE;
RESET client_min_messages;
DROP ROLE regress_monitor_reader;
DROP ROLE regress_monitor_nobody;
ALTER SYSTEM RESET pg_tsmove.sample_interval;
SELECT pg_catalog.pg_reload_conf();
