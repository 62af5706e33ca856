"""An unprivileged role attacks pg_tsmove as a hostile reviewer would.

The attacker is a role with no grants but a schema of its own.  It plants
operators (`=` for bigint, oid and text, `<>` for text) and functions whose
body tries ALTER ROLE ... SUPERUSER and logs who ran it, puts its schema
first in search_path (its session's, or its database's as the database
owner), and calls every entry point of the extension.  The extension must
never run the attacker's code with rights the attacker does not have: after
every attack the attacker is not superuser and the log holds only calls the
attacker made as itself.  Refusals carry their SQLSTATE and change nothing.
"""

import psycopg
import pytest

from moves import (assert_moved_cleanly, job_row, set_cancel_blockers_after, start_long_reader, start_move,
                   tablespace_of, wait_for, wait_for_state, wait_job)

ATTACKER = "tsm_attacker"

# Run by the attacker in its own schema "trap".  trap.escalate() logs
# current_user and tries to make the attacker superuser: the ALTER ROLE
# succeeds only if the function runs with superuser rights.
TRAP_SQL = """
CREATE TABLE trap.calls (who name, session_who name);
GRANT SELECT, INSERT ON trap.calls TO PUBLIC;
CREATE FUNCTION trap.escalate() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO trap.calls VALUES (current_user, session_user);
  BEGIN
    EXECUTE 'ALTER ROLE tsm_attacker SUPERUSER';
  EXCEPTION WHEN insufficient_privilege THEN NULL;
  END;
END $$;
CREATE FUNCTION trap.int8eq(bigint, bigint) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN PERFORM trap.escalate(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR trap.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = trap.int8eq);
CREATE FUNCTION trap.oideq(oid, oid) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN PERFORM trap.escalate(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR trap.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = trap.oideq);
CREATE FUNCTION trap.texteq(text, text) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN PERFORM trap.escalate(); RETURN $1 OPERATOR(pg_catalog.=) $2; END $$;
CREATE OPERATOR trap.= (LEFTARG = text, RIGHTARG = text, FUNCTION = trap.texteq);
CREATE FUNCTION trap.textne(text, text) RETURNS boolean LANGUAGE plpgsql AS
  $$ BEGIN PERFORM trap.escalate(); RETURN $1 OPERATOR(pg_catalog.<>) $2; END $$;
CREATE OPERATOR trap.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = trap.textne);
CREATE FUNCTION trap.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
  $$ BEGIN PERFORM trap.escalate(); RETURN pg_catalog.now(); END $$;
CREATE FUNCTION trap.coalesce(text, text) RETURNS text LANGUAGE plpgsql AS
  $$ BEGIN PERFORM trap.escalate(); RETURN $1; END $$;
"""

TRAP_PATH = "SET search_path = trap, pg_catalog, public"


def plant_traps(cluster, dbname="postgres"):
    cluster.sql("CREATE SCHEMA trap AUTHORIZATION %s" % ATTACKER, dbname=dbname)
    cluster.sql(TRAP_SQL, dbname=dbname, user=ATTACKER)


def assert_no_escalation(cluster, dbname="postgres"):
    """The attacker is not superuser, and every trap call ran as itself."""
    assert cluster.sql_scalar("SELECT rolsuper FROM pg_authid WHERE rolname = %s",
                              (ATTACKER,)) is False
    assert cluster.sql("SELECT DISTINCT who FROM trap.calls WHERE who <> %s",
                       (ATTACKER,), dbname=dbname) == []


def as_attacker(cluster, statement, params=None, dbname="postgres"):
    """Run statement as the attacker with its schema first in search_path;
    returns the rows, or the psycopg error it raised."""
    with cluster.conn(dbname, user=ATTACKER) as conn:
        conn.execute(TRAP_PATH)
        try:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as error:
            return error


def assert_refused(result, sqlstate):
    assert isinstance(result, psycopg.Error), "not refused: %r" % (result,)
    assert result.sqlstate == sqlstate, result


@pytest.fixture
def attacked(primary):
    """primary with the attacker role, its traps, a table of its own (in
    the default tablespace: it may create nowhere else) and one of the
    superuser's in ts_a."""
    primary.sql("CREATE ROLE %s LOGIN" % ATTACKER)
    plant_traps(primary)
    primary.sql("CREATE TABLE trap.mine (id int PRIMARY KEY, pad text)", user=ATTACKER)
    primary.sql("INSERT INTO trap.mine SELECT g, repeat('m', 200) "
                "FROM generate_series(1, 20000) g", user=ATTACKER)
    primary.sql("CREATE TABLE victim (id int PRIMARY KEY, pad text) TABLESPACE ts_a;"
                "INSERT INTO victim SELECT g, repeat('v', 200) FROM generate_series(1, 40000) g")
    return primary


