/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The move worker: one dynamic background worker per tsmove.move() call,
 *	  running its job (and then the index jobs queued behind it) through
 *
 *	  queued -> preparing -> copying -> catching_up -> switching -> warming
 *	  -> done, or on any error or cancel: cleanup -> failed | cancelled.
 *
 * Design (see DESIGN.md section 2):
 *	- The worker waits for move()'s transaction to end; if it aborted, the job
 *	  never existed.  The job row, with the new relfilenodes chosen, is then
 *	  committed before any file is created.
 *	- A session lock (ShareUpdateExclusiveLock online, ExclusiveLock in
 *	  quiesce mode) is held from preparing to the switch, as CREATE INDEX
 *	  CONCURRENTLY does: DML goes on, anything that would change the
 *	  relfilenode waits, autovacuum skips the relation.
 *	- Every transaction is short; none holds a snapshot or an XID while the
 *	  worker sleeps for the throttle.
 *	- The throttle is a byte budget per second counting the pages written and
 *	  the WAL that logs them; tsmove.set_rate() changes it while running.
 *	- Errors, cancel (tsmove.cancel, pg_cancel_backend) and SIGTERM all end in
 *	  tsm_abort_job(): the new storage is dropped by a committed transaction
 *	  (so standbys drop it too) and the row says why.  A crash leaves that to
 *	  the launcher's recovery pass (launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/tablespace.h"
#include "executor/instrument.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "move.h"

TsmWorkerSlot *tsm_my_slot = NULL;

static volatile sig_atomic_t got_sigterm = false;

/* Blocks copied between two looks at the WAL, the cancel flag and progress. */
#define TSM_BATCH_BLOCKS 64
/* How often progress reaches shared memory, and the rate is sampled. */
#define TSM_PUBLISH_INTERVAL_MS 200
#define TSM_RATE_SAMPLE_MS 1000
/* Credit the throttle may bank while idle: 50 ms worth of the rate. */
#define TSM_BURST_SECONDS 0.05
/* The fastest page-image compression this server was built with. */
#ifdef USE_LZ4
#define TSM_WAL_COMPRESSION "lz4"
#else
#define TSM_WAL_COMPRESSION "pglz"
#endif

/* Rounds whose backlog does not shrink before the view says so. */
#define TSM_STALLED_ROUNDS 3

static void
tsm_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

static void
tsm_release_slot(int code, Datum arg)
{
	if (tsm_my_slot == NULL)
		return;
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_my_slot->in_use = false;
	tsm_my_slot->latch = NULL;
	LWLockRelease(tsm_shared->lock);
}

static double
ms_between(TimestampTz start, TimestampTz stop)
{
	return (double) (stop - start) / 1000.0;
}

void
tsm_set_state(TsmJob *job, TsmJobState state)
{
	job->state = state;
	tsm_publish_progress(job, true);
}

int64
tsm_job_dirty_backlog(TsmJob *job)
{
	int64		backlog = 0;

	for (int i = 0; i < job->nmembers; i++)
	{
		TsmMember  *m = &job->members[i];

		backlog += m->dirty.count;
		if (m->nblocks > m->copy_cursor)
			backlog += m->nblocks - m->copy_cursor;
	}
	return backlog;
}

/*
 * Copy the job's counters to its slot, at most every TSM_PUBLISH_INTERVAL_MS
 * unless forced.
 */
