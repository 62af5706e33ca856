/*-------------------------------------------------------------------------
 *
 * job.c
 *	  The SQL surface of moves: tsmove.move(), wait(), cancel(), set_rate(),
 *	  job_progress(), and the checks that decide what may move.
 *
 * move() validates everything it can, inserts the job row(s) in the
 * caller's transaction, claims a worker slot and registers a dynamic
 * background worker.  The worker first waits for the caller's transaction
 * to end: if it aborted, the job never existed and the worker leaves.  So
 * the row is committed before any file is created, as DESIGN.md asks, even
 * though move() runs inside the caller's transaction.
 *
 * The job table is revoked from PUBLIC; the functions read and write it as
 * the bootstrap superuser (tsm_run_as_superuser_*), after doing their own
 * privilege checks, as core's ALTER TABLE ... SET TABLESPACE does: owner of
 * the relation (or superuser) and CREATE on the target tablespace.
 *
 * Locks: move() holds AccessShareLock on the relation until the caller's
 * transaction ends; the worker takes its session lock only later, so DDL
 * committed in between is caught by the worker's re-check.  Shared slot
 * rules are in pg_tsmove.h.
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
#include "catalog/pg_type.h"
#include "commands/tablespace.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "replication/slot.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "pg_tsmove.h"

PG_FUNCTION_INFO_V1(tsm_move);
PG_FUNCTION_INFO_V1(tsm_wait);
PG_FUNCTION_INFO_V1(tsm_cancel);
PG_FUNCTION_INFO_V1(tsm_set_rate);
PG_FUNCTION_INFO_V1(tsm_job_progress);

/* Poll interval of tsmove.wait(). */
#define TSM_WAIT_POLL_MS 20

/*
 * Read and write the job table as the bootstrap superuser.  An error in
 * between is fine: transaction abort restores the user id.
 */
void
tsm_run_as_superuser_begin(Oid *save_userid, int *save_sec)
{
	GetUserIdAndSecContext(save_userid, save_sec);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   *save_sec | SECURITY_LOCAL_USERID_CHANGE);
}

void
tsm_run_as_superuser_end(Oid save_userid, int save_sec)
{
	SetUserIdAndSecContext(save_userid, save_sec);
}

/*
 * Run one UPDATE of tsmove.job as the superuser, in the current
 * transaction; returns the number of rows it changed.  nulls as for
 * SPI_execute_with_args (NULL: no argument is null).
 */
uint64
tsm_job_table_update(const char *sql, int nargs, Oid *argtypes,
					 Datum *values, const char *nulls)
{
	Oid			save_userid;
	int			save_sec;
	uint64		processed;

	tsm_run_as_superuser_begin(&save_userid, &save_sec);
	SPI_connect();
	if (SPI_execute_with_args(sql, nargs, argtypes, values, nulls,
							  false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update tsmove.job");
	processed = SPI_processed;
	SPI_finish();
	tsm_run_as_superuser_end(save_userid, save_sec);
	return processed;
}

/*
 * tsm_check_movable
 *		Error out unless rel can move online to target_spc.
 *
 * The caller holds at least AccessShareLock on rel.  Used by move() and
 * again by the worker once it holds its session lock.
 */
void
tsm_check_movable(Relation rel, Oid target_spc)
{
	const char *relname = RelationGetRelationName(rel);
	Oid			current_spc;

	switch (rel->rd_rel->relkind)
	{
		case RELKIND_RELATION:
		case RELKIND_MATVIEW:
		case RELKIND_INDEX:
			break;
		case RELKIND_PARTITIONED_TABLE:
		case RELKIND_PARTITIONED_INDEX:
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("cannot move partitioned relation \"%s\"", relname),
					 errdetail("A partitioned relation has no storage of its own."),
					 errhint("Move each partition with tsmove.move().")));
			break;
		case RELKIND_SEQUENCE:
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("cannot move sequence \"%s\" online", relname),
					 errdetail("Sequence changes are not fully WAL-logged, so they cannot be mirrored."),
					 errhint("Use ALTER SEQUENCE ... SET TABLESPACE; a sequence is one page.")));
			break;
		case RELKIND_TOASTVALUE:
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("cannot move TOAST table \"%s\" on its own", relname),
					 errhint("Move the table it belongs to; its TOAST table moves with it.")));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("cannot move \"%s\": it is a %s", relname,
							rel->rd_rel->relkind == RELKIND_VIEW ? "view" :
							rel->rd_rel->relkind == RELKIND_FOREIGN_TABLE ? "foreign table" :
							"relation without storage"),
					 errhint("Only tables, materialized views and indexes can be moved.")));
	}

	if (rel->rd_rel->relkind == RELKIND_INDEX &&
		get_rel_relkind(rel->rd_index->indrelid) == RELKIND_TOASTVALUE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("cannot move TOAST index \"%s\" on its own", relname),
				 errhint("Move the table it belongs to; its TOAST index moves with it.")));

	if (rel->rd_rel->relpersistence != RELPERSISTENCE_PERMANENT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot move %s relation \"%s\" online",
						rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP ?
						"temporary" : "unlogged", relname),
				 errdetail("Changes to it are not WAL-logged, so they cannot be mirrored."),
				 errhint("Use ALTER TABLE ... SET TABLESPACE, which holds an exclusive lock for the copy.")));

	if (IsSystemRelation(rel) || RelationIsMapped(rel) || rel->rd_rel->relisshared)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot move system catalog \"%s\"", relname),
				 errhint("System catalogs move only with ALTER DATABASE ... SET TABLESPACE.")));

	if (target_spc == GLOBALTABLESPACE_OID)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot move relation \"%s\" to tablespace \"pg_global\"", relname),
				 errdetail("Only shared system catalogs can be placed in pg_global."),
				 errhint("Choose another tablespace.")));

	current_spc = OidIsValid(rel->rd_rel->reltablespace) ?
		rel->rd_rel->reltablespace : MyDatabaseTableSpace;
	if (current_spc == target_spc)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("relation \"%s\" is already in tablespace \"%s\"",
						relname, get_tablespace_name(target_spc)),
				 errhint("Choose another tablespace.")));
}

