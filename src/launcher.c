/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  Start-up recovery: finish off the jobs a crash (or an immediate
 *	  shutdown) left half-way, so that no new file is ever orphaned.
 *
 * The launcher is a static background worker registered by _PG_init.  It
 * starts whenever the server accepts connections, including after crash
 * recovery (a worker with a restart interval is restarted after a crash;
 * one that exited with status 0 would be forgotten, so it stays alive,
 * asleep, until shutdown).  It reads pg_database (it connects to no
 * database) and starts, one at a time, a recovery worker in each database
 * that allows connections.  The recovery worker does nothing where
 * pg_tsmove is not installed; elsewhere, for every job row not in a final
 * state and not run by a live worker slot:
 *	- if the switch committed (row says 'warming', or pg_class already
 *	  points at the new relfilenode) the job is marked done;
 *	- otherwise the new relfilenodes recorded in the row are dropped with
 *	  RelationDropStorage (WAL replay recreated whatever the dead worker had
 *	  written; the commit record removes it, on standbys too) and the job is
 *	  marked failed.
 *
 * Locks: the recovery worker takes no relation locks; it never drops a
 * relfilenode that pg_class maps, and shared slots are read under the
 * shared lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/relfilenodemap.h"
#include "utils/snapmgr.h"

#include "move.h"

/* Seconds before the postmaster restarts a launcher that died. */
#define TSM_LAUNCHER_RESTART_S 5

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

/* OIDs of the databases that accept connections. */
static List *
tsm_database_list(void)
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

		if (!db->datallowconn)
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
		ereport(WARNING,
				(errmsg("pg_tsmove could not start the recovery of database %u", dbid),
				 errhint("You may need to increase max_worker_processes.")));
		return;
	}
	if (WaitForBackgroundWorkerStartup(handle, &pid) == BGWH_STARTED)
		(void) WaitForBackgroundWorkerShutdown(handle);
}

void
tsm_launcher_main(Datum main_arg)
{
	ListCell   *lc;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	foreach(lc, tsm_database_list())
	{
		if (ShutdownRequestPending)
			proc_exit(0);
		tsm_recover_database(lfirst_oid(lc));
	}

	/* Stay, so that the postmaster restarts the launcher after a crash. */
	while (!ShutdownRequestPending)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH, -1L,
						 PG_WAIT_EXTENSION);
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

/* Whether a live worker slot runs this job or the chain it belongs to. */
static bool
tsm_job_has_worker(int64 job_id, int64 parent_job)
{
	bool		found = false;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *s = &tsm_shared->slots[i];

		if (s->in_use && s->dbid == MyDatabaseId &&
			(s->job_id == job_id || s->chain_head == job_id ||
			 (parent_job != 0 && s->chain_head == parent_job)))
			found = true;
	}
	LWLockRelease(tsm_shared->lock);
	return found;
}

/* Finish off one job left behind; runs in the caller's transaction. */
static void
tsm_recover_job(int64 job_id, const char *state, Oid target_spc,
				ArrayType *new_nodes)
{
	Datum	   *new_oids = NULL;
	int			nnew = 0;
	bool		switched = (strcmp(state, "warming") == 0);

	if (new_nodes)
		deconstruct_array(new_nodes, OIDOID, sizeof(Oid), true, TYPALIGN_INT,
						  &new_oids, NULL, &nnew);

	/*
	 * A relfilenode pg_class maps is never dropped, whatever the row says.
	 * If it is mapped, the switch committed (and the row's 'warming' was
	 * lost with it only if something is badly wrong): leave the files.
	 */
	for (int i = 0; i < nnew && !switched; i++)
		if (OidIsValid(RelidByRelfilenode(target_spc == MyDatabaseTableSpace ?
										  InvalidOid : target_spc,
										  DatumGetObjectId(new_oids[i]))))
			switched = true;

	if (switched)
	{
		tsm_job_update_state(job_id, TSM_DONE,
							 "the server stopped after the switch, before warming finished");
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had switched when the server stopped; marked done",
						(long long) job_id)));
		return;
	}
	for (int i = 0; i < nnew; i++)
	{
		TsmRelFileNode node;

		TSM_SPC(node) = target_spc;
		TSM_DB(node) = MyDatabaseId;
		TSM_REL(node) = DatumGetObjectId(new_oids[i]);
		tsm_drop_storage(node);
	}
	tsm_job_update_state(job_id, TSM_FAILED,
						 "interrupted by a server crash or shutdown; its new files were removed");
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld was interrupted; removed %d new relation file sets",
					(long long) job_id, nnew)));
}

void
tsm_recovery_main(Datum main_arg)
{
	Oid			dbid = DatumGetObjectId(main_arg);
	Oid			save_userid;
	int			save_sec;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, BOOTSTRAP_SUPERUSERID, 0);
	pgstat_report_appname("pg_tsmove recovery");

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("pg_tsmove", true)))
	{
		SPITupleTable *jobs;
		uint64		njobs;

		tsm_run_as_superuser_begin(&save_userid, &save_sec);
		SPI_connect();
		if (SPI_execute("SELECT job_id, state, target_tablespace, "
						"new_relfilenodes, coalesce(parent_job, 0) FROM tsmove.job "
						"WHERE state NOT IN ('done', 'failed', 'cancelled') "
						"ORDER BY job_id FOR UPDATE", false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read tsmove.job");
		jobs = SPI_tuptable;
		njobs = SPI_processed;
		for (uint64 i = 0; i < njobs; i++)
		{
			HeapTuple	tuple = jobs->vals[i];
			TupleDesc	desc = jobs->tupdesc;
			bool		isnull;
			int64		job_id = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
			char	   *state = SPI_getvalue(tuple, desc, 2);
			Oid			target_spc = DatumGetObjectId(SPI_getbinval(tuple, desc, 3, &isnull));
			Datum		new_nodes = SPI_getbinval(tuple, desc, 4, &isnull);
			ArrayType  *new_arr = isnull ? NULL : DatumGetArrayTypeP(new_nodes);
			int64		parent_job = DatumGetInt64(SPI_getbinval(tuple, desc, 5, &isnull));

			if (tsm_job_has_worker(job_id, parent_job))
				continue;
			tsm_recover_job(job_id, state, target_spc, new_arr);
		}
		SPI_finish();
		tsm_run_as_superuser_end(save_userid, save_sec);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	proc_exit(0);
}
