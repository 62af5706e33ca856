/*-------------------------------------------------------------------------
 *
 * job_api.c
 *	  The SQL surface of moves: tsmove.move(), wait(), wait_for(), cancel(),
 *	  set_rate(), pause(), resume(), purge_jobs(), job_progress(),
 *	  queue_note().
 *
 * move() validates everything it can and inserts the job row(s) in the
 * caller's transaction; nothing else (the checks and the submission are in
 * submit.c, shared with tablespace_api.c).  When that transaction commits,
 * an xact callback marks the database pending and wakes the launcher, which
 * starts a worker when one is free (pg_tsmove.max_workers).  Until then the
 * row is invisible to workers, so nothing runs for a transaction that
 * aborts, and the row is committed before any file is created, as
 * DESIGN.md asks.  A transaction that called move() cannot be prepared: a
 * prepared transaction may commit after a restart, with nobody told.
 *
 * Privileges, as core's ALTER TABLE ... SET TABLESPACE: move() needs
 * ownership of the relation (checked before any lock is taken on it) and
 * CREATE on the target tablespace; the worker checks both again, as the
 * submitting role, when the job starts.  A job is visible through wait()
 * and wait_for() to its submitter, the relation's owner and pg_monitor;
 * cancel(), set_rate(), pause() and resume() are for the submitter and the
 * owner, and purge_jobs() deletes only chains of jobs the caller may steer.
 * Superusers have all of these.  The job table is written as the superuser
 * by job_record.c, with a fixed search_path.
 *
 * Locks: move() holds AccessShareLock on the relation (and, with
 * with_indexes, its indexes) until the caller's transaction ends; the
 * worker takes its session lock only later, so DDL committed in between
 * is caught by the worker's re-check.  Shared slot rules: queue.h.
 *
 * A top of move/, beside tablespace_api.c: it calls submit.c, job_record.c,
 * queue.c, resume.c and relation_storage.c (to cancel a queued job that
 * had files), and nothing calls it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "access/genam.h"
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/catalog.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_tablespace.h"
#include "commands/tablespace.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "jobs/job_record.h"
#include "jobs/local_jobs.h"
#include "engine/relation_storage.h"
#include "engine/resume.h"
#include "jobs/submit.h"

PG_FUNCTION_INFO_V1(tsm_move);
PG_FUNCTION_INFO_V1(tsm_wait);
PG_FUNCTION_INFO_V1(tsm_wait_for);
PG_FUNCTION_INFO_V1(tsm_cancel);
PG_FUNCTION_INFO_V1(tsm_set_rate);
PG_FUNCTION_INFO_V1(tsm_job_progress);
PG_FUNCTION_INFO_V1(tsm_queue_note_sql);
PG_FUNCTION_INFO_V1(tsm_pause);
PG_FUNCTION_INFO_V1(tsm_resume);
PG_FUNCTION_INFO_V1(tsm_purge_jobs);
PG_FUNCTION_INFO_V1(tsm_local_jobs);

/* Poll interval of tsmove.wait() and wait_for(). */
#define TSM_WAIT_POLL_MS 20
/* How often tsmove.wait_for() commits: each commit counts as a transaction
 * for adaptive pacing, which takes 5 a second for a busy server. */
#define TSM_WAIT_COMMIT_MS 1000
/* How long a started job may have no worker and none coming before wait() gives up on it. */
#define TSM_WAIT_STRANDED_MS 5000
/* Longest timeout tsmove.wait() accepts: 100 years, in seconds. */
#define TSM_WAIT_MAX_SECONDS (100.0 * 365.25 * 86400.0)

/* Error out if a job for relid has not ended yet. */
static void
tsm_check_no_active_job(Oid relid, const char *relname)
{
	int64		job_id = tsm_jobrec_active_job(relid);

	if (job_id != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("relation \"%s\" is already being moved by job %lld",
						relname, (long long) job_id),
				 errhint("Wait for it with tsmove.wait(%lld) or stop it with tsmove.cancel(%lld).",
						 (long long) job_id, (long long) job_id)));
}

/*
 * tsmove.move(rel regclass, target name, mode text DEFAULT 'online',
 *			   max_rate_mb numeric DEFAULT NULL, with_indexes bool DEFAULT false)
 *	  RETURNS bigint
 *
 * Validates and queues the job(s); returns the job id of rel at once.  The
 * move starts when the caller's transaction commits and a worker is free.
 * Takes AccessShareLock on rel (and on its indexes with with_indexes), only
 * after checking that the caller owns it, until the end of the transaction.
 */