/* Server-wide conditions of an online move; errors out if one is unmet. */
static void
tsm_check_server_can_move(bool online)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot move a relation during recovery"),
				 errhint("Run tsmove.move() on the primary server.")));
	if (!XLogIsNeeded())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_tsmove requires wal_level \"replica\" or \"logical\""),
				 errdetail("Moves mirror changes by reading the WAL, and standbys learn the new files from it."),
				 errhint("Set wal_level = replica in postgresql.conf and restart the server.")));
	if (online && max_replication_slots <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_tsmove requires max_replication_slots > 0 for online moves"),
				 errdetail("An online move keeps the WAL it has yet to read with a temporary replication slot."),
				 errhint("Raise max_replication_slots and restart the server, or use mode => 'quiesce'.")));
}

/* The byte budget argument: NULL means the GUC's default. */
static double
tsm_rate_argument(FunctionCallInfo fcinfo, int argno)
{
	double		rate;

	if (PG_ARGISNULL(argno))
		return tsm_max_rate_mb;
	rate = DatumGetFloat8(DirectFunctionCall1(numeric_float8,
											  PG_GETARG_DATUM(argno)));
	if (rate < 0 || isnan(rate))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rate_mb must not be negative"),
				 errhint("Give a rate in MB per second, or 0 for no throttle.")));
	return rate;
}

/* Find the slot running (or about to run) a job; caller holds the lock. */
static TsmWorkerSlot *
tsm_find_slot_for_job(Oid dbid, int64 job_id)
{
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *slot = &tsm_shared->slots[i];

		if (slot->in_use && slot->dbid == dbid && slot->job_id == job_id)
			return slot;
	}
	return NULL;
}

/* Error out if a job row for relid is not finished yet. */
static void
tsm_check_no_active_job(Oid relid, const char *relname)
{
	Oid			save_userid;
	int			save_sec;
	Datum		arg = ObjectIdGetDatum(relid);
	Oid			argtype = OIDOID;

	tsm_run_as_superuser_begin(&save_userid, &save_sec);
	SPI_connect();
	if (SPI_execute_with_args("SELECT job_id FROM tsmove.job WHERE relid = $1 "
							  "AND state NOT IN ('done', 'failed', 'cancelled')",
							  1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read tsmove.job");
	if (SPI_processed > 0)
	{
		bool		isnull;
		int64		job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
														 SPI_tuptable->tupdesc,
														 1, &isnull));

		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("relation \"%s\" is already being moved by job %lld",
						relname, (long long) job_id),
				 errhint("Wait for it with tsmove.wait(%lld) or stop it with tsmove.cancel(%lld).",
						 (long long) job_id, (long long) job_id)));
	}
	SPI_finish();
	tsm_run_as_superuser_end(save_userid, save_sec);
}