def test_no_grants_means_no_entry(attacked):
    """Without grants the attacker may call wait() and wait_for() only; every other entry
    point, the job table, its sequence and the developer GUC are refused."""
    for statement in (
            "SELECT tsmove.move('trap.mine', 'ts_b')",
            "SELECT tsmove.cancel(1)",
            "SELECT tsmove.set_rate(1, 1)",
            "SELECT tsmove.pause(1)",
            "SELECT tsmove.resume(1)",
            "SELECT tsmove.purge_jobs('0 s')",
            "SELECT * FROM tsmove.job_progress()",
            "SELECT tsmove.queue_note()",
            "SELECT * FROM tsmove.jobs",
            "SELECT * FROM tsmove.job",
            "INSERT INTO tsmove.job (relid, relname, relkind, owner, submitted_by, mode, "
            "source_tablespace, target_tablespace, max_rate_mb, members, old_relfilenodes) "
            "VALUES (1, 'x', 'r', 10, 10, 'online', 1, 1, 0, '{1}', '{1}')",
            "UPDATE tsmove.job SET state = 'queued'",
            "DELETE FROM tsmove.job",
            "SELECT nextval('tsmove.job_job_id_seq')",
            "SELECT tsmove.job_ignore_replicated_change()",
            "ALTER SYSTEM SET pg_tsmove.debug_pause_at = 'switching'"):
        assert_refused(as_attacker(attacked, statement), "42501")
    # a reload-time developer option cannot be set in a session or per role
    assert_refused(as_attacker(attacked, "SET pg_tsmove.debug_pause_at = 'switching'"),
                   "55P02")
    assert_refused(as_attacker(attacked, "ALTER ROLE %s SET pg_tsmove.debug_pause_at = "
                                         "'switching'" % ATTACKER), "55P02")
    assert attacked.sql_scalar("SELECT count(*) FROM tsmove.job") == 0
    assert_no_escalation(attacked)


def test_operator_hijack_through_every_entry_point(attacked):
    """With EXECUTE granted as a DBA would (move, cancel, set_rate) and
    CREATE on the target, the attacker moves its own table through every
    entry point with its operators first in search_path: the traps never
    run as anyone but the attacker, and its move still works."""
    for function in ("move(regclass, name, text, numeric, boolean)",
                     "cancel(bigint)", "set_rate(bigint, numeric)", "pause(bigint)",
                     "resume(bigint)", "purge_jobs(interval)"):
        attacked.sql("GRANT EXECUTE ON FUNCTION tsmove.%s TO %s" % (function, ATTACKER))
    attacked.sql("GRANT CREATE ON TABLESPACE ts_b TO %s" % ATTACKER)
    expected = attacked.row_hash("trap.mine", "id")

    rows = as_attacker(attacked, "SELECT tsmove.move('trap.mine', 'ts_b', max_rate_mb => 1)")
    assert not isinstance(rows, psycopg.Error), rows
    job = rows[0][0]
    wait_for_state(attacked, job, ("copying", "catching_up"), 30)
    assert as_attacker(attacked, "SELECT tsmove.pause(%s)", (job,)) == [(True,)]
    assert as_attacker(attacked, "SELECT tsmove.resume(%s)", (job,)) == [(True,)]
    assert as_attacker(attacked, "SELECT tsmove.set_rate(%s, 2)", (job,)) == [(True,)]
    assert as_attacker(attacked, "SELECT tsmove.cancel(%s)", (job,)) == [(True,)]
    assert as_attacker(attacked, "SELECT tsmove.wait(%s)", (job,)) == [("cancelled",)]
    assert as_attacker(attacked, "CALL tsmove.wait_for(%s)", (job,)) == [("cancelled",)]

    rows = as_attacker(attacked, "SELECT tsmove.move('trap.mine', 'ts_b', max_rate_mb => 0, "
                                 "with_indexes => true)")
    job = rows[0][0]
    assert as_attacker(attacked, "CALL tsmove.wait_for(%s, '60 s')", (job,)) == [("done",)]
    index_job = attacked.sql_scalar("SELECT job_id FROM tsmove.job WHERE parent_job = %s", (job,))
    assert wait_job(attacked, index_job) == "done"
    assert attacked.row_hash("trap.mine", "id") == expected
    assert tablespace_of(attacked, "trap.mine") == "ts_b"
    assert attacked.amcheck(relations=["trap.mine"]) == []
    assert attacked.orphan_files() == []
    before = attacked.sql_scalar("SELECT count(*) FROM tsmove.job")
    purged = as_attacker(attacked, "SELECT tsmove.purge_jobs('0 s')")
    assert not isinstance(purged, psycopg.Error), purged
    after = attacked.sql_scalar("SELECT count(*) FROM tsmove.job")
    assert purged[0][0] == before - after >= 2
    assert_no_escalation(attacked)


