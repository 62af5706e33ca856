/*-------------------------------------------------------------------------
 *
 * relocation_guard.c
 *	  The creation guard: nothing creates a file or a database directory in
 *	  a tablespace between a relocation's last look at it and its rename.
 *
 * The switch lists the old location's files under its locks, then renames
 * the link.  Relation locks cover every change of an existing relation's
 * storage (a new relfilenode, a new fork, a truncation), but not storage
 * that a command creates for a relation the switch has not seen: CREATE
 * TABLE/INDEX/MATERIALIZED VIEW ... TABLESPACE, default_tablespace,
 * temp_tablespaces, CREATE TABLE AS, a partition, a TOAST table,
 * CREATE DATABASE copying a template's files.  A file created there after
 * the last look and before the rename stays in the old location, which
 * the relocation then removes.
 *
 * So every utility statement that can create storage anywhere takes the
 * guard, one heavyweight lock for the whole cluster (LOCKTAG_OBJECT on
 * pg_tablespace with object 0, which no core code locks), in
 * AccessShareLock, as a session lock held from its start to its end (a
 * statement may commit inside: CREATE INDEX CONCURRENTLY, VACUUM).  The
 * switch takes it in AccessExclusiveLock, first, within
 * pg_tsmove.switch_lock_timeout, and holds it until its transaction ends,
 * after the rename (relocation_switch.c).  So such a statement either ended
 * before the switch's last look, which then sees its files (and waits for
 * its transaction if it has not committed), or starts after the switch:
 * it waits milliseconds, and creates its files through the new link.  The
 * guard is taken whether or not a relocation runs, so no statement can
 * slip between a look at what runs and the lock.  Statements that create
 * no storage (transaction control, SET, SHOW, cursors, COPY, LOCK, plain
 * VACUUM and ANALYZE, ...) and those that only run others (DO, CALL, whose
 * statements take the guard themselves) do not take it.  Not guarded:
 * storage created by C code that bypasses ProcessUtility (another
 * extension's background worker calling heap_create()).
 *
 * Database-level commands copy, move or remove whole directories: CREATE
 * DATABASE whose template has files in a tablespace being relocated, or
 * whose default tablespace it is, ALTER DATABASE ... SET TABLESPACE into
 * it, and DROP DATABASE of a database with files in it are refused for the
 * whole relocation (from the worker's claim to its end), under the guard;
 * one that started before the claim is waited for before any file is
 * listed (tsm_guard_drain).
 *
 * The switch takes the guard last, after the relations, without waiting:
 * a statement holding it may wait for one of those relations (its
 * transaction wrote to it, then runs DDL), and waiting for the guard while
 * holding them would deadlock.  A statement that runs long anywhere (a big
 * CREATE INDEX, VACUUM FULL) postpones the switch, which names it;
 * pg_tsmove.switch_cancel_blockers_after does not apply to it.
 *
 * Called by pg_tsmove.c (the hook) and relocation_switch.c (the switch's
 * lock); calls jobs/queue.c for the running relocations.
 *
 * Locks: the guard above; TsmShared->lock shared, briefly, to read the
 * slots.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>

#include "catalog/pg_database.h"	/* get_database_oid() from 19 on */
#include "catalog/pg_tablespace.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/tablespace.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/lsyscache.h"

#include "jobs/job_control.h"
#include "jobs/queue.h"
#include "relocation/relocation.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/* The guard's lock tag: pg_tablespace's object 0, shared by every database. */
void
tsm_guard_locktag(LOCKTAG *tag)
{
	SET_LOCKTAG_OBJECT(*tag, InvalidOid, TableSpaceRelationId, InvalidOid, 0);
}

/* Whether a VACUUM statement rewrites (FULL). */
static bool
vacuum_is_full(VacuumStmt *stmt)
{
	ListCell   *lc;

	foreach(lc, stmt->options)
	{
		DefElem    *opt = (DefElem *) lfirst(lc);

		if (strcmp(opt->defname, "full") == 0 && defGetBoolean(opt))
			return true;
	}
	return false;
}

/*
 * Whether a utility statement may create storage.  Anything not known not
 * to is taken as one: a command that waits milliseconds for a switch costs
 * nothing, a file created in its window is lost.
 */