void
tsm_publish_progress(TsmJob *job, bool force)
{
	static TimestampTz last_publish = 0;
	TimestampTz now = GetCurrentTimestamp();
	int64		total = 0;
	int64		copied = 0;
	int64		dirty = 0;
	int64		written = job->bytes_written + job->wal_bytes;

	if (!force && !TimestampDifferenceExceeds(last_publish, now, TSM_PUBLISH_INTERVAL_MS))
		return;
	last_publish = now;

	if (TimestampDifferenceExceeds(job->rate_sample_time, now, TSM_RATE_SAMPLE_MS))
	{
		double		seconds = ms_between(job->rate_sample_time, now) / 1000.0;

		job->rate_mb_s = (written - job->rate_sample_bytes) / seconds / (1024.0 * 1024.0);
		job->rate_sample_time = now;
		job->rate_sample_bytes = written;
	}

	for (int i = 0; i < job->nmembers; i++)
	{
		total += Max(job->members[i].nblocks, job->members[i].copy_cursor);
		copied += job->members[i].copy_cursor;
		dirty += job->members[i].dirty.count;
	}

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_my_slot->state = job->state;
	tsm_my_slot->blocks_total = total;
	tsm_my_slot->blocks_copied = copied;
	tsm_my_slot->blocks_recopied = job->blocks_recopied;
	tsm_my_slot->dirty_backlog = dirty;
	tsm_my_slot->bytes_written = job->bytes_written;
	tsm_my_slot->wal_bytes = job->wal_bytes;
	tsm_my_slot->rate_mb_s = job->rate_mb_s;
	tsm_my_slot->switch_attempts = job->switch_attempts;
	tsm_my_slot->lock_wait_ms = job->lock_wait_ms;
	tsm_my_slot->switch_ms = job->switch_ms;
	strlcpy(tsm_my_slot->note, job->note, sizeof(tsm_my_slot->note));
	LWLockRelease(tsm_shared->lock);
}

static LOCKMODE
tsm_session_lockmode(TsmJob *job)
{
	return job->online ? ShareUpdateExclusiveLock : ExclusiveLock;
}

/*
 * An online move's session lock makes DDL, VACUUM and CREATE INDEX on the
 * relation wait for the whole move, and every query queued behind such a
 * command waits with it.  With pg_tsmove.yield_to_ddl the move gives way:
 * it cancels itself as soon as anyone waits for a lock that conflicts with
 * its own.  Not in quiesce mode, where writers are meant to wait, nor once
 * the switch holds the exclusive lock.
 */
static void
tsm_yield_to_waiting_ddl(TsmJob *job)
{
	if (!tsm_yield_to_ddl || !job->online || !job->session_locked ||
		job->state >= TSM_SWITCHING)
		return;
	for (int i = 0; i < job->nmembers; i++)
	{
		LOCKTAG		tag;

		SET_LOCKTAG_RELATION(tag, MyDatabaseId, job->members[i].relid);
		if (LockHasWaiters(&tag, tsm_session_lockmode(job), true))
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("move cancelled: another session waits for a lock on \"%s\"",
							job->relname),
					 errdetail("With pg_tsmove.yield_to_ddl on, a move gives way to DDL, VACUUM and "
							   "CREATE INDEX, which would otherwise wait for the whole move "
							   "and hold up the queries queued behind them."),
					 errhint("Move it again when that command is done, or set "
							 "pg_tsmove.yield_to_ddl = off to make such commands wait.")));
	}
}

/*
 * React to everything that can reach the worker from outside: interrupts,
 * reloads, SIGTERM, tsmove.cancel(), and rate changes from set_rate().
 * Throws the error that tsm_abort_job() turns into failed or cancelled.
 */
void
tsm_check_for_cancel(TsmJob *job)
{
	bool		cancel;
	double		rate;

	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	if (got_sigterm)
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("move interrupted by server shutdown or pg_terminate_backend()")));

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	cancel = tsm_my_slot->cancel_requested;
	rate = tsm_my_slot->max_rate_mb;
	LWLockRelease(tsm_shared->lock);

	if (cancel)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("move cancelled by tsmove.cancel()")));
	tsm_yield_to_waiting_ddl(job);
	if (rate != job->max_rate_mb)
	{
		job->max_rate_mb = rate;
		job->budget_start = GetCurrentTimestamp();
		job->budget_spent = 0;
	}
}