def test_other_roles_jobs_and_relations(attacked):
    """Someone else's job cannot be seen, cancelled or re-rated, someone
    else's relation cannot be moved, and move() refuses before it would
    lock the relation: a lock held on it does not make the attacker wait."""
    for function in ("move(regclass, name, text, numeric, boolean)",
                     "cancel(bigint)", "set_rate(bigint, numeric)", "pause(bigint)",
                     "resume(bigint)", "purge_jobs(interval)"):
        attacked.sql("GRANT EXECUTE ON FUNCTION tsmove.%s TO %s" % (function, ATTACKER))
    attacked.sql("GRANT CREATE ON TABLESPACE ts_b TO %s" % ATTACKER)
    job = start_move(attacked, "victim", "ts_b", max_rate_mb=1)
    wait_for_state(attacked, job, ("copying",), 30)
    before = job_row(attacked, job)

    assert_refused(as_attacker(attacked, "SELECT tsmove.wait(%s)", (job,)), "42501")
    assert_refused(as_attacker(attacked, "CALL tsmove.wait_for(%s)", (job,)), "42501")
    assert_refused(as_attacker(attacked, "SELECT tsmove.cancel(%s)", (job,)), "42501")
    assert_refused(as_attacker(attacked, "SELECT tsmove.set_rate(%s, 0)", (job,)), "42501")
    assert_refused(as_attacker(attacked, "SELECT tsmove.pause(%s)", (job,)), "42501")
    assert_refused(as_attacker(attacked, "SELECT tsmove.resume(%s)", (job,)), "42501")
    after = job_row(attacked, job)
    assert after["state"] == "copying" and after["error"] == before["error"]
    assert attacked.sql_scalar("SELECT max_rate_mb_s FROM tsmove.jobs WHERE job_id = %s",
                               (job,)) == 1

    assert attacked.sql_scalar("SELECT tsmove.cancel(%s)", (job,)) is True
    assert wait_job(attacked, job, 30) == "cancelled"
    # purge_jobs() of the attacker leaves others' ended jobs alone
    assert as_attacker(attacked, "SELECT tsmove.purge_jobs('0 s')") == [(0,)]
    assert job_row(attacked, job)["state"] == "cancelled"
    with attacked.conn(autocommit=False) as holder:
        holder.execute("LOCK TABLE victim IN ACCESS EXCLUSIVE MODE")
        result = as_attacker(attacked, "SET statement_timeout = '5s'; "
                                        "SELECT tsmove.move('public.victim', 'ts_b')")
        assert_refused(result, "42501")
        holder.rollback()
    assert tablespace_of(attacked, "victim") == "ts_a"
    assert attacked.sql_scalar("SELECT count(*) FROM tsmove.job WHERE relid = 'victim'::regclass"
                               " AND state NOT IN ('done', 'failed', 'cancelled')") == 0
    assert_no_escalation(attacked)