/* Insert a job row and return its id.  Runs in the caller's transaction. */
static int64
tsm_insert_job(Relation rel, Oid target_spc, bool online, double rate,
			   int64 parent_job)
{
	Oid			argtypes[11] = {OIDOID, TEXTOID, CHAROID, OIDOID, OIDOID,
	TEXTOID, OIDOID, OIDOID, FLOAT8OID, OIDOID, INT8OID};
	Datum		values[11];
	char		nulls[11];
	Oid			save_userid;
	int			save_sec;
	bool		isnull;
	int64		job_id;
	Oid			source_spc = OidIsValid(rel->rd_rel->reltablespace) ?
		rel->rd_rel->reltablespace : MyDatabaseTableSpace;

	memset(nulls, ' ', sizeof(nulls));
	values[0] = ObjectIdGetDatum(RelationGetRelid(rel));
	values[1] = CStringGetTextDatum(quote_qualified_identifier(
							   get_namespace_name(RelationGetNamespace(rel)),
							   RelationGetRelationName(rel)));
	values[2] = CharGetDatum(rel->rd_rel->relkind);
	values[3] = ObjectIdGetDatum(rel->rd_rel->relowner);
	values[4] = ObjectIdGetDatum(GetUserId());
	values[5] = CStringGetTextDatum(online ? "online" : "quiesce");
	values[6] = ObjectIdGetDatum(source_spc);
	values[7] = ObjectIdGetDatum(target_spc);
	values[8] = Float8GetDatum(rate);
	values[9] = ObjectIdGetDatum(TSM_REL(TsmRelationNode(rel)));
	values[10] = Int64GetDatum(parent_job);
	if (parent_job == 0)
		nulls[10] = 'n';

	tsm_run_as_superuser_begin(&save_userid, &save_sec);
	SPI_connect();
	if (SPI_execute_with_args("INSERT INTO tsmove.job (relid, relname, relkind, owner, "
							  "submitted_by, mode, source_tablespace, target_tablespace, "
							  "max_rate_mb, members, old_relfilenodes, parent_job) "
							  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
							  "ARRAY[$1], ARRAY[$10], $11) RETURNING job_id",
							  11, argtypes, values, nulls, false, 1) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into tsmove.job");
	job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 1, &isnull));
	SPI_finish();
	tsm_run_as_superuser_end(save_userid, save_sec);
	return job_id;
}

/*
 * Claim a worker slot for a chain of jobs and start its worker.  Errors out,
 * with the slot released, if the limit is reached or no background worker
 * can be registered.
 */
static void
tsm_start_worker(int64 job_id, Oid relid, const char *relname, double rate)
{
	TsmWorkerSlot *slot = NULL;
	int			slot_index = -1;
	int			running = 0;
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	pid_t		pid;

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < tsm_shared->nslots; i++)
	{
		TsmWorkerSlot *s = &tsm_shared->slots[i];

		if (!s->in_use)
		{
			if (slot_index < 0)
				slot_index = i;
			continue;
		}
		running++;
		if (s->dbid == MyDatabaseId && s->relid == relid)
		{
			int64		other = s->job_id;

			LWLockRelease(tsm_shared->lock);
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("relation \"%s\" is already being moved by job %lld",
							relname, (long long) other),
					 errhint("Wait for it with tsmove.wait(%lld) or stop it with tsmove.cancel(%lld).",
							 (long long) other, (long long) other)));
		}
	}
	if (running >= tsm_max_workers || slot_index < 0)
	{
		LWLockRelease(tsm_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("too many moves running (pg_tsmove.max_workers = %d)",
						tsm_max_workers),
				 errhint("Wait for a move to finish, or raise pg_tsmove.max_workers (and max_worker_processes).")));
	}
	slot = &tsm_shared->slots[slot_index];
	memset(slot, 0, sizeof(*slot));
	slot->in_use = true;
	slot->dbid = MyDatabaseId;
	slot->chain_head = job_id;
	slot->job_id = job_id;
	slot->relid = relid;
	slot->user_id = GetUserId();
	slot->submit_xid = GetTopTransactionId();
	slot->max_rate_mb = rate;
	slot->state = TSM_QUEUED;
	slot->switch_ms = -1;
	LWLockRelease(tsm_shared->lock);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_worker_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "pg_tsmove worker for job %lld",
			 (long long) job_id);
	strlcpy(worker.bgw_type, "pg_tsmove worker", BGW_MAXLEN);
	worker.bgw_main_arg = Int32GetDatum(slot_index);
	worker.bgw_notify_pid = MyProcPid;

	/*
	 * Wait until the worker runs (it then waits for this transaction), so
	 * that a worker the postmaster could not start never holds the slot.
	 */
	if (!RegisterDynamicBackgroundWorker(&worker, &handle) ||
		WaitForBackgroundWorkerStartup(handle, &pid) != BGWH_STARTED)
	{
		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		slot->in_use = false;
		LWLockRelease(tsm_shared->lock);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("could not start a pg_tsmove worker"),
				 errhint("You may need to increase max_worker_processes.")));
	}
}

