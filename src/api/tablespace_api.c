/*-------------------------------------------------------------------------
 *
 * tablespace_api.c
 *	  The SQL functions for whole tablespaces: tsmove.relocate_tablespace(),
 *	  which queues one job that moves every file of a tablespace, in every
 *	  database, to a new directory (the relocation_*.c files run it), and
 *	  tsmove.move_tablespace(), which queues a relation move for every
 *	  relation of this database stored in a tablespace (relation_move.c runs
 *	  them).
 *
 * Both only validate and insert job rows in the caller's transaction, as
 * tsmove.move() does (job_api.c); the launcher starts them when it commits.
 * A top of move/, beside job_api.c: it calls submit.c (the checks and the
 * submission), job_record.c and queue.c, and nothing calls it.
 *
 * Privileges: relocate_tablespace() is for superusers only: it writes
 * outside the data directory, as CREATE TABLESPACE does.  move_tablespace()
 * needs CREATE on the target and moves the relations the caller owns;
 * each relation it cannot move gets a job row in state 'skipped' that
 * says why, so nothing is left behind silently.
 *
 * Locks: move_tablespace() takes AccessShareLock on each relation it
 * considers (after checking ownership), until the end of the transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_tablespace.h"
#include "commands/tablespace.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "jobs/job_record.h"
#include "jobs/local_jobs.h"
#include "jobs/submit.h"

PG_FUNCTION_INFO_V1(tsm_relocate_tablespace);
PG_FUNCTION_INFO_V1(tsm_move_tablespace);

static Oid
tablespace_argument(const char *name)
{
	Oid			spc = get_tablespace_oid(name, true);

	if (!OidIsValid(spc))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("tablespace \"%s\" does not exist", name),
				 errhint("List tablespaces with \\db or SELECT spcname FROM pg_tablespace.")));
	return spc;
}

/* Error out if job other (not 0) relocates the tablespace already. */
static void
refuse_if_relocated(const char *spcname, int64 other)
{
	if (other != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("tablespace \"%s\" is already being relocated by job %lld",
						spcname, (long long) other),
				 errhint("Wait for it with tsmove.wait(%lld) or stop it with tsmove.cancel(%lld).",
						 (long long) other, (long long) other)));
}

/*
 * relocate_tablespace() on a hot standby: this server's own copy of the
 * tablespace moves, recorded as a local job (local_jobs.h), which the
 * launcher runs at once, whether or not the caller's transaction commits
 * (a standby's transactions write nothing).  The primary is not involved.
 */
static int64
relocate_on_standby(const char *spcname, const char *new_location, double rate)
{
	Oid			spc;
	int64		other;
	HeapTuple	tuple;
	TsmLocalJob job;

	if (max_replication_slots <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_tsmove requires max_replication_slots > 0 for online moves"),
				 errdetail("A relocation keeps the WAL it has yet to read with a replication slot."),
				 errhint("Raise max_replication_slots and restart the server.")));
	spc = tablespace_argument(spcname);
	(void) tsm_check_relocatable(spc, spcname, new_location);
	other = tsm_localjob_active_on_tablespace(spc);
	refuse_if_relocated(spcname, other);

	tuple = SearchSysCache1(TABLESPACEOID, ObjectIdGetDatum(spc));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for tablespace %u", spc);
	memset(&job, 0, sizeof(job));
	job.state = TSM_QUEUED;
	job.dbid = MyDatabaseId;
	job.spc = spc;
	strlcpy(job.spcname, spcname, sizeof(job.spcname));
	job.owner = ((Form_pg_tablespace) GETSTRUCT(tuple))->spcowner;
	ReleaseSysCache(tuple);
	job.submitted_by = GetUserId();
	job.max_rate_mb = rate;
	job.switch_ms = -1;
	strlcpy(job.new_location, new_location, sizeof(job.new_location));
	(void) tsm_localjob_insert(&job);
	tsm_wake_launcher();
	return job.job_id;
}

/*
 * tsmove.relocate_tablespace(tablespace name, new_location text,
 *							  max_rate_mb numeric DEFAULT NULL) RETURNS bigint
 *
 * Queues the relocation of a tablespace's files to new_location, an empty
 * directory owned by the server's user; returns the job id.  Superuser.
 */
