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
 * worker (recovery.c) in every database that allows connections; later,
 * one in any database where a worker died inside a job.  That worker
 * finishes or undoes the jobs left behind and marks its database pending
 * if queued jobs remain.  Every TSM_SLOT_CHECK_MS the launcher also looks
 * at the jobs' slots that no worker uses: those of dropped databases it
 * drops, and where one keeps more than pg_tsmove.max_retained_wal, it runs
 * a recovery pass, which fails that job.
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
 * The launcher starts the workers, by name: the recovery worker
 * (recovery.c) and the job workers (worker.c).  Of move/, it calls only
 * queue.c, resume.c (the jobs' slots) and settings.c.
 *
 * Locks: TsmShared->lock, as queue.h says.
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
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "engine/resume.h"
#include "jobs/local_jobs.h"
#include "jobs/queue.h"
#include "relocation/relocation.h"
#include "workers/workers.h"

/* How often the launcher looks at the slots of jobs no worker runs. */
#define TSM_SLOT_CHECK_MS 10000
/* Seconds before the postmaster restarts a launcher that died. */
#define TSM_LAUNCHER_RESTART_S 5
/* Longest sleep of the launcher when nothing wakes it. */
#define TSM_LAUNCHER_NAP_MS 10000
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
	worker.bgw_start_time = BgWorkerStart_ConsistentState;	/* a standby's local jobs */
	worker.bgw_restart_time = TSM_LAUNCHER_RESTART_S;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "pg_tsmove launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "pg_tsmove launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
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
		e = tsm_pending_entry(dbid, true);
		first_failure = (e == NULL || e->failed_starts == 0);
		if (e)
		{
			e->needs_recovery = true;
			tsm_pending_back_off(e, "no background worker slot is free for the "
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
		e = tsm_pending_entry(dbid, false);
		if (e)
		{
			e->failed_starts = 0;
			e->note[0] = '\0';
			tsm_pending_forget_if_idle(e);
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
			tsm_pending_forget_if_idle(e);
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
tsm_start_worker(Oid dbid, int slot_index, bool local)
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
	if (local)
		worker.bgw_start_time = BgWorkerStart_ConsistentState;
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
		if (chosen != NULL && tsm_running_workers_locked() < tsm_max_workers)
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
		if (!tsm_start_worker(dbid, slot_index, false))
		{
			LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
			tsm_shared->slots[slot_index].in_use = false;
			chosen->pending = true;
			tsm_pending_back_off(chosen, "no background worker slot is free: "
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
			TsmPendingDb *e = tsm_pending_entry(slot->dbid, true);

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

/* ---- a hot standby's local jobs (local_jobs.h) ---- */

/* The recovery pass's part for a local job no worker runs. */
static void
recover_local_job(const TsmUnfinishedJob *job, void *arg)
{
	TsmWorkerSlot *running;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	running = tsm_find_slot_for_job(job->job_id);
	LWLockRelease(tsm_shared->lock);
	if (running == NULL)
		tsm_recover_relocation(job);
}

/*
 * Finish or undo the local jobs a crash or a restart interrupted
 * (relocation_recovery.c: the link is the truth), as the recovery worker
 * does for tsmove.job's; at start-up, and again once recovery ends (a
 * promoted standby's worker may have died with the promotion).
 */
static void
tsm_recover_local_jobs(void)
{
	StartTransactionCommand();
	tsm_localjob_foreach_unfinished(recover_local_job, NULL);
	if (!RecoveryInProgress())
	{
		ListCell   *lc;

		/* a local job is a standby's: one that never started never will */
		foreach(lc, tsm_localjob_list())
		{
			TsmLocalJob *job = lfirst(lc);

			if (job->state == TSM_QUEUED || job->state == TSM_PAUSED)
				tsm_localjob_set_state(job->job_id, TSM_FAILED,
									   "the server left recovery before the job started; "
									   "relocate again with tsmove.relocate_tablespace()");
		}
	}
	CommitTransactionCommand();
}

/*
 * Start a worker for the oldest queued local job, if none runs one: one
 * local job at a time.  It connects to the database its job was
 * submitted in.
 */
static void
tsm_dispatch_local(void)
{
	List	   *jobs = tsm_localjob_list();
	ListCell   *lc;
	TsmLocalJob *next = NULL;
	int			slot_index = -1;
	bool		running = false;

	foreach(lc, jobs)
		if (((TsmLocalJob *) lfirst(lc))->state == TSM_QUEUED)
		{
			next = lfirst(lc);
			break;
		}
	if (next == NULL)
		return;
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		if (tsm_shared->slots[i].in_use && tsm_shared->slots[i].local)
			running = true;
		else if (!tsm_shared->slots[i].in_use && slot_index < 0)
			slot_index = i;
	}
	if (running || slot_index < 0)
	{
		LWLockRelease(tsm_shared->lock);
		return;
	}
	{
		TsmWorkerSlot *slot = &tsm_shared->slots[slot_index];

		memset(slot, 0, sizeof(*slot));
		slot->in_use = true;
		slot->local = true;
		slot->dbid = next->dbid;
		slot->launched_at = GetCurrentTimestamp();
		slot->progress.switch_ms = -1;
	}
	LWLockRelease(tsm_shared->lock);
	if (!tsm_database_exists(next->dbid))
	{
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		tsm_shared->slots[slot_index].in_use = false;
		LWLockRelease(tsm_shared->lock);
		tsm_localjob_set_state(next->job_id, TSM_FAILED,
							   "the database it was submitted in no longer exists");
		return;
	}
	if (!tsm_start_worker(next->dbid, slot_index, true))
	{
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		tsm_shared->slots[slot_index].in_use = false;
		LWLockRelease(tsm_shared->lock);
		ereport(WARNING,
				(errmsg("pg_tsmove could not start a worker for local job %lld",
						(long long) next->job_id),
				 errhint("You may need to increase max_worker_processes.")));
	}
}

/* Whether a local job's worker holds a slot (or is being started into one). */
static bool
tsm_local_slot_in_use(void)
{
	bool		in_use = false;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < tsm_shared->nslots; i++)
		if (tsm_shared->slots[i].in_use && tsm_shared->slots[i].local)
			in_use = true;
	LWLockRelease(tsm_shared->lock);
	return in_use;
}

/*
 * One round of the launcher's work while the server is in recovery.  The
 * launcher starts one local worker at a time, so when the one it saw
 * holding a slot (at the end of the last round, the one it had just
 * started included) holds none any more, a local job that has started and
 * not ended is one whose worker died: recover it then (start-up recovered
 * the others), not every round.
 */
static void
tsm_launcher_recovery_round(void)
{
	static bool local_worker_seen = false;

	tsm_reap_launched_workers();
	if (!tsm_local_slot_in_use())
	{
		if (local_worker_seen)
			tsm_recover_local_jobs();
		tsm_dispatch_local();
	}
	local_worker_seen = tsm_local_slot_in_use();
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

	/*
	 * A switch's PANIC that the postmaster forgot (queue.c): every process
	 * was stopped, but crash recovery never replayed the window into the
	 * new files.  Ask again, before anything here touches a relocation
	 * (relocation_standby.c).
	 */
	tsm_standby_crash_if_restart_skipped();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	before_shmem_exit(tsm_launcher_detach, 0);
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_shared->launcher_latch = MyLatch;
	LWLockRelease(tsm_shared->lock);

	tsm_free_stale_slots();
	tsm_recover_local_jobs();

	/*
	 * A hot standby (or a server recovering from an archive with hot
	 * standby on): tsmove.job is not this server's to act on; only its
	 * local jobs run.  Once recovery ends, the rest starts as on a primary.
	 */
	if (RecoveryInProgress())
	{
		while (!ShutdownRequestPending && RecoveryInProgress())
		{
			tsm_launcher_recovery_round();
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1000L, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			if (ConfigReloadPending)
			{
				ConfigReloadPending = false;
				ProcessConfigFile(PGC_SIGHUP);
			}
		}
		if (ShutdownRequestPending)
			proc_exit(0);
		tsm_recover_local_jobs();
	}
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
