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

-- ---- monitoring: tablespace I/O, co-access, advice, history (issue 8) -----