static bool
may_create_storage(Node *stmt)
{
	switch (nodeTag(stmt))
	{
		/* no storage: sessions, transactions, cursors, data of existing relations */
		case T_TransactionStmt:
		case T_VariableSetStmt:
		case T_VariableShowStmt:
		case T_DiscardStmt:
		case T_NotifyStmt:
		case T_ListenStmt:
		case T_UnlistenStmt:
		case T_DoStmt:			/* its statements take the guard themselves */
		case T_CallStmt:
		case T_CheckPointStmt:
		case T_LockStmt:
		case T_CopyStmt:		/* into or out of an existing relation */
		case T_PrepareStmt:
		case T_ExecuteStmt:		/* a prepared plan: DML only */
		case T_DeallocateStmt:
		case T_DeclareCursorStmt:
		case T_FetchStmt:
		case T_ClosePortalStmt:
		case T_LoadStmt:
		case T_ConstraintsSetStmt:
		case T_AlterSystemStmt:
			/* no storage: catalog rows only */
		case T_CommentStmt:
		case T_SecLabelStmt:
		case T_GrantStmt:
		case T_GrantRoleStmt:
		case T_AlterDefaultPrivilegesStmt:
		case T_CreateRoleStmt:
		case T_AlterRoleStmt:
		case T_AlterRoleSetStmt:
		case T_DropRoleStmt:
		case T_AlterDatabaseSetStmt:
		case T_CreateFunctionStmt:
		case T_AlterFunctionStmt:
		case T_DefineStmt:
		case T_CreateDomainStmt:
		case T_CreateEnumStmt:
		case T_AlterEnumStmt:
		case T_ViewStmt:
		case T_CreateTrigStmt:
		case T_CreateEventTrigStmt:
		case T_AlterEventTrigStmt:
		case T_CreatePolicyStmt:
		case T_AlterPolicyStmt:
		case T_RenameStmt:
		case T_AlterOwnerStmt:
		case T_AlterObjectSchemaStmt:
		case T_DropStmt:
		case T_CreatePublicationStmt:
		case T_AlterPublicationStmt:
		case T_CreateStatsStmt:
		case T_AlterStatsStmt:
		case T_CreateTableSpaceStmt:	/* a new one is never being relocated */
		case T_AlterTableSpaceOptionsStmt:
		case T_CreateForeignTableStmt:
		case T_ImportForeignSchemaStmt: /* its CREATEs take the guard */
			return false;
		case T_VacuumStmt:		/* forks of locked relations, or a rewrite */
			return vacuum_is_full((VacuumStmt *) stmt);
		default:
			return true;
	}
}

/*
 * The tablespace a CREATE or ALTER DATABASE statement names with
 * TABLESPACE, and for CREATE DATABASE its template's OID.
 */
static void
database_targets(Node *stmt, List *options, Oid *spc, Oid *template)
{
	ListCell   *lc;
	char	   *template_name = "template1";

	*spc = InvalidOid;
	*template = InvalidOid;
	foreach(lc, options)
	{
		DefElem    *opt = (DefElem *) lfirst(lc);

		if (opt->arg == NULL)
			continue;			/* TABLESPACE DEFAULT, TEMPLATE DEFAULT */
		if (strcmp(opt->defname, "tablespace") == 0)
			*spc = get_tablespace_oid(defGetString(opt), true);
		else if (strcmp(opt->defname, "template") == 0)
			template_name = defGetString(opt);
	}
	if (IsA(stmt, CreatedbStmt))
		*template = get_database_oid(template_name, true);
}

/* Whether database dbid has a directory in tablespace spc. */
static bool
database_has_files_in(Oid dbid, Oid spc)
{
	char		path[MAXPGPATH];
	struct stat st;

	snprintf(path, sizeof(path), "pg_tblspc/%u/%s/%u",
			 spc, TABLESPACE_VERSION_DIRECTORY, dbid);
	return stat(path, &st) == 0;
}

/*
 * Refuse CREATE DATABASE, ALTER DATABASE ... SET TABLESPACE and DROP
 * DATABASE that would copy, move or remove a database's files into, from
 * or in a tablespace being relocated.  The caller holds the guard: a
 * relocation claimed after this look waits, before it lists any file, for
 * every transaction that held the guard when it was claimed
 * (tsm_guard_drain), and takes the guard exclusively for its switch.
 */
