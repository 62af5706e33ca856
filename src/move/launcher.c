/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher: it runs the queue, and cleans up after crashes.
 *
 * The launcher is a static background worker registered by _PG_init.  It
 * starts whenever the server accepts connections, including after crash
 * recovery (a worker with a restart interval is restarted after a crash;
 * one that exited with status 0 would be forgotten, so it stays alive until
 * shutdown).  It connects to no database.
 *
 * Recovery.  At start-up it runs, one database at a time, a recovery
 * worker in every database that allows connections; later, one in any
 * database where a worker died inside a job.  The recovery worker does
 * nothing where pg_tsmove is not installed; elsewhere, for every job that
 * started, has not ended and is not run by a live worker:
 *	- if the switch committed (row says 'warming', or pg_class already
 *	  points at a new relfilenode) the old relfilenodes recorded in the row
 *	  are dropped (the worker drops them last, relation_move.c) and the job is
 *	  marked done;
 *	- a relation move that can resume (pg_tsmove.resume_after_restart, a
 *	  resume point, its slot still keeping the WAL from there, no FSM or
 *	  VM fork created by a switch) is queued again, and the next worker
 *	  takes it up where it was (resume.c); one that had created nothing
 *	  yet is simply queued again;
 *	- otherwise the new relfilenodes recorded in the row are dropped with
 *	  RelationDropStorage (WAL replay recreated whatever the dead worker had
 *	  written; the commit record removes it, on standbys too), its slot and
 *	  resume point with them, and the job is marked failed, with the jobs
 *	  chained behind it;
 *	- a tablespace relocation is finished or undone by relocation.c, as the
 *	  tablespace's link says.
 * Then it removes the slots and resume points of jobs that have ended, and,
 * if the database has queued jobs, marks the database pending.  Every
 * TSM_SLOT_CHECK_MS the launcher also looks at the jobs' slots that no
 * worker uses: those of dropped databases it drops, and where one keeps
 * more than pg_tsmove.max_retained_wal, it runs a recovery pass, which
 * fails that job.
 *
 * The queue.  A database is pending when it may have queued jobs that no
 * worker runs: tsmove.move() marks it at commit, a worker that claimed a
 * job and saw more marks it, and so does a worker that stops before its
 * queue is empty (with a back-off, so that a database whose workers cannot
 * connect is retried, slowly, not in a loop).  While fewer than
 * pg_tsmove.max_workers workers run, the launcher takes a free slot,
 * starts a worker in the oldest pending database and clears the mark; the
 * worker frees the slot when it exits, which wakes the launcher
 * (bgw_notify_pid).  A registered worker that never ran frees nothing, so
 * the launcher keeps the handles of the workers it starts and frees such
 * slots itself.
 *
 * Locks: TsmShared->lock, as pg_tsmove.h says.  The recovery worker takes
 * no relation locks; it never drops a relfilenode that pg_class maps.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/relfilenodemap.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "move/frontend.h"
#include "move/job_record.h"
#include "move/resume.h"

/* How often the launcher looks at the slots of jobs no worker runs. */
#define TSM_SLOT_CHECK_MS 10000
/* Seconds before the postmaster restarts a launcher that died. */
#define TSM_LAUNCHER_RESTART_S 5
/* Longest sleep of the launcher when nothing wakes it. */
#define TSM_LAUNCHER_NAP_MS 10000
/* Longest back-off before a database whose worker failed is retried. */
#define TSM_MAX_BACKOFF_S 60
/* A slot whose worker has not run after this long was never started. */
#define TSM_STALE_SLOT_MS 10000

/* A worker this launcher started, to notice one that never ran. */
typedef struct LaunchedWorker
{
	int			slot_index;
	TimestampTz launched_at;
	BackgroundWorkerHandle *handle;
} LaunchedWorker;

static List *launched_workers = NIL;

void
tsm_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = TSM_LAUNCHER_RESTART_S;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "pg_tsmove launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "pg_tsmove launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* ---- the pending-database table (caller holds TsmShared->lock) ---- */