Datum
tsm_move(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *target;
	char	   *mode_name;
	TsmMoveMode mode;
	bool		mode_known;
	double		rate;
	bool		with_indexes;
	Oid			target_spc;
	Relation	rel;
	int64		job_id;
	List	   *indexes = NIL;
	ListCell   *lc;
	char	   *relname;

	tsm_require_preload();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation and target tablespace must not be null"),
				 errhint("Call tsmove.move('schema.table', 'tablespace').")));
	relid = PG_GETARG_OID(0);
	target = NameStr(*PG_GETARG_NAME(1));
	mode_name = PG_ARGISNULL(2) ? "online" : text_to_cstring(PG_GETARG_TEXT_PP(2));
	with_indexes = !PG_ARGISNULL(4) && PG_GETARG_BOOL(4);
	mode = tsm_mode_argument(mode_name, &mode_known);
	rate = tsm_rate_argument(fcinfo, 3);
	tsm_check_server_can_move(mode == TSM_MODE_ONLINE);

	target_spc = get_tablespace_oid(target, true);
	if (!OidIsValid(target_spc))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("tablespace \"%s\" does not exist", target),
				 errhint("List tablespaces with \\db or SELECT spcname FROM pg_tablespace.")));

	/* privileges first: no lock on a relation the caller does not own */
	relname = get_rel_name(relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid),
				 errhint("It may have been dropped concurrently.")));
	tsm_check_move_privileges(relid, relname, target_spc, GetUserId());

	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid),
				 errhint("It may have been dropped concurrently.")));
	/* ownership may have changed while we waited for the lock */
	tsm_check_move_privileges(relid, RelationGetRelationName(rel), target_spc,
							  GetUserId());
	tsm_check_movable(rel, target_spc, mode);
	tsm_check_no_active_job(relid, RelationGetRelationName(rel));
	tsm_check_no_relocation_of(target_spc, "into");
	tsm_check_no_relocation_of(OidIsValid(rel->rd_rel->reltablespace) ?
							   rel->rd_rel->reltablespace : MyDatabaseTableSpace,
							   "out of");

	/* The indexes to move after the table: those not yet in the target. */
	if (with_indexes && rel->rd_rel->relkind != RELKIND_INDEX)
	{
		foreach(lc, RelationGetIndexList(rel))
		{
			Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
			Oid			index_spc = OidIsValid(index->rd_rel->reltablespace) ?
				index->rd_rel->reltablespace : MyDatabaseTableSpace;

			if (index_spc != target_spc)
			{
				tsm_check_movable(index, target_spc, mode);
				tsm_check_no_active_job(RelationGetRelid(index),
										RelationGetRelationName(index));
				indexes = lappend(indexes, index);
			}
			else
				index_close(index, AccessShareLock);
		}
	}

	job_id = tsm_insert_move(rel, target_spc, mode, rate, 0, NULL);
	foreach(lc, indexes)
	{
		Relation	index = (Relation) lfirst(lc);

		tsm_insert_move(index, target_spc, mode, rate, job_id, NULL);
		index_close(index, NoLock);
	}
	relation_close(rel, NoLock);

	PG_RETURN_INT64(job_id);
}

static void
tsm_no_such_job(int64 job_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("job %lld does not exist", (long long) job_id),
			 errhint("List jobs with SELECT * FROM tsmove.jobs.")));
}

/*
 * Read a job and check the caller's right to it: to see it (submitter,
 * relation owner, pg_monitor) or, with control, to steer it (submitter,
 * relation owner).  Superusers pass both.
 */
static void
tsm_read_job_checked(int64 job_id, bool control, TsmJobInfo *info)
{
	Oid			user = GetUserId();
	bool		allowed;

	if (!tsm_jobrec_read(job_id, true, info))
		tsm_no_such_job(job_id);
	allowed = has_privs_of_role(user, info->submitted_by) ||
		has_privs_of_role(user, info->owner) ||
		(!control && has_privs_of_role(user, ROLE_PG_MONITOR));
	if (!allowed)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for job %lld", (long long) job_id),
				 errhint(control ?
						 "Only the role that submitted the move, the relation's owner, or a superuser can control it." :
						 "Only the role that submitted the move, the relation's owner, members of pg_monitor, or a superuser can see it.")));
}

