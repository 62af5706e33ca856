/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The move worker: a dynamic background worker the launcher starts in a
 *	  database with queued jobs.  It claims them one at a time, oldest first
 *	  (a table's index jobs right behind it), runs each through
 *
 *	  queued -> preparing -> copying -> catching_up -> switching -> warming
 *	  -> done, or on any error or cancel: cleanup -> failed | cancelled,
 *
 *	  and exits when nothing is left that it can run.
 *
 * Design (see DESIGN.md section 2):
 *	- A job is claimed by marking its row 'preparing' (jobrecord.c); the
 *	  worker then chooses the new relfilenodes and commits them in the row
 *	  before it creates any file.
 *	- The worker connects as the bootstrap superuser and overrides what the
 *	  database owner could have set for it (ALTER DATABASE ... SET
 *	  search_path, default_transaction_isolation, ...).  It runs each job
 *	  as the role that submitted it, in a security-restricted operation,
 *	  after checking again that this role still owns the relation and may
 *	  create in the target tablespace.
 *	- A session lock (ShareUpdateExclusiveLock online, ExclusiveLock in
 *	  quiesce mode) is held from preparing to the switch, as CREATE INDEX
 *	  CONCURRENTLY does: DML goes on, anything that would change the
 *	  relfilenode waits, autovacuum skips the relation.
 *	- Every transaction is short; none holds a snapshot or an XID while the
 *	  worker sleeps for the throttle.
 *	- The throttle is a byte budget per second counting the pages written and
 *	  the WAL that logs them; tsmove.set_rate() changes it while running.
 *	- Errors, cancel (tsmove.cancel, pg_cancel_backend) and SIGTERM all end in
 *	  tsm_abort_job(): unless the switch's commit record was written, the new
 *	  storage is dropped by a committed transaction (so standbys drop it too)
 *	  and the row says why; a failed or cancelled job ends its chain.  A
 *	  worker that dies inside a job leaves it to the recovery pass
 *	  (launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_authid.h"
#include "commands/extension.h"
#include "commands/tablespace.h"
#include "executor/instrument.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "jobrecord.h"
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
/* How long pg_tsmove.debug_pause_at holds the worker still. */
#define TSM_DEBUG_PAUSE_MS 60000
/* The fastest page-image compression this server was built with. */
#ifdef USE_LZ4
#define TSM_WAL_COMPRESSION "lz4"
#else
#define TSM_WAL_COMPRESSION "pglz"
#endif

/* Rounds whose backlog does not shrink before the view says so. */
#define TSM_STALLED_ROUNDS 3

/*
 * Session settings the worker always runs with, whatever ALTER DATABASE
 * ... SET or ALTER ROLE ... SET say: names resolve in pg_catalog only;
 * job rows are written read-committed and durably (a row that names new
 * files must reach the WAL before the files exist); lock waits are the
 * worker's own choice.
 */
static const char *const worker_settings[][2] = {
	{"search_path", "pg_catalog, pg_temp"},
	{"default_transaction_isolation", "read committed"},
	{"default_transaction_read_only", "off"},
	{"default_transaction_deferrable", "off"},
	{"synchronous_commit", "on"},
	{"lock_timeout", "0"},
	{"session_replication_role", "origin"},
};

static void
tsm_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

/*
 * before_shmem_exit: free the slot and tell the launcher how the worker
 * ended.  Not finding anything to claim is the normal end; any other (a
 * failed connection, SIGTERM) leaves queued jobs that need another worker,
 * and a worker that dies inside a job leaves it to the recovery pass.
 */
static void
tsm_release_slot(int code, Datum arg)
{
	Oid			dbid;
	bool		queue_empty;
	bool		died_in_job;

	if (tsm_my_slot == NULL)
		return;
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	dbid = tsm_my_slot->dbid;
	queue_empty = tsm_my_slot->queue_empty;
	died_in_job = tsm_my_slot->job_id != 0 &&
		!tsm_state_is_final(tsm_my_slot->progress.state);
	tsm_my_slot->in_use = false;
	tsm_my_slot->latch = NULL;
	tsm_my_slot->pid = 0;
	tsm_my_slot->job_id = 0;
	LWLockRelease(tsm_shared->lock);
	tsm_worker_exited(dbid, queue_empty, died_in_job);
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

/* The job's counters as the view and the row show them. */
static void
tsm_job_progress_of(TsmJob *job, TsmProgress *p)
{
	memset(p, 0, sizeof(*p));
	p->state = job->state;
	for (int i = 0; i < job->nmembers; i++)
	{
		p->blocks_total += Max(job->members[i].nblocks, job->members[i].copy_cursor);
		p->blocks_copied += job->members[i].copy_cursor;
		p->dirty_backlog += job->members[i].dirty.count;
	}
	p->blocks_recopied = job->blocks_recopied;
	p->bytes_written = job->bytes_written;
	p->wal_bytes = job->wal_bytes;
	p->rate_mb_s = job->rate_mb_s;
	p->switch_attempts = job->switch_attempts;
	p->lock_wait_ms = job->lock_wait_ms;
	p->switch_ms = job->switch_ms;
	strlcpy(p->note, job->note, sizeof(p->note));
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
	int64		written = job->bytes_written + job->wal_bytes;
	TsmProgress progress;

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

	tsm_job_progress_of(job, &progress);
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_my_slot->progress = progress;
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
	cancel = (tsm_my_slot->cancel_job_id == job->job_id);
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
 * pg_tsmove.debug_pause_at: hold still for a minute at a named phase, so
 * that tests can kill the server at moments too short to hit otherwise.
 * The pause answers cancel, SIGTERM and the postmaster's death like any
 * sleep of the worker: a lock held here is never held beyond them.
 */
void
tsm_debug_pause(TsmJob *job, const char *phase)
{
	TimestampTz until;

	if (tsm_debug_pause_at == NULL || strcmp(tsm_debug_pause_at, phase) != 0)
		return;
	ereport(LOG, (errmsg("pg_tsmove: job %lld pauses at %s (pg_tsmove.debug_pause_at)",
						 (long long) job->job_id, phase)));
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), TSM_DEBUG_PAUSE_MS);
	while (GetCurrentTimestamp() < until)
		tsm_sleep(job, 100);
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

/* Save the job's state and counters in its row, in a transaction of its own. */
static void
tsm_save_job_xact(TsmJob *job, const char *error)
{
	TsmProgress progress;

	tsm_job_progress_of(job, &progress);
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_save(job->job_id, &progress, error);
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
 * preparing: check again that the submitting role may move the relation,
 * take the session locks, check the relation is what move() saw, choose
 * the new relfilenodes and commit them in the job row, then create the new
 * main forks in a second transaction.
 */
static void
tsm_prepare(TsmJob *job)
{
	LOCKMODE	mode = tsm_session_lockmode(job);
	Relation	rel;
	Oid			current_spc;
	char	   *relname;
	Oid			members[TSM_MAX_MEMBERS];
	TsmRelFileNumber old_nodes[TSM_MAX_MEMBERS];
	TsmRelFileNumber new_nodes[TSM_MAX_MEMBERS];

	tsm_set_state(job, TSM_PREPARING);
	StartTransactionCommand();
	relname = get_rel_name(job->relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s\" was dropped before its move started",
						job->relname)));
	tsm_check_move_privileges(job->relid, relname, job->target_spc,
							  job->submitted_by);
	rel = tsm_open_locked(job, job->relid, mode);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s\" was dropped before its move started",
						job->relname)));
	tsm_check_move_privileges(job->relid, relname, job->target_spc,
							  job->submitted_by);
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

	for (int i = 0; i < job->nmembers; i++)
	{
		members[i] = job->members[i].relid;
		old_nodes[i] = TSM_REL(job->members[i].old_node);
		new_nodes[i] = TSM_REL(job->members[i].new_node);
	}
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_record_storage(job->job_id, job->nmembers, members, old_nodes,
							  new_nodes);
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
	/* sync the bulk copy now, with no lock held: the switch syncs little */
	tsm_sync_new_storage(job);
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
			/* and what was re-copied since the last sync is synced unlocked */
			tsm_sync_new_storage(job);
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
 * Turn an error into the job's end: drop the new storage unless the
 * switch's commit record was written, record the state and the message,
 * release the locks.
 */