/* The entry of dbid, created if create; NULL if absent or the table is full. */
static TsmPendingDb *
pending_entry(Oid dbid, bool create)
{
	TsmPendingDb *free_entry = NULL;

	for (int i = 0; i < TSM_MAX_PENDING_DBS; i++)
	{
		TsmPendingDb *e = &tsm_shared->pending[i];

		if (e->dbid == dbid)
			return e;
		if (!OidIsValid(e->dbid) && free_entry == NULL)
			free_entry = e;
	}
	if (!create)
		return NULL;
	if (free_entry == NULL)
	{
		tsm_shared->pending_overflow = true;
		return NULL;
	}
	memset(free_entry, 0, sizeof(*free_entry));
	free_entry->dbid = dbid;
	return free_entry;
}

/* Try again later: each failure doubles the wait, up to a minute. */
static void
pending_entry_back_off(TsmPendingDb *e, const char *note)
{
	int			backoff_s = 1 << Min(++e->failed_starts, 6);

	e->not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												Min(backoff_s, TSM_MAX_BACKOFF_S) * 1000);
	strlcpy(e->note, note, sizeof(e->note));
}

static void
pending_entry_forget_if_idle(TsmPendingDb *e)
{
	if (!e->pending && !e->needs_recovery && e->note[0] == '\0')
		e->dbid = InvalidOid;
}

static void
wake_launcher(void)
{
	Latch	   *latch;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	latch = tsm_shared->launcher_latch;
	LWLockRelease(tsm_shared->lock);
	if (latch)
		SetLatch(latch);
}

/*
 * Mark a database pending: it may have queued jobs without a worker, or
 * (needs_recovery) a job whose worker died.  Called at commit of a
 * transaction that submitted jobs, by workers and by the recovery pass.
 */
void
tsm_mark_database_pending(Oid dbid, bool needs_recovery)
{
	TsmPendingDb *e;

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	e = pending_entry(dbid, true);
	if (e)
	{
		e->pending = true;
		e->needs_recovery |= needs_recovery;
	}
	LWLockRelease(tsm_shared->lock);
	wake_launcher();
}

/*
 * A worker of dbid exited (tsm_release_slot).  If its queue was not empty,
 * the database needs another worker, after a back-off; if it died inside
 * a job, a recovery pass.
 */
void
tsm_worker_exited(Oid dbid, bool queue_empty, bool died_in_job)
{
	TsmPendingDb *e;

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	e = pending_entry(dbid, !queue_empty || died_in_job);
	if (e && !queue_empty)
	{
		e->pending = true;
		pending_entry_back_off(e, "a worker stopped before the queue was empty; "
							   "retrying, see the server log");
	}
	else if (e)
	{
		e->failed_starts = 0;
		e->note[0] = '\0';
	}
	if (e && died_in_job)
		e->needs_recovery = true;
	if (e)
		pending_entry_forget_if_idle(e);
	LWLockRelease(tsm_shared->lock);
	wake_launcher();
}

/*
 * Whether the launcher has work noted for dbid: a worker to start or a
 * recovery pass to run (tsmove.wait() asks, to tell a job whose worker is
 * gone for good from one about to be taken up).
 */
bool
tsm_database_has_pending_work(Oid dbid)
{
	bool		pending;
	TsmPendingDb *e;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	e = pending_entry(dbid, false);
	pending = (e != NULL && (e->pending || e->needs_recovery)) ||
		tsm_shared->pending_overflow || tsm_shared->launcher_latch == NULL;
	LWLockRelease(tsm_shared->lock);
	return pending;
}

/* Number of running workers; caller holds the lock. */
static int
running_workers_locked(void)
{
	int			running = 0;

	for (int i = 0; i < tsm_shared->nslots; i++)
		if (tsm_shared->slots[i].in_use)
			running++;
	return running;
}

int
tsm_running_workers(void)
{
	int			running;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	running = running_workers_locked();
	LWLockRelease(tsm_shared->lock);
	return running;
}