/* Sleep on the latch, waking for cancel, rate changes and shutdown. */
static void
tsm_sleep(TsmJob *job, long ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	tsm_check_for_cancel(job);
}

/*
 * pg_tsmove.debug_pause_at: hold still for 60 s at a named phase, so that
 * tests can kill the server at moments too short to hit otherwise.  Only
 * the postmaster's death ends the pause early.
 */
void
tsm_debug_pause(TsmJob *job, const char *phase)
{
	if (tsm_debug_pause_at == NULL || strcmp(tsm_debug_pause_at, phase) != 0)
		return;
	ereport(LOG, (errmsg("pg_tsmove: job %lld pauses at %s (pg_tsmove.debug_pause_at)",
						 (long long) job->job_id, phase)));
	(void) WaitLatch(NULL, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 60000L, PG_WAIT_EXTENSION);
}

/*
 * Charge bytes to the job's budget and sleep until the budget allows them.
 * Credit banked while idle is capped, so a pause is never followed by a
 * burst above the rate.
 */
static void
tsm_throttle(TsmJob *job, int64 bytes)
{
	job->budget_spent += bytes;
	while (job->max_rate_mb > 0)
	{
		double		bytes_per_s = job->max_rate_mb * 1024.0 * 1024.0;
		TimestampTz now = GetCurrentTimestamp();
		double		earned = (now - job->budget_start) / 1.0e6 * bytes_per_s;
		double		max_credit = bytes_per_s * TSM_BURST_SECONDS;
		long		sleep_ms;

		if (earned - job->budget_spent > max_credit)
		{
			job->budget_start = now - (TimestampTz)
				((job->budget_spent + max_credit) / bytes_per_s * 1.0e6);
			return;
		}
		if (job->budget_spent <= earned)
			return;
		sleep_ms = (long) ((job->budget_spent - earned) / bytes_per_s * 1000.0);
		if (sleep_ms < 1)
			return;
		tsm_sleep(job, sleep_ms);
		tsm_publish_progress(job, false);
	}
}

/*
 * Count one page just written to the new storage, with the WAL this
 * process wrote since the last call, and throttle if asked to.
 */
void
tsm_account_write(TsmJob *job, bool throttled)
{
	int64		wal_total = pgWalUsage.wal_bytes - job->wal_usage_at_start;
	int64		wal_delta = wal_total - job->wal_bytes;

	job->bytes_written += BLCKSZ;
	job->wal_bytes = wal_total;
	if (throttled)
		tsm_throttle(job, BLCKSZ + wal_delta);
	else
		job->budget_spent += BLCKSZ + wal_delta;
}

/*
 * Save the job's state and counters in its row, in the current transaction.
 * Final states stamp finished_at; the first save stamps started_at.
 */