static void
tsm_abort_job(TsmJob *job, ErrorData *edata)
{
	bool		cancelled = (edata->sqlerrcode == ERRCODE_QUERY_CANCELED);
	bool		switched = job->switch_committed;
	const char *message = edata->message;

	AbortOutOfAnyTransaction();
	tsm_mirror_stop(job);

	/*
	 * The new files go first, in a transaction of their own, so that nothing
	 * is orphaned even if the row cannot be written (DROP EXTENSION, say).
	 * tsm_drop_storage() itself refuses files pg_class uses.
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

	if (switched)
	{
		job->state = TSM_DONE;
		message = psprintf("moved; then stopped while warming the cache: %s",
						   edata->message);
	}
	else
		job->state = cancelled ? TSM_CANCELLED : TSM_FAILED;

	PG_TRY();
	{
		tsm_save_job_xact(job, message);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		ereport(WARNING,
				(errmsg("pg_tsmove could not record the end of job %lld (%s)",
						(long long) job->job_id, tsm_state_name(job->state))));
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
 * Claim the next job this worker can run, and publish it in the slot
 * before the claim commits.  Returns false if none can run now.  If more
 * could, wakes the launcher, which may start a second worker.  (Not
 * inlined into tsm_run_next_job(), whose PG_TRY would make its locals
 * volatile.)
 */
pg_noinline static bool
tsm_claim_job(TsmJob *job)
{
	TsmClaimedJob claimed;
	bool		found;
	bool		more = false;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(job->cxt);
	found = tsm_jobrec_claim_next(&claimed);
	if (found)
	{
		job->job_id = claimed.job_id;
		job->relid = claimed.relid;
		job->relname = claimed.relname;
		job->online = claimed.online;
		job->source_spc = claimed.source_spc;
		job->target_spc = claimed.target_spc;
		job->target_name = MemoryContextStrdup(job->cxt,
											   get_tablespace_name(job->target_spc));
		job->max_rate_mb = claimed.max_rate_mb;
		job->submitted_relfilenode = claimed.submitted_relfilenode;
		job->submitted_by = claimed.submitted_by;

		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		tsm_my_slot->job_id = job->job_id;
		tsm_my_slot->relid = job->relid;
		tsm_my_slot->max_rate_mb = job->max_rate_mb;
		memset(&tsm_my_slot->progress, 0, sizeof(TsmProgress));
		tsm_my_slot->progress.state = TSM_PREPARING;
		tsm_my_slot->progress.switch_ms = -1;
		LWLockRelease(tsm_shared->lock);

		more = tsm_jobrec_has_claimable();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	if (more)
		tsm_mark_database_pending(MyDatabaseId, false);
	return found;
}

/*
 * Claim and run one job to its end.  Never throws.  Returns false if there
 * was no job to claim.
 */
static bool
tsm_run_next_job(void)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "pg_tsmove job",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	TsmJob	   *job = palloc0(sizeof(TsmJob));
	bool		claimed;

	job->cxt = cxt;
	job->switch_ms = -1;
	job->state = TSM_QUEUED;

	claimed = tsm_claim_job(job);
	MemoryContextSwitchTo(cxt);
	if (claimed)
	{
		job->state = TSM_PREPARING;
		job->wal_usage_at_start = pgWalUsage.wal_bytes;
		job->budget_start = job->rate_sample_time = GetCurrentTimestamp();
		SetUserIdAndSecContext(job->submitted_by,
							   SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
		PG_TRY();
		{
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
			tsm_save_job_xact(job, NULL);
			tsm_publish_progress(job, true);
			ereport(LOG,
					(errmsg("pg_tsmove: job %lld moved \"%s\" to tablespace \"%s\": "
							"%lld blocks, %lld re-copied, exclusive lock held %.1f ms",
							(long long) job->job_id, job->relname,
							job->target_name,
							(long long) tsm_my_slot->progress.blocks_total,
							(long long) job->blocks_recopied, job->switch_ms)));
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
		SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID, 0);

		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		tsm_my_slot->job_id = 0;
		tsm_my_slot->relid = InvalidOid;
		LWLockRelease(tsm_shared->lock);
	}

	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(cxt);
	return claimed;
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

/*
 * The settings of worker_settings, and page-image compression.  Also used
 * by the recovery worker (launcher.c).
 */
void
tsm_worker_session_settings(void)
{
	for (int i = 0; i < lengthof(worker_settings); i++)
		SetConfigOption(worker_settings[i][0], worker_settings[i][1],
						PGC_SUSET, PGC_S_SESSION);
	tsm_compress_page_images();
}

/* Whether pg_tsmove is installed in the database the worker is in. */
static bool
tsm_extension_installed(void)
{
	bool		installed;

	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid("pg_tsmove", true));
	CommitTransactionCommand();
	return installed;
}

void
tsm_worker_main(Datum main_arg)
{
	int			slot_index = DatumGetInt32(main_arg);
	Oid			dbid;

	pqsignal(SIGTERM, tsm_sigterm);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	tsm_my_slot = &tsm_shared->slots[slot_index];
	before_shmem_exit(tsm_release_slot, 0);

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	dbid = tsm_my_slot->dbid;
	tsm_my_slot->pid = MyProcPid;
	tsm_my_slot->latch = MyLatch;
	LWLockRelease(tsm_shared->lock);

	/*
	 * Connect as the bootstrap superuser, which can always log in; each job
	 * runs as its submitter, and the job table is written as the superuser
	 * (jobrecord.c).
	 */
	BackgroundWorkerInitializeConnectionByOid(dbid, BOOTSTRAP_SUPERUSERID, 0);
	tsm_worker_session_settings();
	pgstat_report_appname("pg_tsmove");

	if (!tsm_extension_installed())
	{
		tsm_my_slot->queue_empty = true;
		proc_exit(0);
	}
	while (!got_sigterm)
	{
		if (!tsm_run_next_job())
		{
			LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
			tsm_my_slot->queue_empty = true;
			LWLockRelease(tsm_shared->lock);
			break;
		}
	}
	proc_exit(0);
}