/* Why the queued jobs of dbid wait, in words, for tsmove.jobs. */
void
tsm_queue_note(Oid dbid, char *note, Size len)
{
	TsmPendingDb *e;
	int			running;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	e = pending_entry(dbid, false);
	running = running_workers_locked();
	if (e && e->note[0] != '\0')
		strlcpy(note, e->note, len);
	else if (tsm_shared->launcher_latch == NULL)
		strlcpy(note, "waiting for the pg_tsmove launcher to start", len);
	else if (tsm_max_workers == 0)
		strlcpy(note, "pg_tsmove.max_workers is 0: no job starts", len);
	else if (running >= tsm_max_workers)
		snprintf(note, len, "waiting for a free worker (%d of pg_tsmove.max_workers = %d running)",
				 running, tsm_max_workers);
	else
		strlcpy(note, "waiting for its worker to start", len);
	LWLockRelease(tsm_shared->lock);
}

/* ---- recovery ---- */

/* OIDs of the databases, or only of those that accept connections. */
static List *
tsm_database_list(bool connectable_only)
{
	List	   *dbids = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	MemoryContext outer = CurrentMemoryContext;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);
		MemoryContext old;

		if (connectable_only && !db->datallowconn)
			continue;
		old = MemoryContextSwitchTo(outer);
		dbids = lappend_oid(dbids, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return dbids;
}

/* Run the recovery worker for one database and wait for it to finish. */
static void
tsm_recover_database(Oid dbid)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	pid_t		pid;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_recovery_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "pg_tsmove recovery of database %u", dbid);
	strlcpy(worker.bgw_type, "pg_tsmove recovery", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(dbid);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		TsmPendingDb *e;
		bool		first_failure;

		/* try again later, and say so once */
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		e = pending_entry(dbid, true);
		first_failure = (e == NULL || e->failed_starts == 0);
		if (e)
		{
			e->needs_recovery = true;
			pending_entry_back_off(e, "no background worker slot is free for the "
								   "recovery pass: raise max_worker_processes");
		}
		LWLockRelease(tsm_shared->lock);
		if (first_failure)
			ereport(WARNING,
					(errmsg("pg_tsmove could not start the recovery of database %u", dbid),
					 errhint("You may need to increase max_worker_processes.")));
		return;
	}
	if (WaitForBackgroundWorkerStartup(handle, &pid) == BGWH_STARTED)
	{
		TsmPendingDb *e;

		(void) WaitForBackgroundWorkerShutdown(handle);
		/* workers start again: forget earlier failures to start one */
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		e = pending_entry(dbid, false);
		if (e)
		{
			e->failed_starts = 0;
			e->note[0] = '\0';
			pending_entry_forget_if_idle(e);
		}
		LWLockRelease(tsm_shared->lock);
	}
	pfree(handle);
}

/* Recovery of every database, at start-up and when pending[] overflowed. */
static void
tsm_recover_all_databases(void)
{
	ListCell   *lc;

	foreach(lc, tsm_database_list(true))
	{
		if (ShutdownRequestPending)
			proc_exit(0);
		tsm_recover_database(lfirst_oid(lc));
	}
}

/*
 * Recovery of the databases flagged for it (a worker died inside a job, or
 * the recovery could not start), each at most once per call.
 */
static void
tsm_recover_flagged_databases(void)
{
	Oid			dbids[TSM_MAX_PENDING_DBS];
	int			ndbids = 0;
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < TSM_MAX_PENDING_DBS; i++)
	{
		TsmPendingDb *e = &tsm_shared->pending[i];

		if (OidIsValid(e->dbid) && e->needs_recovery && e->not_before <= now)
		{
			dbids[ndbids++] = e->dbid;
			e->needs_recovery = false;
			pending_entry_forget_if_idle(e);
		}
	}
	LWLockRelease(tsm_shared->lock);
	for (int i = 0; i < ndbids; i++)
		tsm_recover_database(dbids[i]);
}

