/*-------------------------------------------------------------------------
 *
 * vacuum_look.c
 *	  Which VACUUMs read the file system a job reads from.
 *
 * A lazy VACUUM (autovacuum's or a user's) reads a whole table, an ANALYZE
 * a sample of its pages at random (after autovacuum's vacuum of a table,
 * often its analyze), and on a busy disk the other sessions lose much of their throughput to it; a
 * move that reads the same disk meanwhile adds to their loss (in the
 * evaluation, the update streams fell from 55-60 % to 44-47 % of their
 * warm-up rate with the copy at its floor beside autovacuum).  Two things
 * hold off while one runs: a switch's line-ups (switch_blockers.c) and,
 * while the pace is what keeps the others from suffering more, the copy
 * itself (worker.c).  Both are hints for throughput, bounded in time: a
 * VACUUM that starts just after a look is not held off, and nothing that
 * is copied depends on it.
 *
 * The PGPROCs' flags are read first, without a lock (a hint); only when a
 * VACUUM or an autovacuum worker is in this database is each backend's
 * status read for the table it works on (pg_stat_progress_vacuum's and
 * pg_stat_progress_analyze's), and its tablespace
 * looked up.  The same file system is the same st_dev of the tablespace
 * directories.  A relocation's worker looks only in its own database.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "access/xact.h"
#include "catalog/pg_tablespace_d.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/backend_progress.h"
#include "utils/backend_status.h"
#include "utils/lsyscache.h"

#include "jobs/jobs.h"
#include "jobs/job_control.h"
#include "engine/vacuum_look.h"

/*
 * The file system a tablespace's files of this database are on; false if
 * its directory cannot be looked at (a tablespace being dropped).
 */
static bool
tablespace_device(Oid spc, dev_t *dev)
{
	char		path[MAXPGPATH];
	struct stat st;

	if (!OidIsValid(spc))
		spc = MyDatabaseTableSpace;
	if (spc == DEFAULTTABLESPACE_OID)
		strlcpy(path, "base", sizeof(path));
	else if (spc == GLOBALTABLESPACE_OID)
		strlcpy(path, "global", sizeof(path));
	else
		snprintf(path, sizeof(path), "pg_tblspc/%u", spc);
	if (stat(path, &st) != 0)
		return false;
	*dev = st.st_dev;
	return true;
}

/*
 * Whether, by the PGPROCs' flags (read without a lock: a hint), an
 * autovacuum worker is in this database, and whether a lazy VACUUM runs
 * in it (an autovacuum worker's included).
 */
void
tsm_vacuums_in_this_database(bool *autovacuum, bool *vacuum)
{
	*autovacuum = *vacuum = false;
	for (int i = 0; i < ProcGlobal->allProcCount; i++)
	{
		volatile PGPROC *proc = GetPGProcByNumber(i);
		uint8		flags = proc->statusFlags;

		/*
		 * A live process: 15's ProcKill() leaves pid, databaseId and
		 * statusFlags in a slot it frees (an autovacuum worker's looked
		 * like one at work until the slot was reused), but disowns its
		 * latch on every version.
		 */
		if (proc->pid == 0 || proc->procLatch.owner_pid != proc->pid ||
			proc->databaseId != MyDatabaseId)
			continue;
		*autovacuum |= (flags & PROC_IS_AUTOVACUUM) != 0;
		*vacuum |= (flags & PROC_IN_VACUUM) != 0;
	}
}

/*
 * The table a lazy VACUUM or an ANALYZE of this database (autovacuum's or
 * not) works on, on the file system of source_spc; InvalidOid if none.
 * *command says which ("VACUUM", "ANALYZE").  Needs a transaction (the
 * syscache).
 */
Oid
tsm_vacuumed_table_on(Oid source_spc, const char **command)
{
	dev_t		source_dev;
	int			nbackends;
	Oid			found = InvalidOid;

	if (!OidIsValid(source_spc))
		source_spc = MyDatabaseTableSpace;
	if (!tablespace_device(source_spc, &source_dev))
		return InvalidOid;
	pgstat_clear_backend_activity_snapshot();
	nbackends = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= nbackends && !OidIsValid(found); i++)
	{
		LocalPgBackendStatus *local = tsm_local_backend_status(i);
		PgBackendStatus *be;
		Oid			relid;
		Oid			spc;
		dev_t		dev;

		if (local == NULL)
			continue;
		be = &local->backendStatus;
		if (be->st_databaseid != MyDatabaseId ||
			(be->st_progress_command != PROGRESS_COMMAND_VACUUM &&
			 be->st_progress_command != PROGRESS_COMMAND_ANALYZE))
			continue;
		relid = be->st_progress_command_target;
		if (!OidIsValid(relid))
			continue;
		spc = get_rel_tablespace(relid);	/* InvalidOid: the default, or gone */
		if (!OidIsValid(spc))
			spc = MyDatabaseTableSpace;
		if (spc == source_spc ||
			(tablespace_device(spc, &dev) && dev == source_dev))
		{
			found = relid;
			*command = be->st_progress_command == PROGRESS_COMMAND_ANALYZE ?
				"ANALYZE" : "VACUUM";
		}
	}
	pgstat_clear_backend_activity_snapshot();
	return found;
}

/*
 * The same, outside a transaction: the PGPROCs first, and only when a
 * lazy VACUUM or an autovacuum worker (which also analyzes) is in this
 * database a transaction of the job's to find its table.  A user's ANALYZE
 * sets no flag: it is seen only beside one of those.
 */
Oid
tsm_vacuum_reading(Oid source_spc, const char **command)
{
	bool		autovacuum;
	bool		vacuum;
	Oid			relid;

	Assert(!IsTransactionState());
	tsm_vacuums_in_this_database(&autovacuum, &vacuum);
	if (!vacuum && !autovacuum)
		return InvalidOid;
	tsm_job_start_transaction();
	relid = tsm_vacuumed_table_on(source_spc, command);
	CommitTransactionCommand();
	return relid;
}