static void
tsm_save_job(TsmJob *job, TsmJobState state, const char *error)
{
	Oid			argtypes[14] = {INT8OID, TEXTOID, TEXTOID, INT8OID, INT8OID,
		INT8OID, INT8OID, INT8OID, INT4OID, FLOAT8OID, FLOAT8OID,
	OIDARRAYOID, OIDARRAYOID, OIDARRAYOID};
	Datum		values[14];
	char		nulls[14];
	Datum		members[TSM_MAX_MEMBERS];
	Datum		old_nodes[TSM_MAX_MEMBERS];
	Datum		new_nodes[TSM_MAX_MEMBERS];
	int64		total = 0;
	int64		copied = 0;

	for (int i = 0; i < job->nmembers; i++)
	{
		members[i] = ObjectIdGetDatum(job->members[i].relid);
		old_nodes[i] = ObjectIdGetDatum(TSM_REL(job->members[i].old_node));
		new_nodes[i] = ObjectIdGetDatum(TSM_REL(job->members[i].new_node));
		total += Max(job->members[i].nblocks, job->members[i].copy_cursor);
		copied += job->members[i].copy_cursor;
	}

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(job->job_id);
	values[1] = CStringGetTextDatum(tsm_state_name(state));
	if (error)
		values[2] = CStringGetTextDatum(error);
	else
		nulls[2] = 'n';
	values[3] = Int64GetDatum(total);
	values[4] = Int64GetDatum(copied);
	values[5] = Int64GetDatum(job->blocks_recopied);
	values[6] = Int64GetDatum(job->bytes_written);
	values[7] = Int64GetDatum(job->wal_bytes);
	values[8] = Int32GetDatum(job->switch_attempts);
	values[9] = Float8GetDatum(job->lock_wait_ms);
	values[10] = Float8GetDatum(job->switch_ms);
	if (job->switch_ms < 0)
		nulls[10] = 'n';
	if (job->nmembers > 0)
	{
		values[11] = PointerGetDatum(construct_array(members, job->nmembers, OIDOID,
													 sizeof(Oid), true, TYPALIGN_INT));
		values[12] = PointerGetDatum(construct_array(old_nodes, job->nmembers, OIDOID,
													 sizeof(Oid), true, TYPALIGN_INT));
		values[13] = PointerGetDatum(construct_array(new_nodes, job->nmembers, OIDOID,
													 sizeof(Oid), true, TYPALIGN_INT));
	}
	else
		nulls[11] = nulls[12] = nulls[13] = 'n';

	(void) tsm_job_table_update("UPDATE tsmove.job SET state = $2, error = $3, "
								"blocks_total = $4, blocks_copied = $5, blocks_recopied = $6, "
								"bytes_written = $7, wal_bytes = $8, switch_attempts = $9, "
								"lock_wait_ms = $10, switch_ms = $11, "
								"members = coalesce($12, members), "
								"old_relfilenodes = coalesce($13, old_relfilenodes), "
								"new_relfilenodes = coalesce($14, new_relfilenodes), "
								"started_at = coalesce(started_at, pg_catalog.clock_timestamp()), "
								"finished_at = CASE WHEN $2 IN ('done', 'failed', 'cancelled') "
								"THEN pg_catalog.clock_timestamp() END "
								"WHERE job_id = $1",
								14, argtypes, values, nulls);
}