/*
 * tsmove.move(rel regclass, target name, mode text DEFAULT 'online',
 *			   max_rate_mb numeric DEFAULT NULL, with_indexes bool DEFAULT false)
 *	  RETURNS bigint
 *
 * Validates, records the job(s) and starts the worker; returns the job id
 * of rel at once.  Takes AccessShareLock on rel (and on its indexes with
 * with_indexes) until the end of the caller's transaction.
 */
Datum
tsm_move(PG_FUNCTION_ARGS)
{
	Oid			relid;
	char	   *target;
	char	   *mode;
	bool		online;
	double		rate;
	bool		with_indexes;
	Oid			target_spc;
	Relation	rel;
	int64		job_id;
	List	   *indexes = NIL;
	ListCell   *lc;

	tsm_require_preload();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("relation and target tablespace must not be null"),
				 errhint("Call tsmove.move('schema.table', 'tablespace').")));
	relid = PG_GETARG_OID(0);
	target = NameStr(*PG_GETARG_NAME(1));
	mode = PG_ARGISNULL(2) ? "online" : text_to_cstring(PG_GETARG_TEXT_PP(2));
	with_indexes = !PG_ARGISNULL(4) && PG_GETARG_BOOL(4);

	if (strcmp(mode, "online") == 0)
		online = true;
	else if (strcmp(mode, "quiesce") == 0)
		online = false;
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown move mode \"%s\"", mode),
				 errhint("Use 'online' (copy while the relation is in use) or 'quiesce' (writes wait during the copy).")));
	rate = tsm_rate_argument(fcinfo, 3);
	tsm_check_server_can_move(online);

	target_spc = get_tablespace_oid(target, true);
	if (!OidIsValid(target_spc))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("tablespace \"%s\" does not exist", target),
				 errhint("List tablespaces with \\db or SELECT spcname FROM pg_tablespace.")));

	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation with OID %u does not exist", relid),
				 errhint("It may have been dropped concurrently.")));
	tsm_check_movable(rel, target_spc);

	if (!pg_class_ownercheck(relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of relation \"%s\" to move it",
						RelationGetRelationName(rel)),
				 errhint("Ask its owner or a superuser to run tsmove.move().")));
	if (target_spc != MyDatabaseTableSpace &&
		pg_tablespace_aclcheck(target_spc, GetUserId(), ACL_CREATE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for tablespace \"%s\"", target),
				 errhint("Ask a superuser to GRANT CREATE ON TABLESPACE %s.",
						 quote_identifier(target))));

	tsm_check_no_active_job(relid, RelationGetRelationName(rel));

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
				tsm_check_movable(index, target_spc);
				tsm_check_no_active_job(RelationGetRelid(index),
										RelationGetRelationName(index));
				indexes = lappend(indexes, index);
			}
			else
				index_close(index, AccessShareLock);
		}
	}

	job_id = tsm_insert_job(rel, target_spc, online, rate, 0);
	foreach(lc, indexes)
	{
		Relation	index = (Relation) lfirst(lc);

		tsm_insert_job(index, target_spc, online, rate, job_id);
		index_close(index, NoLock);
	}
	tsm_start_worker(job_id, relid, RelationGetRelationName(rel), rate);
	relation_close(rel, NoLock);

	PG_RETURN_INT64(job_id);
}

/*
 * The state of a job as committed now, whatever the caller's isolation
 * level; NULL if there is no such job.  Also returns its submitter.
 */