/* The deadline of tsmove.wait()'s timeout argument, checked. */
static TimestampTz
tsm_wait_deadline(Interval *timeout)
{
	double		seconds = DatumGetFloat8(DirectFunctionCall2(interval_part,
															 CStringGetTextDatum("epoch"),
															 IntervalPGetDatum(timeout)));

	if (seconds < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative"),
				 errhint("Give a timeout such as '10 minutes', or NULL to wait without one.")));
	if (seconds > TSM_WAIT_MAX_SECONDS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be at most 100 years"),
				 errhint("Give a shorter timeout, or NULL to wait without one.")));
	return GetCurrentTimestamp() + (TimestampTz) (seconds * USECS_PER_SEC);
}

/*
 * The state of a job that has started, as its worker shows it, or as the
 * row says if no worker runs it; *stranded says whether none runs it and
 * none will come (no recovery pass or start pending in its database).
 */
static TsmJobState
tsm_live_state(int64 job_id, TsmJobState row_state, bool *stranded)
{
	TsmWorkerSlot *slot;
	TsmJobState state = row_state;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	slot = tsm_find_slot_for_job(job_id);
	if (slot)
		state = slot->progress.state;
	LWLockRelease(tsm_shared->lock);
	*stranded = (slot == NULL && row_state != TSM_QUEUED && row_state != TSM_PAUSED &&
				 !tsm_state_is_final(row_state) && !tsm_database_has_pending_work(MyDatabaseId));
	return state;
}

/*
 * The checks both ways of waiting make before the first poll: a job id, a
 * timeout that makes sense, the right to see the job, and a job that is
 * not this transaction's own.  Returns the deadline (0: none) and the job.
 */
static int64
tsm_wait_args_checked(FunctionCallInfo fcinfo, const char *how,
					  TimestampTz *deadline, TsmJobInfo *info)
{
	int64		job_id;

	tsm_require_preload();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("job must not be null"),
				 errhint("Pass the job id that tsmove.move() returned.")));
	job_id = PG_GETARG_INT64(0);
	*deadline = 0;
	if (!PG_ARGISNULL(1))
		*deadline = tsm_wait_deadline(PG_GETARG_INTERVAL_P(1));

	tsm_read_job_checked(job_id, false, info);
	if (info->submitted_here)
		ereport(ERROR,
				(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				 errmsg("cannot wait for job %lld in the transaction that submitted it",
						(long long) job_id),
				 errdetail("The move starts only when the transaction that called tsmove.move() commits."),
				 errhint("Commit first, then %s.", how)));
	return job_id;
}

/*
 * Polls job_id until it reaches done, failed or cancelled, or until it can
 * no longer progress: it is paused, or it started and its worker is gone
 * with none to come for TSM_WAIT_STRANDED_MS; or until the deadline (0:
 * none) passes.  info holds the job as last read; returns its state.
 *
 * With commit_between_polls the caller is a procedure connected to SPI in
 * a non-atomic context, and the wait holds no snapshot (and no xmin) while
 * it sleeps: the first poll commits, which drops the CALL's snapshot; each
 * poll drops the catalog snapshot its read took; and a commit every
 * TSM_WAIT_COMMIT_MS releases the job table's locks.  (Committing at every
 * 20 ms poll made a waiting session look like 50 transactions a second to
 * adaptive pacing, which then paced a move on an idle server.)  Otherwise
 * the caller's statement holds its snapshot throughout, as any statement
 * does.
 */
