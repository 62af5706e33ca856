/*-------------------------------------------------------------------------
 *
 * submit.c
 *	  What the SQL functions that queue jobs share: the checks that decide
 *	  what may move where, their arguments, and the submission itself
 *	  (inserting a relation move's row, telling the launcher at commit).
 *
 * tsmove.move() (job_api.c), move_tablespace() and relocate_tablespace()
 * (tablespace_api.c) validate everything here in the caller's transaction
 * and insert rows; nothing else.  When that transaction commits, an xact
 * callback marks its database pending and wakes the launcher (queue.c), so
 * nothing runs for a transaction that aborts.  The front ends make the same
 * checks again when the job starts (relation_move.c for tsm_check_movable()
 * and tsm_check_move_privileges(), relocation_files.c for
 * tsm_check_relocatable() and tsm_active_move_on_tablespace()): the relation
 * or the tablespace may have changed in between.
 *
 * Calls queue.c, job_record.c and settings.c, nothing above them.
 *
 * Locks: none of its own; tsm_check_movable() wants the caller to hold a
 * lock on the relation, and the lookups of active jobs take
 * TsmShared->lock shared (queue.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_tablespace.h"
#include "commands/tablespace.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"

#include "jobs/job_record.h"
#include "jobs/submit.h"

/*
 * Whether this transaction submitted a job, or updated the row of a queued
 * one (see tsm_submit_xact_callback).
 */
static bool submitted_in_xact = false;
static bool queued_job_touched_in_xact = false;
static bool submit_callback_registered = false;

/* ---- what may move ---- */

/*
 * tsm_check_movable
 *		Error out unless rel can move online to target_spc.
 *
 * The caller holds at least AccessShareLock on rel.  Used by move() and
 * again by the worker once it holds its session lock.  An unlogged
 * relation moves only in exclusive mode: its changes are not WAL-logged,
 * so they cannot be mirrored.
 */
void
tsm_check_movable(Relation rel, Oid target_spc, TsmMoveMode mode)
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
					 errmsg("cannot move sequence \"%s\"", relname),
					 errdetail("A sequence always lives in its database's default tablespace."),
					 errhint("It moves with the database: ALTER DATABASE ... SET TABLESPACE.")));
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

	if (rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot move temporary relation \"%s\"", relname),
				 errdetail("Its pages live in the local buffers of the session that owns it."),
				 errhint("Use ALTER TABLE ... SET TABLESPACE in that session.")));
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED &&
		mode != TSM_MODE_EXCLUSIVE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot move unlogged relation \"%s\" in %s mode",
						relname, tsm_mode_name(mode)),
				 errdetail("Changes to it are not WAL-logged, so they cannot be mirrored."),
				 errhint("Use mode => 'exclusive', which holds AccessExclusiveLock for the copy, as ALTER TABLE ... SET TABLESPACE does.")));

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

/*
 * tsm_check_move_privileges
 *		Error out unless role may move relid to target_spc: it owns the
 *		relation and may create in the tablespace, as for SET TABLESPACE.
 *
 * Needs no lock on the relation: move() calls it before taking any, so a
 * role cannot even lock a relation it does not own; the worker calls it
 * again, for the submitting role, when the job starts.
 */
void
tsm_check_move_privileges(Oid relid, const char *relname, Oid target_spc,
						  Oid role)
{
	if (!tsm_owns_relation(relid, role))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of relation \"%s\" to move it", relname),
				 errhint("Ask its owner or a superuser to run tsmove.move().")));
	if (target_spc != MyDatabaseTableSpace &&
		tsm_tablespace_aclcheck(target_spc, role, ACL_CREATE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for tablespace \"%s\"",
						get_tablespace_name(target_spc)),
				 errhint("Ask a superuser to GRANT CREATE ON TABLESPACE %s.",
						 quote_identifier(get_tablespace_name(target_spc)))));
}

/* Server-wide conditions of an online move; errors out if one is unmet. */
void
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

/* The mode argument of move() and move_tablespace(). */
TsmMoveMode
tsm_mode_argument(const char *name, bool *known)
{
	TsmMoveMode mode = tsm_mode_from_name(name, true, known);

	if (!*known)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unknown move mode \"%s\"", name),
				 errhint("Use 'online' (copy while the relation is in use), 'quiesce' (writes wait during the copy) "
						 "or 'exclusive' (everything waits, for unlogged relations).")));
	return mode;
}

/* The byte budget argument: NULL means the GUC's default. */
double
tsm_rate_argument(FunctionCallInfo fcinfo, int argno)
{
	double		rate;

	if (PG_ARGISNULL(argno))
		return tsm_max_rate_mb;
	rate = DatumGetFloat8(DirectFunctionCall1(numeric_float8,
											  PG_GETARG_DATUM(argno)));
	if (isnan(rate) || isinf(rate))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rate_mb must be a finite number"),
				 errhint("Give a rate in MB per second, or 0 for no throttle.")));
	if (rate < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_rate_mb must not be negative"),
				 errhint("Give a rate in MB per second, or 0 for no throttle.")));
	return rate;
}