/* How long the launcher may sleep before a back-off ends. */
static long
tsm_launcher_nap_ms(void)
{
	long		nap_ms = TSM_LAUNCHER_NAP_MS;
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < TSM_MAX_PENDING_DBS; i++)
	{
		TsmPendingDb *e = &tsm_shared->pending[i];

		if (OidIsValid(e->dbid) && (e->pending || e->needs_recovery) &&
			e->not_before > now)
		{
			long		secs;
			int			usecs;

			TimestampDifference(now, e->not_before, &secs, &usecs);
			nap_ms = Min(nap_ms, secs * 1000 + usecs / 1000 + 1);
		}
	}
	LWLockRelease(tsm_shared->lock);
	return nap_ms;
}

/*
 * Every TSM_SLOT_CHECK_MS: drop the slots of jobs of databases that no
 * longer exist, and run a recovery pass where a waiting job's slot keeps
 * too much WAL.
 */
static void
tsm_check_job_slots(void)
{
	static TimestampTz last_check = 0;
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	if (!TimestampDifferenceExceeds(last_check, now, TSM_SLOT_CHECK_MS))
		return;
	last_check = now;
	foreach(lc, tsm_resume_check_slots(tsm_database_list(false)))
		tsm_mark_database_pending(lfirst_oid(lc), true);
}

/* ---- dispatching ---- */

/* Whether dbid exists (a worker that cannot connect to it is retried). */
static bool
tsm_database_exists(Oid dbid)
{
	return list_member_oid(tsm_database_list(false), dbid);
}

/*
 * Start a worker in dbid in a free slot.  Returns false, with the slot
 * free again, if no background worker could be registered.
 */
static bool
tsm_start_worker(Oid dbid, int slot_index)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	LaunchedWorker *launched;
	MemoryContext oldcxt;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "pg_tsmove worker in database %u", dbid);
	strlcpy(worker.bgw_type, "pg_tsmove worker", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slot_index);
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return false;
	oldcxt = MemoryContextSwitchTo(TopMemoryContext);
	launched = palloc(sizeof(LaunchedWorker));
	launched->slot_index = slot_index;
	launched->launched_at = tsm_shared->slots[slot_index].launched_at;
	launched->handle = handle;
	launched_workers = lappend(launched_workers, launched);
	MemoryContextSwitchTo(oldcxt);
	return true;
}

/*
 * Start workers for pending databases while slots and pg_tsmove.max_workers
 * allow.
 */
static void
tsm_dispatch(void)
{
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		TsmPendingDb *chosen = NULL;
		Oid			dbid;
		int			slot_index = -1;

		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		for (int i = 0; i < TSM_MAX_PENDING_DBS; i++)
		{
			TsmPendingDb *e = &tsm_shared->pending[i];

			if (!OidIsValid(e->dbid) || !e->pending)
				continue;
			if (e->not_before > now)
				continue;
			chosen = e;
			break;
		}
		if (chosen != NULL && running_workers_locked() < tsm_max_workers)
		{
			for (int i = 0; i < tsm_shared->nslots && slot_index < 0; i++)
				if (!tsm_shared->slots[i].in_use)
					slot_index = i;
		}
		if (slot_index < 0)
		{
			LWLockRelease(tsm_shared->lock);
			return;
		}

		dbid = chosen->dbid;
		chosen->pending = false;
		{
			TsmWorkerSlot *slot = &tsm_shared->slots[slot_index];

			memset(slot, 0, sizeof(*slot));
			slot->in_use = true;
			slot->dbid = dbid;
			slot->launched_at = now;
			slot->progress.switch_ms = -1;
		}
		LWLockRelease(tsm_shared->lock);

		if (!tsm_database_exists(dbid))
		{
			LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
			tsm_shared->slots[slot_index].in_use = false;
			chosen->dbid = InvalidOid;	/* dropped: its jobs went with it */
			LWLockRelease(tsm_shared->lock);
			continue;
		}
		if (!tsm_start_worker(dbid, slot_index))
		{
			LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
			tsm_shared->slots[slot_index].in_use = false;
			chosen->pending = true;
			pending_entry_back_off(chosen, "no background worker slot is free: "
								   "raise max_worker_processes");
			LWLockRelease(tsm_shared->lock);
			return;
		}
	}
}