Datum
tsm_relocate_tablespace(PG_FUNCTION_ARGS)
{
	char	   *spcname;
	char	   *new_location;
	double		rate;
	Oid			spc;
	int64		other;
	HeapTuple	tuple;
	TsmNewJob	job;

	tsm_require_preload();
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be superuser to relocate a tablespace"),
				 errdetail("A relocation writes files outside the data directory, as CREATE TABLESPACE does."),
				 errhint("Ask a superuser to run tsmove.relocate_tablespace().")));
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("tablespace and new location must not be null"),
				 errhint("Call tsmove.relocate_tablespace('tablespace', '/new/empty/directory').")));
	spcname = NameStr(*PG_GETARG_NAME(0));
	new_location = text_to_cstring(PG_GETARG_TEXT_PP(1));
	canonicalize_path(new_location);
	rate = tsm_rate_argument(fcinfo, 2);
	if (RecoveryInProgress())
		PG_RETURN_INT64(relocate_on_standby(spcname, new_location, rate));
	tsm_check_server_can_move(true);
	spc = tablespace_argument(spcname);

	(void) tsm_check_relocatable(spc, spcname, new_location);
	other = tsm_active_relocation_of(spc);
	refuse_if_relocated(spcname, other);
	other = tsm_active_move_on_tablespace(spc);
	if (other != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot relocate tablespace \"%s\" while job %lld moves a relation into or out of it",
						spcname, (long long) other),
				 errhint("Wait for that move to end, then relocate.")));

	tuple = SearchSysCache1(TABLESPACEOID, ObjectIdGetDatum(spc));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for tablespace %u", spc);
	memset(&job, 0, sizeof(job));
	job.kind = TSM_KIND_RELOCATE;
	job.relid = InvalidOid;
	job.relname = spcname;
	job.relkind = TSM_RELKIND_TABLESPACE;
	job.owner = ((Form_pg_tablespace) GETSTRUCT(tuple))->spcowner;
	ReleaseSysCache(tuple);
	job.submitted_by = GetUserId();
	job.mode = TSM_MODE_ONLINE;
	job.source_spc = job.target_spc = spc;
	job.max_rate_mb = rate;
	job.new_location = new_location;
	tsm_note_submission();
	PG_RETURN_INT64(tsm_jobrec_insert(&job));
}

/* A relation of the source tablespace, with the indexes that go with it. */
typedef struct Candidate
{
	Oid			relid;
	int64		blocks;			/* with its TOAST and chained indexes */
	List	   *indexes;		/* of a table: its indexes in the source */
} Candidate;

static int
candidate_by_size_desc(const ListCell *a, const ListCell *b)
{
	const Candidate *ca = (const Candidate *) lfirst(a);
	const Candidate *cb = (const Candidate *) lfirst(b);

	if (ca->blocks != cb->blocks)
		return ca->blocks > cb->blocks ? -1 : 1;
	return ca->relid < cb->relid ? -1 : 1;
}

/* Blocks of a relation the caller owns, with its TOAST; 0 for others'. */
static int64
relation_blocks(Oid relid)
{
	Relation	rel;
	int64		blocks = 0;

	if (!tsm_owns_relation(relid, GetUserId()))
		return 0;
	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		return 0;
	if (RELKIND_HAS_STORAGE(rel->rd_rel->relkind))
		blocks = RelationGetNumberOfBlocks(rel);
	if (OidIsValid(rel->rd_rel->reltoastrelid))
		blocks += relation_blocks(rel->rd_rel->reltoastrelid);
	relation_close(rel, AccessShareLock);
	return blocks;
}

/*
 * Queue the move of one relation (chained behind parent_job if not 0), or,
 * if it cannot move, record it as skipped with the reason: the refusal
 * tsmove.move() would give.  Returns the job id (0 if the relation was
 * dropped meanwhile); *skipped says which.
 */