/* The same, in a transaction of its own. */
static void
tsm_save_job_xact(TsmJob *job, TsmJobState state, const char *error)
{
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_save_job(job, state, error);
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * Lock relid in mode without queueing: a queued request would block the
 * DDL and DML behind it.  Retries until granted, watching for cancel.
 * Returns the opened relation, or NULL if it no longer exists.
 */
static Relation
tsm_open_locked(TsmJob *job, Oid relid, LOCKMODE mode)
{
	Relation	rel;

	while (!ConditionalLockRelationOid(relid, mode))
		tsm_sleep(job, 50);
	rel = try_relation_open(relid, NoLock);
	if (rel == NULL)
		UnlockRelationOid(relid, mode);
	return rel;
}

static void
tsm_add_member(TsmJob *job, Relation rel)
{
	TsmMember  *m = &job->members[job->nmembers++];

	Assert(job->nmembers <= TSM_MAX_MEMBERS);
	memset(m, 0, sizeof(*m));
	m->relid = RelationGetRelid(rel);
	m->standard_pages = (rel->rd_rel->relam == HEAP_TABLE_AM_OID ||
						 rel->rd_rel->relam == BTREE_AM_OID);
	m->old_node = TsmRelationNode(rel);
	TSM_SPC(m->new_node) = job->target_spc;
	TSM_DB(m->new_node) = MyDatabaseId;
	TSM_REL(m->new_node) = tsm_new_relfilenumber(job->target_spc,
												 RELPERSISTENCE_PERMANENT);
	LockRelationIdForSession(&rel->rd_lockInfo.lockRelId,
							 tsm_session_lockmode(job));
}

/*
 * preparing: take the session locks, check the relation is what move()
 * saw, choose the new relfilenodes and commit them in the job row, then
 * create the new main forks in a second transaction.
 */
static void
tsm_prepare(TsmJob *job)
{
	LOCKMODE	mode = tsm_session_lockmode(job);
	Relation	rel;
	Oid			current_spc;

	tsm_set_state(job, TSM_PREPARING);
	StartTransactionCommand();
	rel = tsm_open_locked(job, job->relid, mode);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s\" was dropped before its move started",
						job->relname)));
	tsm_check_movable(rel, job->target_spc);
	current_spc = OidIsValid(rel->rd_rel->reltablespace) ?
		rel->rd_rel->reltablespace : MyDatabaseTableSpace;
	if (TSM_REL(TsmRelationNode(rel)) != job->submitted_relfilenode ||
		current_spc != job->source_spc)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("relation \"%s\" was rewritten or moved after its move was submitted",
						job->relname),
				 errhint("Submit the move again.")));

	tsm_add_member(job, rel);
	if (rel->rd_rel->relkind != RELKIND_INDEX &&
		OidIsValid(rel->rd_rel->reltoastrelid))
	{
		Relation	toast = tsm_open_locked(job, rel->rd_rel->reltoastrelid, mode);
		List	   *toast_indexes;

		if (toast == NULL)
			elog(ERROR, "TOAST table of \"%s\" disappeared", job->relname);
		tsm_add_member(job, toast);
		toast_indexes = RelationGetIndexList(toast);
		if (list_length(toast_indexes) != 1)
			elog(ERROR, "TOAST table of \"%s\" has %d indexes",
				 job->relname, list_length(toast_indexes));
		relation_close(toast, NoLock);
		toast = tsm_open_locked(job, linitial_oid(toast_indexes), mode);
		if (toast == NULL)
			elog(ERROR, "TOAST index of \"%s\" disappeared", job->relname);
		tsm_add_member(job, toast);
		relation_close(toast, NoLock);
	}
	job->session_locked = true;
	relation_close(rel, NoLock);

	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_save_job(job, TSM_PREPARING, NULL);
	PopActiveSnapshot();
	CommitTransactionCommand();

	StartTransactionCommand();
	tsm_create_new_storage(job);
	CommitTransactionCommand();
}

/*
 * One pass over the members: copy up to max_blocks pending blocks, in
 * short transactions of TSM_BATCH_BLOCKS, reading the WAL between batches.
 * Returns the number of blocks copied.
 */
static int64
tsm_copy_round(TsmJob *job, int64 max_blocks, bool include_dirty)
{
	int64		copied = 0;

	while (copied < max_blocks)
	{
		int64		batch = 0;

		StartTransactionCommand();
		for (int i = 0; i < job->nmembers && copied + batch < max_blocks; i++)
			batch += tsm_copy_pending(job, &job->members[i],
									  Min(TSM_BATCH_BLOCKS, max_blocks - copied - batch),
									  include_dirty, true);
		CommitTransactionCommand();
		copied += batch;

		tsm_mirror_drain(job);
		tsm_publish_progress(job, false);
		tsm_check_for_cancel(job);
		if (batch == 0)
			break;
	}
	return copied;
}

/* copying: every block once, in order; changes behind the cursor wait. */
static void
tsm_bulk_copy(TsmJob *job)
{
	tsm_set_state(job, TSM_COPYING);
	tsm_copy_round(job, PG_INT64_MAX, false);

	/*
	 * The bulk copy was written without fsync requests; sync it now, with no
	 * lock held, so that the switch has nothing large left to sync.  Later
	 * writes register with the checkpointer like any buffer write.
	 */
	for (int i = 0; i < job->nmembers; i++)
		smgrimmedsync(tsm_smgropen(job->members[i].new_node), MAIN_FORKNUM);
	job->bulk_synced = true;
}