static char *
tsm_read_job_state(int64 job_id, Oid *submitted_by)
{
	Oid			save_userid;
	int			save_sec;
	Datum		arg = Int64GetDatum(job_id);
	Oid			argtype = INT8OID;
	char	   *state = NULL;

	tsm_run_as_superuser_begin(&save_userid, &save_sec);
	SPI_connect();
	PushActiveSnapshot(GetLatestSnapshot());
	if (SPI_execute_with_args("SELECT state, submitted_by FROM tsmove.job WHERE job_id = $1",
							  1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read tsmove.job");
	if (SPI_processed > 0)
	{
		bool		isnull;
		MemoryContext spi_cxt = MemoryContextSwitchTo(CurTransactionContext);

		state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		MemoryContextSwitchTo(spi_cxt);
		if (submitted_by)
			*submitted_by = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc,
														   2, &isnull));
	}
	PopActiveSnapshot();
	SPI_finish();
	tsm_run_as_superuser_end(save_userid, save_sec);
	return state;
}

/*
 * Update a job row's state (and error) as the superuser, in the current
 * transaction.  Final states also stamp finished_at.
 */
void
tsm_job_update_state(int64 job_id, TsmJobState state, const char *error)
{
	Oid			argtypes[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(tsm_state_name(state));
	if (error)
		values[2] = CStringGetTextDatum(error);
	else
		nulls[2] = 'n';

	(void) tsm_job_table_update("UPDATE tsmove.job SET state = $2, "
								"error = coalesce($3, error), "
								"finished_at = CASE WHEN $2 IN ('done', 'failed', 'cancelled') "
								"THEN pg_catalog.clock_timestamp() END "
								"WHERE job_id = $1",
								3, argtypes, values, nulls);
}

/* Error out unless the current user may control the job. */
static void
tsm_check_job_privilege(int64 job_id, Oid submitted_by)
{
	if (!has_privs_of_role(GetUserId(), submitted_by))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for job %lld", (long long) job_id),
				 errhint("Only the role that submitted the move, or a superuser, can control it.")));
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
 * tsmove.wait(job bigint, timeout interval DEFAULT NULL) RETURNS text
 *
 * Blocks until the job reaches done, failed or cancelled, or until the
 * timeout passes, and returns its state.  Takes no locks.
 */