static int64
queue_or_skip(Oid relid, Oid target_spc, TsmMoveMode requested, double rate,
			  int64 parent_job, bool *skipped)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	Relation	rel;
	volatile TsmMoveMode mode = requested;
	volatile double job_rate = rate;
	char	   *volatile reason = NULL;
	char	   *relname = get_rel_name(relid);

	*skipped = false;
	if (relname == NULL)
		return 0;				/* dropped meanwhile */
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		tsm_check_move_privileges(relid, relname, target_spc, GetUserId());
		rel = relation_open(relid, AccessShareLock);
		if (rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
		{
			/* cannot be mirrored: copied under AccessExclusiveLock, at full speed */
			mode = TSM_MODE_EXCLUSIVE;
			job_rate = 0;
		}
		tsm_check_movable(rel, target_spc, mode);
		if (tsm_jobrec_active_job(relid) != 0)
			ereport(ERROR,
					(errmsg("relation \"%s\" is already being moved by job %lld",
							relname, (long long) tsm_jobrec_active_job(relid))));
		relation_close(rel, NoLock);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		reason = psprintf("not moved: %s%s%s", edata->message,
						  edata->hint ? ". " : "", edata->hint ? edata->hint : "");
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;

	rel = relation_open(relid, AccessShareLock);
	if (reason)
		ereport(NOTICE,
				(errmsg("relation \"%s\" %s", RelationGetRelationName(rel), reason)));
	*skipped = (reason != NULL);
	relid = tsm_insert_move(rel, target_spc, mode, job_rate, reason ? 0 : parent_job,
							reason);
	relation_close(rel, NoLock);
	return relid;
}

/*
 * tsmove.move_tablespace(source name, target name, mode text DEFAULT
 *						  'online', max_rate_mb numeric DEFAULT NULL)
 *	  RETURNS SETOF bigint
 *
 * Queues a move to target of every relation of this database stored in
 * source (the database's default tablespace: reltablespace = 0) and
 * returns the job ids.  Order: tables and materialized views by size,
 * largest first, each with its indexes in source queued behind it (they
 * arrive together); then indexes whose table stays.  Largest first, with
 * several workers, ends the whole sooner (the longest jobs start early,
 * the short ones fill in), and runs out of space, if it must, at the
 * start rather than hours in.  Unlogged relations move in exclusive mode.
 * Relations it cannot move (sequences, partitioned parents, others'
 * relations, ...) get a 'skipped' row with the reason.
 */