static TsmJobState
tsm_wait_until_settled(int64 job_id, TimestampTz deadline, TsmJobInfo *info,
					   bool commit_between_polls)
{
	TimestampTz stranded_since = 0;
	TimestampTz last_commit = 0;

	for (;;)
	{
		bool		stranded;
		TsmJobState live;

		if (tsm_state_is_final(info->state))
			return info->state;
		/* the row lags behind a running job: look at the live state */
		live = tsm_live_state(job_id, info->state, &stranded);
		if (live == TSM_PAUSED)
			return live;
		if (!stranded)
			stranded_since = 0;
		else if (stranded_since == 0)
			stranded_since = GetCurrentTimestamp();
		else if (TimestampDifferenceExceeds(stranded_since, GetCurrentTimestamp(),
											TSM_WAIT_STRANDED_MS))
		{
			ereport(NOTICE,
					(errmsg("job %lld is %s, but no worker runs it and none is coming",
							(long long) job_id, tsm_state_name(info->state)),
					 errhint("Its worker stopped; see the server log.")));
			return info->state;
		}
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
			return live;
		if (commit_between_polls)
		{
			InvalidateCatalogSnapshot();
			if (TimestampDifferenceExceeds(last_commit, GetCurrentTimestamp(),
										   TSM_WAIT_COMMIT_MS))
			{
				SPI_commit();
				last_commit = GetCurrentTimestamp();
			}
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 TSM_WAIT_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (!tsm_jobrec_read(job_id, true, info))
			tsm_no_such_job(job_id);
	}
}

/*
 * tsmove.wait(job bigint, timeout interval DEFAULT NULL) RETURNS text
 *
 * Blocks until the job settles (see tsm_wait_until_settled) or the timeout
 * passes, and returns its state.  Takes no locks; being one statement, it
 * holds its snapshot while it waits (tsmove.wait_for() does not).
 */
Datum
tsm_wait(PG_FUNCTION_ARGS)
{
	TimestampTz deadline;
	TsmJobInfo	info;
	int64		job_id = tsm_wait_args_checked(fcinfo, "call tsmove.wait()",
											   &deadline, &info);
	TsmJobState state = tsm_wait_until_settled(job_id, deadline, &info, false);

	PG_RETURN_TEXT_P(cstring_to_text(tsm_state_name(state)));
}

/*
 * CALL tsmove.wait_for(job bigint, timeout interval DEFAULT NULL,
 *                      INOUT state text DEFAULT NULL)
 *
 * tsmove.wait() as a procedure: it returns the same state, in the column
 * state (the argument's value is ignored).  Called on its own (CALL
 * outside a transaction block) it holds no snapshot between its polls (see
 * tsm_wait_until_settled), so vacuum and pruning go on everywhere: a long
 * SELECT tsmove.wait() under an update-heavy load costs that load more
 * than the move does.  Inside a transaction block or a function it cannot
 * commit, and waits as tsmove.wait() does.  Takes no locks.
 */
Datum
tsm_wait_for(PG_FUNCTION_ARGS)
{
	bool		nonatomic = fcinfo->context && IsA(fcinfo->context, CallContext) &&
		!castNode(CallContext, fcinfo->context)->atomic;
	TimestampTz deadline;
	TsmJobInfo	info;
	int64		job_id;
	TsmJobState state;
	TupleDesc	result_desc;
	Datum		result_value;
	bool		result_null = false;

	job_id = tsm_wait_args_checked(fcinfo, "CALL tsmove.wait_for()", &deadline, &info);

	if (SPI_connect_ext(nonatomic ? SPI_OPT_NONATOMIC : 0) != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect_ext failed");
	state = tsm_wait_until_settled(job_id, deadline, &info, nonatomic);
	SPI_finish();

	/* in the transaction the last poll started */
	if (get_call_result_type(fcinfo, NULL, &result_desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "tsmove.wait_for() must be declared with one OUT or INOUT parameter");
	result_desc = BlessTupleDesc(result_desc);
	result_value = CStringGetTextDatum(tsm_state_name(state));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(result_desc, &result_value,
													  &result_null)));
}

/*
 * tsmove.cancel(job bigint) RETURNS boolean
 *
 * A queued job, and the jobs queued behind it, are cancelled at once; a
 * running job is asked to stop, and its worker removes the new files and
 * marks it cancelled (the jobs queued behind it with it).  Returns false
 * if the job had already ended.
 */
Datum
tsm_cancel(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	TsmJobInfo	info;
	TsmWorkerSlot *slot;
	bool		signalled = false;
	TsmUnfinishedJob storage;

	tsm_require_preload();
	tsm_read_job_checked(job_id, true, &info);
	if (tsm_state_is_final(info.state))
		PG_RETURN_BOOL(false);

	/*
	 * Queued (or paused before it started) first: if a worker claims the job
	 * meanwhile, this waits for the claim's row lock, and by then the
	 * worker's slot names the job.  A job queued to resume after a restart
	 * has files, a slot and a resume point: they go with it.
	 */
	if (tsm_jobrec_cancel_queued(job_id, &storage))
	{
		tsm_drop_storage_set(storage.target_spc, storage.new_relfilenodes, storage.nnew);
		if (storage.nnew > 0)
		{
			tsm_resume_drop_slot(MyDatabaseId, job_id);
			tsm_resume_forget(MyDatabaseId, job_id);
		}
		PG_RETURN_BOOL(true);
	}

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	slot = tsm_find_slot_for_job(job_id);
	if (slot)
	{
		slot->cancel_job_id = job_id;
		if (slot->latch)
			SetLatch(slot->latch);
		signalled = true;
	}
	LWLockRelease(tsm_shared->lock);
	PG_RETURN_BOOL(signalled);
}

/*
 * tsmove.set_rate(job bigint, max_rate_mb numeric) RETURNS boolean
 *
 * Changes the byte budget of a running or queued job; a running worker
 * picks it up within a fraction of a second.  Returns false if the job had
 * ended.
 */
Datum
tsm_set_rate(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	double		rate = tsm_rate_argument(fcinfo, 1);
	TsmJobInfo	info;
	TsmWorkerSlot *slot;

	tsm_require_preload();
	tsm_read_job_checked(job_id, true, &info);
	if (tsm_state_is_final(info.state))
		PG_RETURN_BOOL(false);

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	slot = tsm_find_slot_for_job(job_id);
	if (slot)
	{
		slot->max_rate_mb = rate;
		if (slot->latch)
			SetLatch(slot->latch);
	}
	LWLockRelease(tsm_shared->lock);

	tsm_jobrec_set_rate(job_id, rate);
	if (info.state == TSM_QUEUED)
		tsm_note_queued_job_touched();
	PG_RETURN_BOOL(true);
}

/* The argument of pause() and resume(): a job the caller may steer. */
static int64
tsm_steered_job(FunctionCallInfo fcinfo, TsmJobInfo *info)
{
	int64		job_id;

	tsm_require_preload();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("job must not be null"),
				 errhint("Pass a job id from tsmove.jobs.")));
	job_id = PG_GETARG_INT64(0);
	tsm_read_job_checked(job_id, true, info);
	return job_id;
}