static void
refuse_database_commands(Node *stmt)
{
	List	   *options = NIL;
	const char *dbname;
	const char *verb;
	Oid		   *spcs;
	int64	   *jobs;
	int			n;
	Oid			spc = InvalidOid,
				template = InvalidOid,
				dropped = InvalidOid;

	if (IsA(stmt, CreatedbStmt))
	{
		options = ((CreatedbStmt *) stmt)->options;
		dbname = ((CreatedbStmt *) stmt)->dbname;
		verb = "create";
	}
	else if (IsA(stmt, AlterDatabaseStmt))
	{
		options = ((AlterDatabaseStmt *) stmt)->options;
		dbname = ((AlterDatabaseStmt *) stmt)->dbname;
		verb = "alter";
	}
	else if (IsA(stmt, DropdbStmt))
	{
		dbname = ((DropdbStmt *) stmt)->dbname;
		dropped = get_database_oid(dbname, true);
		verb = "drop";
	}
	else
		return;
	spcs = palloc(sizeof(Oid) * tsm_shared->nslots);
	jobs = palloc(sizeof(int64) * tsm_shared->nslots);
	n = tsm_running_relocations(spcs, jobs, tsm_shared->nslots);
	if (options != NIL)
		database_targets(stmt, options, &spc, &template);
	for (int i = 0; i < n; i++)
	{
		const char *detail = NULL;

		if (OidIsValid(spc) && spc == spcs[i])
			detail = "The database's files would be written into the tablespace during its relocation (job %lld).";
		else if (OidIsValid(template) && database_has_files_in(template, spcs[i]))
			detail = "The template's files in the tablespace would be copied during its relocation (job %lld).";
		else if (OidIsValid(dropped) && database_has_files_in(dropped, spcs[i]))
			detail = "The database's files in the tablespace would be removed during its relocation (job %lld).";
		if (detail)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("cannot %s database \"%s\" while tablespace \"%s\" is being relocated",
							verb, dbname, get_tablespace_name(spcs[i])),
					 errdetail_internal(detail, (long long) jobs[i]),
					 errhint("Wait for the relocation to end (tsmove.jobs in its database), or cancel it with tsmove.cancel().")));
	}
	pfree(spcs);
	pfree(jobs);
}

/*
 * The processes that hold the guard now, as "123, 456" (or "unknown"), for
 * the note of a switch that could not take it.
 */
void
tsm_guard_holders(char *buf, Size len)
{
	LOCKTAG		tag;
	VirtualTransactionId *holders;
	Size		used = 0;

	tsm_guard_locktag(&tag);
	buf[0] = '\0';
	holders = GetLockConflicts(&tag, AccessExclusiveLock, NULL);
	for (; VirtualTransactionIdIsValid(*holders); holders++)
	{
		PGPROC	   *proc = tsm_vxid_proc(*holders);

		if (proc != NULL && proc->pid != 0 && used + 16 < len)
			used += snprintf(buf + used, len - used, "%s%d", used > 0 ? ", " : "", proc->pid);
	}
	if (used == 0)
		snprintf(buf, len, "unknown");
}

/*
 * From a relocation's settle, after its worker published the job (claimed
 * it), before the mirror starts and any file is listed: wait until every
 * transaction that held the guard at that moment has ended.  A statement that took the guard
 * before the job was published did not see it, and may be one that is
 * refused during a relocation (CREATE DATABASE copying a template's files
 * into the tablespace); ending with its transaction, its files are then
 * either listed with a committed owner or gone.  Polls, so that
 * tsmove.cancel() is heard.
 */
void
tsm_guard_drain(TsmJobCtl *ctl)
{
	LOCKTAG		tag;
	VirtualTransactionId *holders;

	tsm_guard_locktag(&tag);
	holders = GetLockConflicts(&tag, AccessExclusiveLock, NULL);
	for (; VirtualTransactionIdIsValid(*holders); holders++)
		while (!VirtualXactLock(*holders, false))
		{
			PGPROC	   *proc = tsm_vxid_proc(*holders);

			tsm_ctl_note(ctl, "waiting for process %d to end its transaction: its statement may "
						 "create storage and began before the relocation (CREATE, ALTER, REINDEX, "
						 "VACUUM FULL, ... anywhere in the cluster)", proc ? proc->pid : 0);
			tsm_ctl_publish(ctl, true);
			tsm_ctl_sleep(ctl, 100);
		}
}

static void
guard_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
					 bool readOnlyTree, ProcessUtilityContext context,
					 ParamListInfo params, QueryEnvironment *queryEnv,
					 DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	bool		guarded = tsm_shared != NULL && may_create_storage(stmt);
	LOCKTAG		tag;

	if (guarded)
	{
		tsm_guard_locktag(&tag);
		(void) LockAcquire(&tag, AccessShareLock, true, false);
	}
	PG_TRY();
	{
		if (guarded)
			refuse_database_commands(stmt);
		if (prev_ProcessUtility)
			prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_CATCH();
	{
		/* a session lock outlives a subtransaction's abort */
		if (guarded)
			LockRelease(&tag, AccessShareLock, true);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (guarded)
		LockRelease(&tag, AccessShareLock, true);
}

/* From _PG_init. */
void
tsm_guard_init(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = guard_ProcessUtility;
}