Datum
tsm_move_tablespace(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	   *source_name;
	char	   *target_name;
	Oid			source_spc;
	Oid			target_spc;
	Oid			stored_as;
	TsmMoveMode mode;
	bool		mode_known;
	double		rate;
	Relation	pg_class;
	TableScanDesc scan;
	HeapTuple	tuple;
	List	   *tables = NIL;
	List	   *loose_indexes = NIL;
	List	   *others = NIL;
	ListCell   *lc;
	int			system_relations = 0;

	tsm_require_preload();
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("source and target tablespace must not be null"),
				 errhint("Call tsmove.move_tablespace('old_disk', 'new_disk').")));
	source_name = NameStr(*PG_GETARG_NAME(0));
	target_name = NameStr(*PG_GETARG_NAME(1));
	mode = tsm_mode_argument(PG_ARGISNULL(2) ? "online" : text_to_cstring(PG_GETARG_TEXT_PP(2)),
							 &mode_known);
	rate = tsm_rate_argument(fcinfo, 3);
	tsm_check_server_can_move(true);
	source_spc = tablespace_argument(source_name);
	target_spc = tablespace_argument(target_name);
	if (source_spc == target_spc)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("source and target tablespace are both \"%s\"", source_name),
				 errhint("Choose another target.")));
	if (target_spc == GLOBALTABLESPACE_OID || source_spc == GLOBALTABLESPACE_OID)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot move relations into or out of tablespace \"pg_global\""),
				 errhint("Only shared system catalogs live there.")));
	if (target_spc != MyDatabaseTableSpace &&
		tsm_tablespace_aclcheck(target_spc, GetUserId(), ACL_CREATE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for tablespace \"%s\"", target_name),
				 errhint("Ask a superuser to GRANT CREATE ON TABLESPACE %s.",
						 quote_identifier(target_name))));
	tsm_check_no_relocation_of(source_spc, "out of");
	tsm_check_no_relocation_of(target_spc, "into");

	/* The relations stored in source, by kind. */
	stored_as = (source_spc == MyDatabaseTableSpace) ? InvalidOid : source_spc;
	pg_class = table_open(RelationRelationId, AccessShareLock);
	scan = table_beginscan_catalog(pg_class, 0, NULL);
	while (HeapTupleIsValid(tuple = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_class form = (Form_pg_class) GETSTRUCT(tuple);
		Candidate  *c;

		if (form->reltablespace != stored_as ||
			form->relkind == RELKIND_TOASTVALUE)	/* moves with its table */
			continue;
		if (stored_as == InvalidOid && form->oid < FirstNormalObjectId)
		{
			system_relations++;
			continue;
		}
		if (!(RELKIND_HAS_STORAGE(form->relkind) ||
			  form->relkind == RELKIND_PARTITIONED_TABLE ||
			  form->relkind == RELKIND_PARTITIONED_INDEX))
			continue;
		c = palloc0(sizeof(Candidate));
		c->relid = form->oid;
		if (form->relkind == RELKIND_RELATION || form->relkind == RELKIND_MATVIEW)
			tables = lappend(tables, c);
		else if (form->relkind == RELKIND_INDEX)
			loose_indexes = lappend(loose_indexes, c);
		else
			others = lappend(others, c);
	}
	table_endscan(scan);
	table_close(pg_class, AccessShareLock);
	if (system_relations > 0)
		ereport(NOTICE,
				(errmsg("%d system relations stay in tablespace \"%s\"", system_relations,
						source_name),
				 errdetail("They are the database's own: it is the database's default tablespace."),
				 errhint("Move them with ALTER DATABASE ... SET TABLESPACE.")));

	/* An index of a table that moves goes with it, unless it is a TOAST index. */
	foreach(lc, loose_indexes)
	{
		Candidate  *index = (Candidate *) lfirst(lc);
		HeapTuple	itup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(index->relid));
		Oid			table_relid;
		ListCell   *tc;

		if (!HeapTupleIsValid(itup))
			continue;
		table_relid = ((Form_pg_index) GETSTRUCT(itup))->indrelid;
		ReleaseSysCache(itup);
		index->blocks = relation_blocks(index->relid);
		if (get_rel_relkind(table_relid) == RELKIND_TOASTVALUE)
		{
			loose_indexes = foreach_delete_current(loose_indexes, lc);
			continue;
		}
		foreach(tc, tables)
		{
			Candidate  *table = (Candidate *) lfirst(tc);

			if (table->relid == table_relid)
			{
				table->indexes = lappend(table->indexes, index);
				loose_indexes = foreach_delete_current(loose_indexes, lc);
				break;
			}
		}
	}
	foreach(lc, tables)
	{
		Candidate  *table = (Candidate *) lfirst(lc);
		ListCell   *ic;

		table->blocks = relation_blocks(table->relid);
		foreach(ic, table->indexes)
			table->blocks += ((Candidate *) lfirst(ic))->blocks;
	}
	list_sort(tables, candidate_by_size_desc);
	list_sort(loose_indexes, candidate_by_size_desc);

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	foreach(lc, list_concat(list_concat(tables, loose_indexes), others))
	{
		Candidate  *c = (Candidate *) lfirst(lc);
		bool		skipped;
		bool		index_skipped;
		int64		job_id = queue_or_skip(c->relid, target_spc, mode, rate, 0, &skipped);
		ListCell   *ic;
		Datum		value;
		bool		isnull = false;

		if (job_id != 0)
		{
			value = Int64GetDatum(job_id);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
		}
		foreach(ic, c->indexes)
		{
			/* behind its table's job, unless that one will not run */
			int64		index_job = queue_or_skip(((Candidate *) lfirst(ic))->relid,
												  target_spc, mode, rate,
												  (job_id == 0 || skipped) ? 0 : job_id,
												  &index_skipped);

			if (index_job == 0)
				continue;
			value = Int64GetDatum(index_job);
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
		}
	}
	return (Datum) 0;
}