/* Ask the worker running job_id, if any, to pause or go on. */
static void
tsm_signal_pause(int64 job_id, bool pause)
{
	TsmWorkerSlot *slot;

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	slot = tsm_find_slot_for_job(job_id);
	if (slot)
	{
		slot->pause_requested = pause;
		if (slot->latch)
			SetLatch(slot->latch);
	}
	LWLockRelease(tsm_shared->lock);
}

/*
 * tsmove.pause(job bigint) RETURNS boolean
 *
 * A queued job becomes 'paused' and is not started; a running job stops
 * copying at its next pause point (within a batch of blocks) and shows
 * 'paused' while it keeps its worker, its lock and its files and follows
 * the WAL.  The request is recorded in the row, so a job a restart
 * interrupts pauses again when it resumes.  Returns false if the job had
 * ended.
 */
Datum
tsm_pause(PG_FUNCTION_ARGS)
{
	TsmJobInfo	info;
	int64		job_id = tsm_steered_job(fcinfo, &info);
	TsmJobState state;

	if (tsm_state_is_final(info.state))
		PG_RETURN_BOOL(false);
	state = tsm_jobrec_request_pause(job_id, true);
	if (tsm_state_is_final(state))
		PG_RETURN_BOOL(false);
	if (state == TSM_QUEUED)
		tsm_note_queued_job_touched();	/* to resume paused (see the row) */
	tsm_signal_pause(job_id, true);
	PG_RETURN_BOOL(true);
}

/*
 * tsmove.resume(job bigint) RETURNS boolean
 *
 * Undoes pause(): a job paused before it started is queued again (it
 * starts when the caller's transaction commits and a worker is free), a
 * running one goes on copying within a fraction of a second.  Returns
 * false if the job had ended.
 */
Datum
tsm_resume(PG_FUNCTION_ARGS)
{
	TsmJobInfo	info;
	int64		job_id = tsm_steered_job(fcinfo, &info);
	TsmJobState state;

	if (tsm_state_is_final(info.state))
		PG_RETURN_BOOL(false);
	state = tsm_jobrec_request_pause(job_id, false);
	if (tsm_state_is_final(state))
		PG_RETURN_BOOL(false);
	if (state == TSM_QUEUED)
		tsm_note_submission();
	tsm_signal_pause(job_id, false);
	PG_RETURN_BOOL(true);
}

/*
 * tsmove.purge_jobs(older_than interval) RETURNS bigint
 *
 * Deletes the jobs that ended more than older_than ago, a table's job
 * together with its index jobs, and only those the caller may steer (a
 * superuser: all).  Returns the number of jobs deleted.
 */
