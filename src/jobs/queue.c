/*-------------------------------------------------------------------------
 *
 * queue.c
 *	  The move engine's shared state: one slot per running worker (the
 *	  job it runs, its live counters, what it was asked), the databases
 *	  whose queue needs the launcher, and the budget all workers share.
 *
 * The queue itself is the job table (queue.h says how a job gets from its
 * row to a worker).  Here is what every part of the engine reads or
 * changes in shared memory: tsmove.move() and the workers mark a database
 * pending and wake the launcher; a worker that exits says why; the SQL
 * functions find the slot of a job to cancel, pause or watch it; the
 * launcher claims slots and chooses the database to start a worker in
 * (launcher.c).  _PG_init's shared-memory hooks (pg_tsmove.c) size and
 * create it.
 *
 * This file is at the bottom of move/: it calls only settings.c.
 *
 * Locks: TsmShared->lock, as queue.h says.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#include "jobs/queue.h"

/* Longest back-off before a database whose worker failed is retried. */
#define TSM_MAX_BACKOFF_S 60

TsmShared  *tsm_shared = NULL;

Size
tsm_queue_shmem_size(void)
{
	return add_size(offsetof(TsmShared, slots),
					mul_size(max_worker_processes, sizeof(TsmWorkerSlot)));
}

/*
 * Create or attach the shared state, in the shared-memory start-up hook,
 * under AddinShmemInitLock.  Its locks are the "pg_tsmove" tranche that
 * _PG_init requested.
 */
void
tsm_queue_shmem_init(void)
{
	bool		found;

	tsm_shared = ShmemInitStruct("pg_tsmove", tsm_queue_shmem_size(), &found);
	if (!found)
	{
		memset(tsm_shared, 0, tsm_queue_shmem_size());
		tsm_shared->lock = &(GetNamedLWLockTranche("pg_tsmove"))[0].lock;
		tsm_shared->local_jobs_lock = &(GetNamedLWLockTranche("pg_tsmove"))[1].lock;
		tsm_shared->nslots = max_worker_processes;
		pg_atomic_init_u32(&tsm_shared->crash_requested, 0);
	}
}

/* Just before a PANIC that only crash recovery can make good. */
void
tsm_note_crash_requested(void)
{
	if (tsm_shared != NULL)
		pg_atomic_write_u32(&tsm_shared->crash_requested, 1);
}

/*
 * Whether such a PANIC happened and the server did not restart.  The
 * postmaster forgets a crash when the startup process ends normally right
 * after it (it then "commences normal operations", postmaster.c): all
 * processes were stopped, but this shared memory was kept and crash
 * recovery never ran.  A restart clears the flag with the memory.
 */
bool
tsm_crash_was_skipped(void)
{
	return tsm_shared != NULL && pg_atomic_read_u32(&tsm_shared->crash_requested) != 0;
}

/*
 * Error out unless the library was loaded by shared_preload_libraries: the
 * worker slots and the crash-recovery launcher exist only then.
 */
void
tsm_require_preload(void)
{
	if (tsm_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_tsmove must be loaded via shared_preload_libraries"),
				 errhint("Add pg_tsmove to shared_preload_libraries in postgresql.conf and restart the server.")));
}

/* ---- the pending-database table ---- */

/*
 * The entry of dbid, created if create; NULL if absent or the table is
 * full.  This and the next two: caller holds TsmShared->lock exclusively
 * (shared to look only).
 */
TsmPendingDb *
tsm_pending_entry(Oid dbid, bool create)
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
void
tsm_pending_back_off(TsmPendingDb *e, const char *note)
{
	int			backoff_s = 1 << Min(++e->failed_starts, 6);

	e->not_before = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												Min(backoff_s, TSM_MAX_BACKOFF_S) * 1000);
	strlcpy(e->note, note, sizeof(e->note));
}

void
tsm_pending_forget_if_idle(TsmPendingDb *e)
{
	if (!e->pending && !e->needs_recovery && e->note[0] == '\0')
		e->dbid = InvalidOid;
}

void
tsm_wake_launcher(void)
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
	e = tsm_pending_entry(dbid, true);
	if (e)
	{
		e->pending = true;
		e->needs_recovery |= needs_recovery;
	}
	LWLockRelease(tsm_shared->lock);
	tsm_wake_launcher();
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
	e = tsm_pending_entry(dbid, !queue_empty || died_in_job);
	if (e && !queue_empty)
	{
		e->pending = true;
		tsm_pending_back_off(e, "a worker stopped before the queue was empty; "
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
		tsm_pending_forget_if_idle(e);
	LWLockRelease(tsm_shared->lock);
	tsm_wake_launcher();
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
	e = tsm_pending_entry(dbid, false);
	pending = (e != NULL && (e->pending || e->needs_recovery)) ||
		tsm_shared->pending_overflow || tsm_shared->launcher_latch == NULL;
	LWLockRelease(tsm_shared->lock);
	return pending;
}

/* Number of running workers; caller holds the lock. */
int
tsm_running_workers_locked(void)
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
	running = tsm_running_workers_locked();
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
	e = tsm_pending_entry(dbid, false);
	running = tsm_running_workers_locked();
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

/* The slot running a job of this database, or NULL; caller holds the lock. */
TsmWorkerSlot *
tsm_find_slot_for_job(int64 job_id)
{
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *slot = &tsm_shared->slots[i];

		/* a local job's worker (a standby's relocation) is in any database */
		if (slot->in_use && slot->job_id == job_id &&
			(slot->dbid == MyDatabaseId || slot->local))
			return slot;
	}
	return NULL;
}

/*
 * The tablespaces that running relocations relocate (a worker has claimed
 * the job and not yet let go of it), with their jobs; at most max.  Any
 * backend may ask, in any database.
 */
int
tsm_running_relocations(Oid *spcs, int64 *jobs, int max)
{
	int			n = 0;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < tsm_shared->nslots && n < max; i++)
	{
		TsmWorkerSlot *s = &tsm_shared->slots[i];

		if (s->in_use && s->job_id != 0 && s->kind == TSM_KIND_RELOCATE)
		{
			spcs[n] = s->target_spc;
			jobs[n++] = s->job_id;
		}
	}
	LWLockRelease(tsm_shared->lock);
	return n;
}