/*
 * catching_up: re-copy dirty blocks until the backlog is small enough for
 * a short switch, then try the switch; when the exclusive lock is not
 * granted in time, back off while mirroring and try again.
 */
static void
tsm_catch_up_and_switch(TsmJob *job)
{
	int64		previous_backlog = -1;
	int			stalled_rounds = 0;
	long		backoff_ms = 0;

	tsm_set_state(job, TSM_CATCHING_UP);
	for (;;)
	{
		int64		backlog;

		tsm_check_for_cancel(job);
		tsm_mirror_drain(job);
		backlog = tsm_job_dirty_backlog(job);

		if (backlog <= tsm_switch_backlog_blocks)
		{
			/* The switch copies the backlog at full speed: pay for it first. */
			tsm_throttle(job, backlog * 2 * BLCKSZ);
			if (tsm_try_switch(job))
				return;
			tsm_set_state(job, TSM_CATCHING_UP);
			backoff_ms = Min(Max(backoff_ms * 2, 50), 1000);
			snprintf(job->note, sizeof(job->note),
					 "switch attempt %d could not get the exclusive lock within %d ms; retrying",
					 job->switch_attempts, tsm_switch_lock_timeout_ms);
			tsm_publish_progress(job, true);
			tsm_sleep(job, backoff_ms + random() % (backoff_ms + 1));
			continue;
		}

		if (previous_backlog >= 0 && backlog >= previous_backlog)
			stalled_rounds++;
		else
			stalled_rounds = 0;
		if (stalled_rounds >= TSM_STALLED_ROUNDS)
			snprintf(job->note, sizeof(job->note),
					 "writes outpace the copy: %lld blocks still dirty at %.1f MB/s; "
					 "raise the rate with tsmove.set_rate()",
					 (long long) backlog, job->max_rate_mb);
		else if (job->switch_attempts == 0)
			job->note[0] = '\0';
		previous_backlog = backlog;

		tsm_copy_round(job, backlog, true);
	}
}

/*
 * Turn an error into the job's end: drop the new storage unless the switch
 * committed, record the state and the message, release the locks.
 */
static void
tsm_abort_job(TsmJob *job, ErrorData *edata)
{
	bool		cancelled = (edata->sqlerrcode == ERRCODE_QUERY_CANCELED);
	bool		switched = (job->state == TSM_WARMING);
	TsmJobState final_state;

	AbortOutOfAnyTransaction();
	tsm_mirror_stop(job);

	if (switched)
		final_state = TSM_DONE;
	else
		final_state = cancelled ? TSM_CANCELLED : TSM_FAILED;

	/*
	 * The new files go first, in a transaction of their own, so that nothing
	 * is orphaned even if the row cannot be written (DROP EXTENSION, say).
	 */
	if (job->storage_created && !switched)
	{
		StartTransactionCommand();
		for (int i = 0; i < job->nmembers; i++)
			tsm_drop_storage(job->members[i].new_node);
		(void) GetCurrentTransactionId();	/* the commit record drops them */
		CommitTransactionCommand();
		job->storage_created = false;
	}

	job->state = final_state;
	PG_TRY();
	{
		tsm_save_job_xact(job, final_state, edata->message);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		ereport(WARNING,
				(errmsg("pg_tsmove could not record the end of job %lld (%s)",
						(long long) job->job_id, tsm_state_name(final_state))));
	}
	PG_END_TRY();
	tsm_publish_progress(job, true);

	if (job->session_locked)
	{
		LockReleaseSession(DEFAULT_LOCKMETHOD);
		job->session_locked = false;
	}
}

/*
 * Load a queued job's row.  Returns false if the job is not queued any more
 * (cancelled while it waited behind its chain).
 */