Datum
tsm_purge_jobs(PG_FUNCTION_ARGS)
{
	Interval   *older_than;
	double		seconds;

	tsm_require_preload();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("older_than must not be null"),
				 errhint("Give an interval such as '30 days'; '0' deletes every ended job.")));
	older_than = PG_GETARG_INTERVAL_P(0);
	seconds = DatumGetFloat8(DirectFunctionCall2(interval_part,
												 CStringGetTextDatum("epoch"),
												 IntervalPGetDatum(older_than)));
	if (seconds < 0 || isnan(seconds) || isinf(seconds) || seconds > TSM_WAIT_MAX_SECONDS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("older_than must be between 0 and 100 years"),
				 errhint("Give an interval such as '30 days'; '0' deletes every ended job.")));
	PG_RETURN_INT64(tsm_jobrec_purge(GetCurrentTimestamp() -
									 (TimestampTz) (seconds * USECS_PER_SEC),
									 GetUserId()));
}

/*
 * tsmove.job_progress() RETURNS SETOF record
 *
 * The live counters of this database's running jobs, copied from shared
 * memory under the shared lock.  tsmove.jobs joins it with the job table.
 */
Datum
tsm_job_progress(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TsmWorkerSlot *copies;
	int			ncopies = 0;

	tsm_require_preload();
	InitMaterializedSRF(fcinfo, 0);

	copies = palloc(sizeof(TsmWorkerSlot) * tsm_shared->nslots);
	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *slot = &tsm_shared->slots[i];

		/* a local job (a standby's relocation) shows in every database */
		if (slot->in_use && slot->job_id != 0 &&
			(slot->dbid == MyDatabaseId || tsm_job_is_local(slot->job_id)))
			copies[ncopies++] = *slot;
	}
	LWLockRelease(tsm_shared->lock);

	for (int i = 0; i < ncopies; i++)
	{
		TsmWorkerSlot *s = &copies[i];
		TsmProgress *p = &s->progress;
		Datum		values[17];
		bool		nulls[17];

		memset(nulls, 0, sizeof(nulls));
		values[0] = Int64GetDatum(s->job_id);
		values[1] = Int32GetDatum(s->pid);
		nulls[1] = (s->pid == 0);
		values[2] = CStringGetTextDatum(tsm_state_name(p->state));
		values[3] = Int64GetDatum(p->blocks_total);
		values[4] = Int64GetDatum(p->blocks_copied);
		values[5] = Int64GetDatum(p->blocks_recopied);
		values[6] = Int64GetDatum(p->dirty_backlog);
		values[7] = Int64GetDatum(p->bytes_written);
		values[8] = Int64GetDatum(p->wal_bytes);
		values[9] = Float8GetDatum(p->rate_mb_s);
		values[10] = Float8GetDatum(s->max_rate_mb);
		values[11] = Int32GetDatum(p->switch_attempts);
		values[12] = Float8GetDatum(p->lock_wait_ms);
		values[13] = Float8GetDatum(p->switch_ms);
		nulls[13] = (p->switch_ms < 0);
		values[14] = CStringGetTextDatum(p->note);
		nulls[14] = (p->note[0] == '\0');
		values[15] = Int64GetDatum(p->blocks_under_lock);
		values[16] = Float8GetDatum(p->pace_mb_s);
		nulls[16] = (p->pace_mb_s < 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * tsmove.local_jobs() RETURNS SETOF tsmove.job
 *
 * This server's local jobs (local_jobs.h) as rows of tsmove.job, each
 * column filled by its name, so that the row type's order does not matter.
 */
Datum
tsm_local_jobs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	desc;
	ListCell   *lc;
	Datum		no_oids;

	tsm_require_preload();
	InitMaterializedSRF(fcinfo, 0);
	desc = rsinfo->setDesc;
	no_oids = PointerGetDatum(construct_empty_array(OIDOID));
	foreach(lc, tsm_localjob_list())
	{
		TsmLocalJob *job = lfirst(lc);
		Datum	   *values = palloc0(sizeof(Datum) * desc->natts);
		bool	   *nulls = palloc(sizeof(bool) * desc->natts);

		for (int i = 0; i < desc->natts; i++)
		{
			const char *name = NameStr(TupleDescAttr(desc, i)->attname);

			nulls[i] = false;
			if (TupleDescAttr(desc, i)->attisdropped)
				nulls[i] = true;
			else if (strcmp(name, "job_id") == 0)
				values[i] = Int64GetDatum(job->job_id);
			else if (strcmp(name, "relid") == 0 || strcmp(name, "owner") == 0 ||
					 strcmp(name, "submitted_by") == 0 ||
					 strcmp(name, "source_tablespace") == 0 ||
					 strcmp(name, "target_tablespace") == 0)
				values[i] = ObjectIdGetDatum(strcmp(name, "relid") == 0 ? InvalidOid :
											 strcmp(name, "owner") == 0 ? job->owner :
											 strcmp(name, "submitted_by") == 0 ? job->submitted_by :
											 job->spc);
			else if (strcmp(name, "relname") == 0)
				values[i] = CStringGetTextDatum(job->spcname);
			else if (strcmp(name, "relkind") == 0)
				values[i] = CharGetDatum(TSM_RELKIND_TABLESPACE);
			else if (strcmp(name, "mode") == 0)
				values[i] = CStringGetTextDatum("online");
			else if (strcmp(name, "max_rate_mb") == 0)
				values[i] = DirectFunctionCall1(float8_numeric, Float8GetDatum(job->max_rate_mb));
			else if (strcmp(name, "state") == 0)
				values[i] = CStringGetTextDatum(tsm_state_name(job->state));
			else if (strcmp(name, "members") == 0 || strcmp(name, "old_relfilenodes") == 0)
				values[i] = no_oids;
			else if (strcmp(name, "blocks_total") == 0)
				values[i] = Int64GetDatum(job->blocks_total);
			else if (strcmp(name, "blocks_copied") == 0)
				values[i] = Int64GetDatum(job->blocks_copied);
			else if (strcmp(name, "blocks_recopied") == 0)
				values[i] = Int64GetDatum(job->blocks_recopied);
			else if (strcmp(name, "bytes_written") == 0)
				values[i] = Int64GetDatum(job->bytes_written);
			else if (strcmp(name, "wal_bytes") == 0)
				values[i] = Int64GetDatum(job->wal_bytes);
			else if (strcmp(name, "blocks_under_lock") == 0)
				values[i] = Int64GetDatum(job->blocks_under_lock);
			else if (strcmp(name, "switch_attempts") == 0)
				values[i] = Int32GetDatum(job->switch_attempts);
			else if (strcmp(name, "restarts") == 0)
				values[i] = Int32GetDatum(job->restarts);
			else if (strcmp(name, "lock_wait_ms") == 0)
				values[i] = Float8GetDatum(job->lock_wait_ms);
			else if (strcmp(name, "switch_ms") == 0)
			{
				values[i] = Float8GetDatum(job->switch_ms);
				nulls[i] = job->switch_ms < 0;
			}
			else if (strcmp(name, "submitted_at") == 0)
				values[i] = TimestampTzGetDatum(job->submitted_at);
			else if (strcmp(name, "started_at") == 0 || strcmp(name, "finished_at") == 0)
			{
				TimestampTz t = name[0] == 's' ? job->started_at : job->finished_at;

				values[i] = TimestampTzGetDatum(t);
				nulls[i] = t == 0;
			}
			else if (strcmp(name, "error") == 0)
			{
				values[i] = CStringGetTextDatum(job->error);
				nulls[i] = job->error[0] == '\0';
			}
			else if (strcmp(name, "job_kind") == 0)
				values[i] = CStringGetTextDatum("relocate");
			else if (strcmp(name, "old_location") == 0)
			{
				values[i] = CStringGetTextDatum(job->old_location);
				nulls[i] = job->old_location[0] == '\0';
			}
			else if (strcmp(name, "new_location") == 0)
				values[i] = CStringGetTextDatum(job->new_location);
			else if (strcmp(name, "pause_requested") == 0)
				values[i] = BoolGetDatum(job->pause_requested);
			else
				nulls[i] = true;	/* parent_job, new_relfilenodes */
		}
		tuplestore_putvalues(rsinfo->setResult, desc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * tsmove.queue_note() RETURNS text
 *
 * Why this database's queued jobs wait, in words; tsmove.jobs shows it for
 * queued jobs.
 */
Datum
tsm_queue_note_sql(PG_FUNCTION_ARGS)
{
	char		note[TSM_NOTE_LEN];

	tsm_require_preload();
	tsm_queue_note(MyDatabaseId, note, sizeof(note));
	PG_RETURN_TEXT_P(cstring_to_text(note));
}
