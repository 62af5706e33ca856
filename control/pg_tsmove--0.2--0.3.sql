/* pg_tsmove 0.2 -> 0.3 */

\echo Use "ALTER EXTENSION pg_tsmove UPDATE TO '0.3'" to load this file. \quit

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