static bool
tsm_load_job(TsmJob *job, int64 job_id)
{
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(job_id);
	Oid			save_userid;
	int			save_sec;
	bool		found = false;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_run_as_superuser_begin(&save_userid, &save_sec);
	SPI_connect();
	if (SPI_execute_with_args("UPDATE tsmove.job SET state = 'preparing', "
							  "started_at = pg_catalog.clock_timestamp() "
							  "WHERE job_id = $1 AND state = 'queued' "
							  "RETURNING relid, relname, mode, target_tablespace, "
							  "max_rate_mb::float8, old_relfilenodes[1], source_tablespace",
							  1, &argtype, &arg, NULL, false, 1) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not read tsmove.job");
	if (SPI_processed == 1)
	{
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *mode;

		job->job_id = job_id;
		job->relid = DatumGetObjectId(SPI_getbinval(tuple, desc, 1, &isnull));
		job->relname = MemoryContextStrdup(job->cxt, SPI_getvalue(tuple, desc, 2));
		mode = SPI_getvalue(tuple, desc, 3);
		job->online = (strcmp(mode, "online") == 0);
		job->target_spc = DatumGetObjectId(SPI_getbinval(tuple, desc, 4, &isnull));
		job->target_name = MemoryContextStrdup(job->cxt,
											   get_tablespace_name(job->target_spc));
		job->max_rate_mb = DatumGetFloat8(SPI_getbinval(tuple, desc, 5, &isnull));
		job->submitted_relfilenode = DatumGetObjectId(SPI_getbinval(tuple, desc, 6, &isnull));
		job->source_spc = DatumGetObjectId(SPI_getbinval(tuple, desc, 7, &isnull));
		found = true;
	}
	SPI_finish();
	tsm_run_as_superuser_end(save_userid, save_sec);
	PopActiveSnapshot();
	CommitTransactionCommand();
	return found;
}

/*
 * Claim the job's relation in the worker's slot: one running job per
 * relation.  Errors out if another worker runs a job on it.
 */
static void
tsm_claim_relation(TsmJob *job)
{
	int64		other_job = 0;

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *s = &tsm_shared->slots[i];

		if (s != tsm_my_slot && s->in_use && s->dbid == MyDatabaseId &&
			s->relid == job->relid)
			other_job = s->job_id;
	}
	tsm_my_slot->job_id = job->job_id;
	tsm_my_slot->relid = job->relid;
	tsm_my_slot->max_rate_mb = job->max_rate_mb;
	tsm_my_slot->switch_ms = -1;
	tsm_my_slot->note[0] = '\0';
	LWLockRelease(tsm_shared->lock);

	if (other_job != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("relation \"%s\" is already being moved by job %lld",
						job->relname, (long long) other_job)));
}

/* Run one job to its end.  Never throws. */
static void
tsm_run_job(int64 job_id)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "pg_tsmove job",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	TsmJob	   *job = palloc0(sizeof(TsmJob));

	job->cxt = cxt;
	job->switch_ms = -1;
	job->state = TSM_QUEUED;
	job->wal_usage_at_start = pgWalUsage.wal_bytes;
	job->budget_start = job->rate_sample_time = GetCurrentTimestamp();

	PG_TRY();
	{
		if (tsm_load_job(job, job_id))
		{
			tsm_claim_relation(job);
			job->strategy = GetAccessStrategy(BAS_BULKREAD);
			tsm_prepare(job);
			tsm_mirror_start(job);
			tsm_bulk_copy(job);
			tsm_catch_up_and_switch(job);
			LockReleaseSession(DEFAULT_LOCKMETHOD);
			job->session_locked = false;
			tsm_mirror_stop(job);
			tsm_debug_pause(job, "warming");
			tsm_warm_new_storage(job);
			job->state = TSM_DONE;
			job->note[0] = '\0';
			tsm_save_job_xact(job, TSM_DONE, NULL);
			tsm_publish_progress(job, true);
			ereport(LOG,
					(errmsg("pg_tsmove: job %lld moved \"%s\" to tablespace \"%s\": "
							"%lld blocks, %lld re-copied, exclusive lock held %.1f ms",
							(long long) job->job_id, job->relname,
							job->target_name,
							(long long) tsm_my_slot->blocks_total,
							(long long) job->blocks_recopied, job->switch_ms)));
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		tsm_abort_job(job, edata);
		RESUME_INTERRUPTS();
	}
	PG_END_TRY();

	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(cxt);
}