/*
 * The job, running in any database or queued in this one, that relocates
 * tablespace spc; 0 if none.  Caller is in a transaction.
 */
int64
tsm_active_relocation_of(Oid spc)
{
	int64		job_id = 0;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < tsm_shared->nslots && job_id == 0; i++)
	{
		TsmWorkerSlot *s = &tsm_shared->slots[i];

		if (s->in_use && s->job_id != 0 && s->kind == TSM_KIND_RELOCATE &&
			s->target_spc == spc)
			job_id = s->job_id;
	}
	LWLockRelease(tsm_shared->lock);
	if (job_id == 0)
		job_id = tsm_jobrec_active_job_on_tablespace(spc, TSM_KIND_RELOCATE);
	return job_id;
}

/*
 * The relation move, running in any database or queued in this one, into
 * or out of tablespace spc; 0 if none.  Caller is in a transaction.
 */
int64
tsm_active_move_on_tablespace(Oid spc)
{
	int64		job_id = 0;

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	for (int i = 0; i < tsm_shared->nslots && job_id == 0; i++)
	{
		TsmWorkerSlot *s = &tsm_shared->slots[i];

		if (s->in_use && s->job_id != 0 && s->kind == TSM_KIND_MOVE &&
			(s->source_spc == spc || s->target_spc == spc))
			job_id = s->job_id;
	}
	LWLockRelease(tsm_shared->lock);
	if (job_id == 0)
		job_id = tsm_jobrec_active_job_on_tablespace(spc, TSM_KIND_MOVE);
	return job_id;
}

/*
 * Error out if tablespace spc is being relocated: a relation cannot move
 * into or out of it meanwhile.  what: "into" or "out of".
 */
void
tsm_check_no_relocation_of(Oid spc, const char *what)
{
	int64		job_id = tsm_active_relocation_of(spc);

	if (job_id != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot move a relation %s tablespace \"%s\" while job %lld relocates it",
						what, get_tablespace_name(spc), (long long) job_id),
				 errhint("Wait for the relocation to end, then move the relation.")));
}

/* ---- what may be relocated ---- */

/*
 * The directory pg_tblspc/<spc> points to; errors out unless it is a link.
 * Also the relocation's look at the link before and at its rename.
 */
char *
tsm_read_tablespace_link(Oid spc, const char *spcname)
{
	char		link_path[MAXPGPATH];
	char		target[MAXPGPATH];
	struct stat st;
	int			len;

	snprintf(link_path, sizeof(link_path), "pg_tblspc/%u", spc);
	if (lstat(link_path, &st) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat \"%s\": %m", link_path)));
	if (S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot relocate in-place tablespace \"%s\"", spcname),
				 errdetail("Its files live in the data directory (allow_in_place_tablespaces)."),
				 errhint("Create a tablespace at the new location and move its relations with tsmove.move_tablespace().")));
	len = readlink(link_path, target, sizeof(target));
	if (len < 0 || len >= sizeof(target))
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read symbolic link \"%s\": %m", link_path)));
	target[len] = '\0';
	return pstrdup(target);
}

/* Whether one path lies inside (or is) the other, following symlinks. */
static bool
paths_nest(const char *a, const char *b)
{
	char	   *real_a = realpath(a, NULL);
	char	   *real_b = realpath(b, NULL);
	bool		nest;

	if (real_a == NULL || real_b == NULL)
		nest = path_is_prefix_of_path(a, b) || path_is_prefix_of_path(b, a);
	else
		nest = path_is_prefix_of_path(real_a, real_b) ||
			path_is_prefix_of_path(real_b, real_a);
	free(real_a);
	free(real_b);
	return nest;
}