def test_switch_cancels_only_what_the_submitter_may(attacked):
    """With pg_tsmove.switch_cancel_blockers_after set, the switch of the
    attacker's move cancels the queries blocking it as pg_cancel_backend()
    run by the attacker would: the attacker's own, never a superuser's nor
    another role's.  The move waits for those to end."""
    attacked.sql("GRANT EXECUTE ON FUNCTION tsmove.move(regclass, name, text, numeric, boolean) "
                 "TO %s" % ATTACKER)
    attacked.sql("GRANT CREATE ON TABLESPACE ts_b TO %s" % ATTACKER)
    attacked.sql("CREATE ROLE tsm_bystander LOGIN")
    attacked.sql("GRANT USAGE ON SCHEMA trap TO tsm_bystander", user=ATTACKER)
    attacked.sql("GRANT SELECT ON trap.mine TO tsm_bystander", user=ATTACKER)
    expected = attacked.row_hash("trap.mine", "id")
    set_cancel_blockers_after(attacked, "0")
    superuser_reader = start_long_reader(attacked, "trap.mine", 10)
    bystander_reader = start_long_reader(attacked, "trap.mine", 10, user="tsm_bystander")
    job = as_attacker(attacked, "SELECT tsmove.move('trap.mine', 'ts_b', max_rate_mb => 0)")[0][0]
    wait_for(lambda: job_row(attacked, job)["switch_attempts"] >= 3, 30,
             what="three switch attempts")
    own_reader = start_long_reader(attacked, "trap.mine", 120, user=ATTACKER)

    assert wait_job(attacked, job, 60) == "done"
    for reader in (superuser_reader, bystander_reader, own_reader):
        reader.join(10)
    assert superuser_reader.sqlstate is None and superuser_reader.ran_s >= 9.5
    assert bystander_reader.sqlstate is None and bystander_reader.ran_s >= 9.5
    assert own_reader.sqlstate == "57014", own_reader.sqlstate
    log = attacked.log_contents()
    assert "cancelling the query of PID %d" % own_reader.pid in log
    assert "its submitter may not signal them" in log
    for reader in (superuser_reader, bystander_reader):
        assert "cancelling the query of PID %d" % reader.pid not in log
    assert attacked.row_hash("trap.mine", "id") == expected
    assert_moved_cleanly(attacked, "trap.mine", "ts_b")
    assert_no_escalation(attacked)


def test_database_search_path_hijack_of_worker_and_recovery(primary):
    """The attacker owns a database and sets its search_path to its trap
    schema (ALTER DATABASE ... SET, which a database owner may do).  The
    move worker, after kill -9 the recovery pass and the worker that resumes
    the move, and the recovery pass that fails one: all run in that
    database with superuser rights, and none may resolve a trap."""
    primary.sql("CREATE ROLE %s LOGIN" % ATTACKER)
    primary.sql("CREATE DATABASE trapdb OWNER %s" % ATTACKER)
    primary.sql("CREATE EXTENSION pg_tsmove", dbname="trapdb")
    primary.sql("GRANT EXECUTE ON FUNCTION tsmove.move(regclass, name, text, numeric, boolean) "
                "TO %s" % ATTACKER, dbname="trapdb")
    primary.sql("GRANT CREATE ON TABLESPACE ts_a, ts_b TO %s" % ATTACKER)
    plant_traps(primary, "trapdb")
    primary.sql("CREATE TABLE trap.big (id int PRIMARY KEY, pad text) TABLESPACE ts_a;"
                "INSERT INTO trap.big SELECT g, repeat('b', 300) FROM generate_series(1, 60000) g",
                dbname="trapdb", user=ATTACKER)
    expected = primary.row_hash("trap.big", "id", dbname="trapdb")
    primary.sql("ALTER DATABASE trapdb SET search_path = trap, pg_catalog", user=ATTACKER)

    def attacker_move(rate, target="ts_b"):
        rows = as_attacker(primary, "SELECT tsmove.move('trap.big', %s, max_rate_mb => %s)",
                           (target, rate), dbname="trapdb")
        assert not isinstance(rows, psycopg.Error), rows
        return rows[0][0]

    def state(job):
        # this superuser session is in trapdb too: no unqualified operator
        return primary.sql_scalar("SELECT state FROM tsmove.jobs WHERE job_id "
                                  "OPERATOR(pg_catalog.=) %s::pg_catalog.int8", (job,),
                                  dbname="trapdb")

    # the worker, interrupted by a crash: the recovery pass queues it again
    # and a worker resumes it, to the end
    job = attacker_move(4)
    wait_for(lambda: state(job) == "copying", 30, what="the move to copy")
    primary.kill9()
    primary.start()
    wait_for(lambda: state(job) == "done", 120, what="the resumed move to finish")
    assert "resumes the move of \"trap.big\"" in primary.log_contents()

    # interrupted again with resuming off: the recovery pass fails it
    primary.sql("ALTER SYSTEM SET pg_tsmove.resume_after_restart = off")
    job = attacker_move(2, "ts_a")
    wait_for(lambda: state(job) == "copying", 30, what="the move to copy")
    primary.kill9()
    primary.start()
    wait_for(lambda: state(job) == "failed", 60, what="recovery to fail the job")

    # the checks below are superuser sessions in trapdb: disarm it first
    primary.sql("ALTER DATABASE trapdb RESET search_path")
    assert primary.row_hash("trap.big", "id", dbname="trapdb") == expected
    assert primary.amcheck(dbname="trapdb", relations=["trap.big"]) == []
    assert primary.orphan_files(dbname="trapdb") == []
    assert_no_escalation(primary, "trapdb")