/*
 * Free the slots of workers that were registered but never ran (the
 * postmaster could not start them), and forget workers that have stopped.
 */
static void
tsm_reap_launched_workers(void)
{
	ListCell   *lc;

	foreach(lc, launched_workers)
	{
		LaunchedWorker *launched = (LaunchedWorker *) lfirst(lc);
		pid_t		pid;
		TsmWorkerSlot *slot = &tsm_shared->slots[launched->slot_index];
		bool		never_ran = false;
		Oid			dbid = InvalidOid;

		if (GetBackgroundWorkerPid(launched->handle, &pid) != BGWH_STOPPED)
			continue;
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		if (slot->in_use && slot->pid == 0 &&
			slot->launched_at == launched->launched_at)
		{
			slot->in_use = false;
			never_ran = true;
			dbid = slot->dbid;
		}
		LWLockRelease(tsm_shared->lock);
		if (never_ran)
			tsm_worker_exited(dbid, false, false);
		pfree(launched->handle);
		pfree(launched);
		launched_workers = foreach_delete_current(launched_workers, lc);
	}
}

/*
 * A launcher that restarts has lost the handles of the workers its
 * predecessor started: free the slots whose worker is gone.
 */
static void
tsm_free_stale_slots(void)
{
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *slot = &tsm_shared->slots[i];

		if (!slot->in_use)
			continue;
		if ((slot->pid == 0 &&
			 TimestampDifferenceExceeds(slot->launched_at, now, TSM_STALE_SLOT_MS)) ||
			(slot->pid != 0 && kill(slot->pid, 0) != 0 && errno == ESRCH))
		{
			TsmPendingDb *e = pending_entry(slot->dbid, true);

			slot->in_use = false;
			if (e)
			{
				e->pending = true;
				e->needs_recovery = true;
			}
		}
	}
	LWLockRelease(tsm_shared->lock);
}

static void
tsm_launcher_detach(int code, Datum arg)
{
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_shared->launcher_latch = NULL;
	LWLockRelease(tsm_shared->lock);
}