/* A database whose default tablespace is spc, or InvalidOid. */
static Oid
database_defaulting_to(Oid spc, char **datname)
{
	Relation	rel = table_open(DatabaseRelationId, AccessShareLock);
	TableScanDesc scan = table_beginscan_catalog(rel, 0, NULL);
	HeapTuple	tuple;
	Oid			found = InvalidOid;

	while (!OidIsValid(found) &&
		   HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tuple);

		if (db->dattablespace == spc)
		{
			found = db->oid;
			*datname = pstrdup(NameStr(db->datname));
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * tsm_check_relocatable
 *		Error out unless tablespace spc can be relocated to new_location;
 *		returns its current location.
 *
 * Runs in a transaction.  Checked when the job is submitted and again when
 * it starts.  new_location must be canonical (canonicalize_path).
 */
char *
tsm_check_relocatable(Oid spc, const char *spcname, const char *new_location)
{
	char	   *old_location;
	char	   *datname = NULL;
	struct stat st;

	if (spc == DEFAULTTABLESPACE_OID || spc == GLOBALTABLESPACE_OID)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot relocate tablespace \"%s\"", spcname),
				 errdetail("It lives in the data directory."),
				 errhint("Move relations out of it with tsmove.move_tablespace(), or relocate the whole data directory.")));
	if (OidIsValid(database_defaulting_to(spc, &datname)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot relocate tablespace \"%s\": it is the default tablespace of database \"%s\"",
						spcname, datname),
				 errdetail("A database's system catalogs live in its default tablespace, and cannot be locked from another database."),
				 errhint("Give the database another default with ALTER DATABASE %s SET TABLESPACE, then relocate.",
						 quote_identifier(datname))));
	old_location = tsm_read_tablespace_link(spc, spcname);

	if (!is_absolute_path(new_location))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("tablespace location must be an absolute path")));
	if (strlen(new_location) + 1 + strlen(TABLESPACE_VERSION_DIRECTORY) + 1 +
		OIDCHARS + 1 + OIDCHARS + 1 + FORKNAMECHARS + 1 + OIDCHARS > MAXPGPATH)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("tablespace location \"%s\" is too long", new_location)));
	if (paths_nest(new_location, old_location))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("new location \"%s\" overlaps the current location \"%s\" of tablespace \"%s\"",
						new_location, old_location, spcname),
				 errhint("Give a directory outside the current location, on the disk the tablespace should move to.")));
	if (paths_nest(new_location, DataDir))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("new location \"%s\" overlaps the data directory", new_location),
				 errhint("Give a directory outside the data directory.")));
	if (stat(new_location, &st) < 0)
	{
		if (errno == ENOENT)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FILE),
					 errmsg("directory \"%s\" does not exist", new_location),
					 errhint("Create an empty directory owned by the database server's operating system user.")));
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat directory \"%s\": %m", new_location)));
	}
	if (!S_ISDIR(st.st_mode))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" exists but is not a directory", new_location)));
	if (st.st_uid != geteuid())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("directory \"%s\" is not owned by the database server's operating system user",
						new_location),
				 errhint("Change its owner (chown) to the user the server runs as.")));
	if (!directory_is_empty(new_location))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("directory \"%s\" is not empty", new_location),
				 errhint("Give an empty directory.")));
	return old_location;
}

/* ---- the submission ---- */

/*
 * At commit of a transaction that submitted jobs, tell the launcher; a
 * prepared one could commit after a restart with nobody told, so PREPARE
 * is refused, as core refuses it after LISTEN or for temporary objects.
 *
 * The same at commit of a transaction that updated a queued job's row
 * (set_rate(), pause()), without the refusal: a worker claims jobs with
 * FOR UPDATE SKIP LOCKED, so one that looked for work while the row was
 * locked passed over it, and, finding nothing else, exited.
 */
static void
tsm_submit_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (submitted_in_xact)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot prepare a transaction that submitted a pg_tsmove job"),
						 errdetail("Nothing would start the job when the prepared transaction commits."),
						 errhint("Call tsmove.move() in a transaction that is committed directly.")));
			break;
		case XACT_EVENT_COMMIT:
			if (submitted_in_xact || queued_job_touched_in_xact)
				tsm_mark_database_pending(MyDatabaseId, false);
			submitted_in_xact = queued_job_touched_in_xact = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			submitted_in_xact = queued_job_touched_in_xact = false;
			break;
		default:
			break;
	}
}

static void
register_submit_callback(void)
{
	if (!submit_callback_registered)
	{
		RegisterXactCallback(tsm_submit_xact_callback, NULL);
		submit_callback_registered = true;
	}
}

void
tsm_note_submission(void)
{
	register_submit_callback();
	submitted_in_xact = true;
}

/* This transaction updated the row of a job that is (still) queued. */
void
tsm_note_queued_job_touched(void)
{
	register_submit_callback();
	queued_job_touched_in_xact = true;
}

/*
 * Queue a relation move (or, with skip_reason, record one that will not
 * run and why); returns its job id.  Caller is in the submitting
 * transaction and has checked everything.
 */
int64
tsm_insert_move(Relation rel, Oid target_spc, TsmMoveMode mode, double rate,
				int64 parent_job, const char *skip_reason)
{
	TsmNewJob	job;

	memset(&job, 0, sizeof(job));
	job.kind = TSM_KIND_MOVE;
	job.skip_reason = skip_reason;
	job.relid = RelationGetRelid(rel);
	job.relname = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
											 RelationGetRelationName(rel));
	job.relkind = rel->rd_rel->relkind;
	job.owner = rel->rd_rel->relowner;
	job.submitted_by = GetUserId();
	job.mode = mode;
	job.source_spc = OidIsValid(rel->rd_rel->reltablespace) ?
		rel->rd_rel->reltablespace : MyDatabaseTableSpace;
	job.target_spc = target_spc;
	job.max_rate_mb = rate;
	job.relfilenode = TSM_REL(TsmRelationNode(rel));
	job.parent_job = parent_job;
	if (skip_reason == NULL)
		tsm_note_submission();
	return tsm_jobrec_insert(&job);
}