/* The next index job queued behind chain_head, or 0. */
static int64
tsm_next_chained_job(int64 chain_head)
{
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(chain_head);
	Oid			save_userid;
	int			save_sec;
	int64		next = 0;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_run_as_superuser_begin(&save_userid, &save_sec);
	SPI_connect();
	if (SPI_execute_with_args("SELECT job_id FROM tsmove.job WHERE parent_job = $1 "
							  "AND state = 'queued' ORDER BY job_id LIMIT 1",
							  1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read tsmove.job");
	if (SPI_processed == 1)
	{
		bool		isnull;

		next = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										   SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	tsm_run_as_superuser_end(save_userid, save_sec);
	PopActiveSnapshot();
	CommitTransactionCommand();
	return next;
}

/*
 * Wait until move()'s transaction ends; true if it committed (the job
 * exists), false if it aborted.
 */
static bool
tsm_wait_for_submitter(TransactionId xid)
{
	bool		committed;

	for (;;)
	{
		bool		running;

		StartTransactionCommand();
		running = TransactionIdIsInProgress(xid);
		CommitTransactionCommand();
		if (!running)
			break;
		if (got_sigterm)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	StartTransactionCommand();
	committed = TransactionIdDidCommit(xid);
	CommitTransactionCommand();
	return committed;
}

/*
 * Every page a move copies is logged as a full-page image, and that WAL is
 * most of what the move costs the commits running beside it: they wait for
 * the WAL writes and syncs it adds.  Unless the DBA chose a wal_compression
 * already, the worker compresses its own page images (a session setting:
 * the rest of the server is unaffected), which also lets the byte budget
 * copy more pages per second.
 */
static void
tsm_compress_page_images(void)
{
	const char *current = GetConfigOption("wal_compression", false, false);

	if (current != NULL && strcmp(current, "off") == 0)
		SetConfigOption("wal_compression", TSM_WAL_COMPRESSION,
						PGC_SUSET, PGC_S_SESSION);
}

void
tsm_worker_main(Datum main_arg)
{
	int			slot_index = DatumGetInt32(main_arg);
	Oid			dbid;
	Oid			user_id;
	int64		chain_head;
	TransactionId submit_xid;

	pqsignal(SIGTERM, tsm_sigterm);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	tsm_my_slot = &tsm_shared->slots[slot_index];
	before_shmem_exit(tsm_release_slot, 0);

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	dbid = tsm_my_slot->dbid;
	user_id = tsm_my_slot->user_id;
	chain_head = tsm_my_slot->chain_head;
	submit_xid = tsm_my_slot->submit_xid;
	tsm_my_slot->pid = MyProcPid;
	tsm_my_slot->latch = MyLatch;
	LWLockRelease(tsm_shared->lock);

	/*
	 * Connect as the bootstrap superuser, which can always log in, and act
	 * as the submitting role from then on; the job table is written as the
	 * superuser (tsm_run_as_superuser_begin).
	 */
	BackgroundWorkerInitializeConnectionByOid(dbid, BOOTSTRAP_SUPERUSERID, 0);
	tsm_compress_page_images();
	SetUserIdAndSecContext(user_id, SECURITY_LOCAL_USERID_CHANGE);
	pgstat_report_appname("pg_tsmove");

	if (!tsm_wait_for_submitter(submit_xid))
		proc_exit(0);

	for (int64 job_id = chain_head; job_id != 0 && !got_sigterm;
		 job_id = tsm_next_chained_job(chain_head))
		tsm_run_job(job_id);

	proc_exit(0);
}