void
tsm_launcher_main(Datum main_arg)
{
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	before_shmem_exit(tsm_launcher_detach, 0);
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_shared->launcher_latch = MyLatch;
	LWLockRelease(tsm_shared->lock);

	tsm_free_stale_slots();
	tsm_recover_all_databases();

	while (!ShutdownRequestPending)
	{
		bool		overflow;
		long		nap_ms;

		tsm_reap_launched_workers();
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		overflow = tsm_shared->pending_overflow;
		tsm_shared->pending_overflow = false;
		LWLockRelease(tsm_shared->lock);
		if (overflow)
			tsm_recover_all_databases();
		tsm_check_job_slots();
		tsm_recover_flagged_databases();
		tsm_dispatch();
		nap_ms = tsm_launcher_nap_ms();

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 nap_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		/* absorbs procsignal barriers: DROP TABLESPACE waits for them */
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	proc_exit(0);
}

/* ---- the recovery worker ---- */

/* Whether a live worker slot runs this job. */
static bool
tsm_job_has_worker(int64 job_id)
{
	bool		found;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	found = (tsm_find_slot_for_job(job_id) != NULL);
	LWLockRelease(tsm_shared->lock);
	return found;
}

/* Whether a move whose worker stopped can resume; if not, why. */
static bool
tsm_move_can_resume(const TsmUnfinishedJob *job, const char **why)
{
	*why = NULL;
	if (!tsm_resume_after_restart)
		*why = "pg_tsmove.resume_after_restart is off";
	else if (job->mode == TSM_MODE_EXCLUSIVE)
		*why = "a move in exclusive mode does not resume";
	else if (!tsm_resume_exists(MyDatabaseId, job->job_id))
		*why = "it had no resume point";
	else
		(void) tsm_resume_slot_usable(MyDatabaseId, job->job_id, why);
	for (int i = 0; i < job->nnew && *why == NULL; i++)
	{
		TsmRelFileNode node;
		SMgrRelation dest;

		TSM_SPC(node) = job->target_spc;
		TSM_DB(node) = MyDatabaseId;
		TSM_REL(node) = job->new_relfilenodes[i];
		dest = tsm_smgropen(node);
		if (!smgrexists(dest, MAIN_FORKNUM))
			*why = "its new files are missing";
		else if (smgrexists(dest, FSM_FORKNUM) || smgrexists(dest, VISIBILITYMAP_FORKNUM))
			*why = "it was interrupted during its switch";
	}
	return *why == NULL;
}

/*
 * Finish off one job left behind; runs in the recovery transaction.  arg
 * points to a bool set when the job is queued again (the transaction's
 * snapshot would not see that).
 */
static void
tsm_recover_job(const TsmUnfinishedJob *job, void *arg)
{
	bool	   *requeued = (bool *) arg;
	bool		switched = (job->state == TSM_WARMING);
	const char *why;

	if (tsm_job_has_worker(job->job_id))
		return;
	if (job->kind == TSM_KIND_RELOCATE)
	{
		tsm_recover_relocation(job);
		return;
	}

	/*
	 * A relfilenode pg_class maps is never dropped, whatever the row says.
	 * If it is mapped, the switch committed (and the row's 'warming' was
	 * lost with it only if something is badly wrong): leave the files.
	 */
	for (int i = 0; i < job->nnew && !switched; i++)
		if (OidIsValid(RelidByRelfilenode(job->target_spc == MyDatabaseTableSpace ?
										  InvalidOid : job->target_spc,
										  job->new_relfilenodes[i])))
			switched = true;

	if (switched)
	{
		/* the old files, which the worker drops last (relation_move.c) */
		tsm_drop_storage_set(job->source_spc, job->old_relfilenodes, job->nold);
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 "the server stopped after the switch, before the move finished; "
							 "the old files were removed");
		tsm_resume_drop_slot(MyDatabaseId, job->job_id);
		tsm_resume_forget(MyDatabaseId, job->job_id);
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had switched when its worker stopped; marked done",
						(long long) job->job_id)));
		return;
	}
	if (job->nnew == 0 && tsm_resume_after_restart)
	{
		/* nothing was created yet: it can start again from the queue */
		tsm_jobrec_requeue_to_resume(job->job_id);
		*requeued = true;
		tsm_resume_drop_slot(MyDatabaseId, job->job_id);
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted before it created anything; queued again",
						(long long) job->job_id)));
		return;
	}
	if (tsm_move_can_resume(job, &why))
	{
		tsm_jobrec_requeue_to_resume(job->job_id);
		*requeued = true;
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted; queued again to resume from its resume point",
						(long long) job->job_id)));
		return;
	}
	tsm_drop_storage_set(job->target_spc, job->new_relfilenodes, job->nnew);
	tsm_resume_drop_slot(MyDatabaseId, job->job_id);
	tsm_resume_forget(MyDatabaseId, job->job_id);
	tsm_jobrec_set_state(job->job_id, TSM_FAILED,
						 psprintf("interrupted by a server crash, shutdown or pg_terminate_backend(); "
								  "its new files were removed (it could not resume: %s)", why));
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld was interrupted and could not resume (%s); removed %d new relation file sets",
					(long long) job->job_id, why, job->nnew)));
}

void
tsm_recovery_main(Datum main_arg)
{
	Oid			dbid = DatumGetObjectId(main_arg);
	bool		queued = false;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, BOOTSTRAP_SUPERUSERID, 0);
	tsm_worker_session_settings();
	pgstat_report_appname("pg_tsmove recovery");

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("pg_tsmove", true)))
	{
		tsm_jobrec_foreach_unfinished(tsm_recover_job, &queued);
		tsm_resume_remove_orphans(dbid, tsm_jobrec_is_unfinished);
		queued |= tsm_jobrec_has_queued();
	}
	else
		tsm_resume_remove_orphans(dbid, NULL);
	PopActiveSnapshot();
	CommitTransactionCommand();
	if (queued)
		tsm_mark_database_pending(dbid, false);
	proc_exit(0);
}
