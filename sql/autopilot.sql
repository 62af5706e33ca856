-- The autopilot's SQL surface: its log, its policies' refusals, who may do what.
SHOW pg_tsmove.autopilot;
SELECT pg_catalog.count(*) AS decisions FROM tsmove.decisions;
-- advise_candidates() refuses what advise() refuses, and lists nothing on one device
SELECT pg_catalog.count(*) AS candidates FROM tsmove.advise_candidates(min_read_mb => 0);
SELECT * FROM tsmove.advise_candidates(min_read_mb => -1);
SELECT * FROM tsmove.advise_candidates(horizon => '-1 second');
SELECT * FROM tsmove.advise_candidates(horizon => '200000 years');
-- nothing to resume while the autopilot is not stopped
SELECT tsmove.autopilot_resume();
-- bad policies are refused with what is wrong, and change nothing
ALTER SYSTEM SET pg_tsmove.autopilot = 'maybe';
ALTER SYSTEM SET pg_tsmove.autopilot_window = '22:00';
ALTER SYSTEM SET pg_tsmove.autopilot_window = '25:00-06:00';
ALTER SYSTEM SET pg_tsmove.autopilot_window = '10:00-10:00';
ALTER SYSTEM SET pg_tsmove.autopilot_targets = 'pg_default, a.b';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = 'orders';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = 'public..orders';
ALTER SYSTEM SET pg_tsmove.autopilot_min_benefit = 101;
ALTER SYSTEM SET pg_tsmove.device_disks = 'sdb';
ALTER SYSTEM SET pg_tsmove.device_disks = 'sdb:0';
ALTER SYSTEM SET pg_tsmove.autopilot_window = '+1:00-02:00';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = '"public.orders"';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = '*.*';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = 'shop.*.orders';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = 'public.orders,,public.items';
ALTER SYSTEM SET pg_tsmove.autopilot_targets = '"fast,slow"x';
SET pg_tsmove.autopilot = on;
-- good ones are taken
ALTER SYSTEM SET pg_tsmove.autopilot_window = '22:00-06:00';
ALTER SYSTEM SET pg_tsmove.autopilot_never_move = 'public.orders, shop.audit.*, public."My Table"';
ALTER SYSTEM SET pg_tsmove.device_disks = 'sdb:4, nvme0n1:2';
ALTER SYSTEM RESET pg_tsmove.autopilot_window;
ALTER SYSTEM RESET pg_tsmove.autopilot_never_move;
ALTER SYSTEM RESET pg_tsmove.device_disks;
-- the lists as the autopilot reads them: SQL's quoting and case folding
SELECT * FROM tsmove.autopilot_name_list('public.Orders, shop.audit.*, public."My Table", "a,b".c');
-- the window, in the server's time zone (postgresql.conf's), wrapping midnight or not
WITH tz AS (SELECT coalesce((SELECT f.setting FROM pg_catalog.pg_file_settings f
                             WHERE f.name = 'timezone' AND f.applied ORDER BY f.seqno DESC LIMIT 1), 'GMT') AS zone)
SELECT w.win, w.at,
       tsmove.autopilot_window_open(w.win, (('2026-11-24 ' || w.at)::timestamp AT TIME ZONE tz.zone)) AS open
FROM tz, (VALUES ('22:00-06:00', '23:30'), ('22:00-06:00', '05:59'), ('22:00-06:00', '06:00'),
                 ('22:00-06:00', '12:00'), ('09:00-17:00', '09:00'), ('09:00-17:00', '17:00'),
                 ('', '12:00')) AS w(win, at)
ORDER BY 1, 2;
-- an unprivileged role reads no log, changes no policy, runs no step
CREATE ROLE regress_pilot_nobody;
SET ROLE regress_pilot_nobody;
SELECT * FROM tsmove.decisions;
SELECT * FROM tsmove.decision;
SELECT tsmove.autopilot_resume();
SELECT * FROM tsmove.autopilot_step(true, false, NULL, 0, 0, NULL);
SELECT * FROM tsmove.advise_candidates();
SELECT tsmove.autopilot_window_open('22:00-06:00');
ALTER SYSTEM SET pg_tsmove.autopilot = on;
RESET ROLE;
-- pg_monitor reads the log and the candidates
GRANT pg_monitor TO regress_pilot_nobody;
SET ROLE regress_pilot_nobody;
SELECT pg_catalog.count(*) AS decisions FROM tsmove.decisions;
SELECT pg_catalog.count(*) AS candidates FROM tsmove.advise_candidates(min_read_mb => 0);
RESET ROLE;
DROP ROLE regress_pilot_nobody;
