/*-------------------------------------------------------------------------
 *
 * recovery.c
 *	  The recovery worker: it finishes or undoes, in one database, the jobs
 *	  that a crash, a shutdown or a dead worker left half done.
 *
 * The launcher (launcher.c) starts it in every database at start-up, and
 * later in any database where a worker died inside a job or a waiting
 * job's slot keeps too much WAL.  It does nothing where pg_tsmove is not
 * installed; elsewhere, for every job that started, has not ended and is
 * not run by a live worker:
 *	- if the switch committed (row says 'warming', or pg_class already
 *	  points at a new relfilenode) the old relfilenodes recorded in the row
 *	  are dropped (the worker drops them last, relation_move.c) and the job
 *	  is marked done;
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
 *	- a tablespace relocation is finished or undone by
 *	  relocation_recovery.c, as the tablespace's link says.
 * Then it removes the slots and resume points of jobs that have ended, and,
 * if the database has queued jobs, marks the database pending.
 *
 * Calls relocation_recovery.c, relation_storage.c, resume.c, job_record.c,
 * job_control.c (the session settings), queue.c and settings.c; nothing
 * calls it: the launcher starts it by name.
 *
 * Locks: it takes no relation locks; it never drops a relfilenode that
 * pg_class maps.  TsmShared->lock, shared, to see whether a live worker
 * runs a job.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/smgr.h"
#include "tcop/tcopprot.h"
#include "utils/snapmgr.h"

#include "engine/relation_storage.h"
#include "engine/resume.h"
#include "jobs/job_control.h"
#include "jobs/job_record.h"
#include "relocation/relocation.h"
#include "workers/workers.h"

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
		if (OidIsValid(tsm_relid_by_relfilenumber(job->target_spc == MyDatabaseTableSpace ?
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