Datum
tsm_wait(PG_FUNCTION_ARGS)
{
	int64		job_id;
	TimestampTz deadline = 0;
	char	   *state = NULL;

	tsm_require_preload();
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("job must not be null"),
				 errhint("Pass the job id that tsmove.move() returned.")));
	job_id = PG_GETARG_INT64(0);
	if (!PG_ARGISNULL(1))
	{
		Interval   *timeout = PG_GETARG_INTERVAL_P(1);

		deadline = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
														   TimestampTzGetDatum(GetCurrentTimestamp()),
														   IntervalPGetDatum(timeout)));
	}

	for (;;)
	{
		TsmWorkerSlot *slot;
		TransactionId submit_xid = InvalidTransactionId;
		TsmJobState live_state = TSM_QUEUED;

		LWLockAcquire(tsm_shared->lock, LW_SHARED);
		slot = tsm_find_slot_for_job(MyDatabaseId, job_id);
		if (slot)
		{
			submit_xid = slot->submit_xid;
			live_state = slot->state;
		}
		LWLockRelease(tsm_shared->lock);

		if (TransactionIdIsValid(submit_xid) &&
			TransactionIdIsCurrentTransactionId(submit_xid))
			ereport(ERROR,
					(errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
					 errmsg("cannot wait for job %lld in the transaction that submitted it",
							(long long) job_id),
					 errdetail("The move starts only when the transaction that called tsmove.move() commits."),
					 errhint("Commit first, then call tsmove.wait().")));

		if (state)
			pfree(state);
		state = tsm_read_job_state(job_id, NULL);
		if (state == NULL)
			tsm_no_such_job(job_id);
		if (tsm_state_is_final(tsm_state_from_name(state)))
			break;
		if (deadline != 0 && GetCurrentTimestamp() >= deadline)
		{
			/* the row lags behind a running job: report the live state */
			if (slot)
				state = pstrdup(tsm_state_name(live_state));
			break;
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 TSM_WAIT_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

/*
 * tsmove.cancel(job bigint) RETURNS boolean
 *
 * Asks the job's worker to stop; the worker removes the new files and marks
 * the job cancelled.  A job still queued behind its chain, and the index
 * jobs queued behind this one, are marked cancelled at once.  Returns false
 * if the job had already ended.
 */
Datum
tsm_cancel(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	Oid			submitted_by;
	char	   *state;
	TsmWorkerSlot *slot;
	bool		signalled = false;
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(job_id);

	tsm_require_preload();
	state = tsm_read_job_state(job_id, &submitted_by);
	if (state == NULL)
		tsm_no_such_job(job_id);
	tsm_check_job_privilege(job_id, submitted_by);
	if (tsm_state_is_final(tsm_state_from_name(state)))
		PG_RETURN_BOOL(false);

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	slot = tsm_find_slot_for_job(MyDatabaseId, job_id);
	if (slot)
	{
		slot->cancel_requested = true;
		if (slot->latch)
			SetLatch(slot->latch);
		signalled = true;
	}
	LWLockRelease(tsm_shared->lock);

	/*
	 * Jobs still queued, this one (behind its chain) or the index jobs
	 * queued behind it (with_indexes), are marked cancelled here; the worker
	 * skips them when it gets there.
	 */
	if (tsm_job_table_update("UPDATE tsmove.job SET state = 'cancelled', "
							 "error = 'cancelled before it started', "
							 "finished_at = pg_catalog.clock_timestamp() "
							 "WHERE (job_id = $1 OR parent_job = $1) AND state = 'queued'",
							 1, &argtype, &arg, NULL) > 0)
		signalled = true;
	PG_RETURN_BOOL(signalled);
}

/*
 * tsmove.set_rate(job bigint, max_rate_mb numeric) RETURNS boolean
 *
 * Changes the byte budget of a running or queued job; the worker picks it up
 * within a fraction of a second.  Returns false if the job had ended.
 */
Datum
tsm_set_rate(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	double		rate = tsm_rate_argument(fcinfo, 1);
	Oid			submitted_by;
	char	   *state;
	TsmWorkerSlot *slot;
	Oid			argtypes[2] = {INT8OID, FLOAT8OID};
	Datum		values[2];

	tsm_require_preload();
	state = tsm_read_job_state(job_id, &submitted_by);
	if (state == NULL)
		tsm_no_such_job(job_id);
	tsm_check_job_privilege(job_id, submitted_by);
	if (tsm_state_is_final(tsm_state_from_name(state)))
		PG_RETURN_BOOL(false);

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	slot = tsm_find_slot_for_job(MyDatabaseId, job_id);
	if (slot)
	{
		slot->max_rate_mb = rate;
		if (slot->latch)
			SetLatch(slot->latch);
	}
	LWLockRelease(tsm_shared->lock);

	values[0] = Int64GetDatum(job_id);
	values[1] = Float8GetDatum(rate);
	(void) tsm_job_table_update("UPDATE tsmove.job SET max_rate_mb = $2 WHERE job_id = $1",
								2, argtypes, values, NULL);
	PG_RETURN_BOOL(true);
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

		if (slot->in_use && slot->dbid == MyDatabaseId)
			copies[ncopies++] = *slot;
	}
	LWLockRelease(tsm_shared->lock);

	for (int i = 0; i < ncopies; i++)
	{
		TsmWorkerSlot *s = &copies[i];
		Datum		values[15];
		bool		nulls[15];

		memset(nulls, 0, sizeof(nulls));
		values[0] = Int64GetDatum(s->job_id);
		values[1] = Int32GetDatum(s->pid);
		nulls[1] = (s->pid == 0);
		values[2] = CStringGetTextDatum(tsm_state_name(s->state));
		values[3] = Int64GetDatum(s->blocks_total);
		values[4] = Int64GetDatum(s->blocks_copied);
		values[5] = Int64GetDatum(s->blocks_recopied);
		values[6] = Int64GetDatum(s->dirty_backlog);
		values[7] = Int64GetDatum(s->bytes_written);
		values[8] = Int64GetDatum(s->wal_bytes);
		values[9] = Float8GetDatum(s->rate_mb_s);
		values[10] = Float8GetDatum(s->max_rate_mb);
		values[11] = Int32GetDatum(s->switch_attempts);
		values[12] = Float8GetDatum(s->lock_wait_ms);
		values[13] = Float8GetDatum(s->switch_ms);
		nulls[13] = (s->switch_ms < 0);
		values[14] = CStringGetTextDatum(s->note);
		nulls[14] = (s->note[0] == '\0');
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
