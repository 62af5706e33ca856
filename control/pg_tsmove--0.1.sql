/* pg_tsmove 0.1: online moves of tables and indexes between tablespaces */

\echo Use "CREATE EXTENSION pg_tsmove" to load this file. \quit

/*
 * The extension's objects live in schema tsmove, created here (not by the
 * control file's schema option) so that DROP EXTENSION removes it too.
 * Functions are revoked from PUBLIC one by one below; the schema is usable.
 */
CREATE SCHEMA tsmove;
GRANT USAGE ON SCHEMA tsmove TO PUBLIC;

/*
 * One row per move.  The row is committed before the worker creates any
 * file, so after a crash it is the only record of the new storage; the
 * launcher's recovery pass reads it to remove what a dead job left behind.
 * The worker keeps live counters in shared memory (tsmove.job_progress());
 * it writes them here when the job ends.
 *
 * with_indexes makes one job per index, with parent_job naming the table's
 * job; the table's worker runs them after the table, one at a time.
 *
 * members / old_relfilenodes / new_relfilenodes are parallel arrays: the
 * relation itself, then its TOAST table and TOAST index, which switch with
 * it in one transaction.
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
    CONSTRAINT job_state_check CHECK (state IN
        ('queued', 'preparing', 'copying', 'catching_up', 'switching',
         'warming', 'done', 'failed', 'cancelled')),
    CONSTRAINT job_mode_check CHECK (mode IN ('online', 'quiesce'))
);
CREATE INDEX job_relid_idx ON tsmove.job (relid);
REVOKE ALL ON tsmove.job FROM PUBLIC;

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
    OUT note text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'tsm_job_progress'
LANGUAGE C VOLATILE;

CREATE VIEW tsmove.jobs AS
SELECT j.job_id,
       j.relid::pg_catalog.regclass AS relation,
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
                 * 2 / (p.rate_mb_s * 1048576))
       END AS eta,
       coalesce(p.switch_attempts, j.switch_attempts) AS switch_attempts,
       coalesce(p.lock_wait_ms, j.lock_wait_ms) AS lock_wait_ms,
       coalesce(p.switch_ms, j.switch_ms) AS switch_ms,
       p.pid,
       j.submitted_at,
       j.started_at,
       j.finished_at,
       coalesce(j.error, p.note) AS error
FROM tsmove.job j
LEFT JOIN tsmove.job_progress() p ON p.job_id = j.job_id
LEFT JOIN pg_catalog.pg_tablespace src ON src.oid = j.source_tablespace
LEFT JOIN pg_catalog.pg_tablespace dst ON dst.oid = j.target_tablespace;

REVOKE ALL ON FUNCTION tsmove.move(pg_catalog.regclass, pg_catalog.name, pg_catalog.text, pg_catalog.numeric, pg_catalog.bool) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.cancel(pg_catalog.int8) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.set_rate(pg_catalog.int8, pg_catalog.numeric) FROM PUBLIC;
REVOKE ALL ON FUNCTION tsmove.job_progress() FROM PUBLIC;
GRANT SELECT ON tsmove.jobs TO pg_monitor;
GRANT EXECUTE ON FUNCTION tsmove.job_progress() TO pg_monitor;
