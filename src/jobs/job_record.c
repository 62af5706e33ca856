/*-------------------------------------------------------------------------
 *
 * job_record.c
 *	  The durable record of jobs: every statement pg_tsmove runs on its
 *	  table tsmove.job, and nothing else runs SQL; and the names of job
 *	  states and modes, as the table and the views spell them.
 *
 * The table is revoked from PUBLIC; these functions read and write it as
 * the bootstrap superuser, after the caller has made its own privilege
 * checks.  That is SQL with elevated rights inside a session an
 * unprivileged role controls (its search_path, its own operators) or, in
 * a worker, one whose database-level settings the database owner controls
 * (ALTER DATABASE ... SET search_path).  So every statement runs between
 * jobsql_begin() and jobsql_end(), which
 *	- switch to the bootstrap superuser (SECURITY_LOCAL_USERID_CHANGE),
 *	- set search_path = pg_catalog, pg_temp in a GUC nest level of their
 *	  own, as SECURITY DEFINER functions are told to: pg_temp is never
 *	  searched for operators or functions, so no name a role can create
 *	  is resolved,
 *	- flag this backend as pg_tsmove's own writer (see below),
 *	- push a snapshot of their own if the caller has none (a worker calls
 *	  them between lock waits, where it must not hold one).
 * The statements name tsmove.job qualified and take every value as a
 * parameter, never as SQL text.  An error in between is safe: (sub)
 * transaction abort restores the user, the GUCs and SPI.
 *
 * Logical replication: tsmove.job is an ordinary table, so FOR ALL TABLES
 * publications carry its changes, and a subscriber needs the table.  On a
 * subscriber with pg_tsmove installed the REPLICA trigger
 * tsmove.job_ignore_replicated_change() discards them: it fires only where
 * session_replication_role = replica, as in apply workers, and keeps only
 * the changes pg_tsmove itself makes.  The publisher's jobs describe the
 * publisher's files; on the subscriber they would be a queue of moves of
 * relations that have other OIDs there.
 *
 * Locks: row locks on tsmove.job only.  A worker claims a queued job with
 * FOR UPDATE SKIP LOCKED, so two workers never claim the same one.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "jobs/job_record.h"
#include "jobs/local_jobs.h"

PG_FUNCTION_INFO_V1(tsm_job_ignore_replicated_change);

/* The search_path every statement on the job table runs with. */
#define TSM_SAFE_SEARCH_PATH "pg_catalog, pg_temp"

/* The states in which a job has ended. */
#define TSM_FINAL_STATES_SQL "('done', 'failed', 'cancelled', 'skipped')"

static int	oid_array_values(Datum array, Oid *oids);

/* Nonzero while pg_tsmove runs its own statements on the job table. */
static int	jobsql_depth = 0;
static bool jobsql_callbacks_registered = false;

typedef struct JobSql
{
	Oid			save_userid;
	int			save_sec;
	int			guc_nestlevel;
	bool		pushed_snapshot;	/* the caller had no active snapshot */
	MemoryContext caller_cxt;	/* results are copied here */
} JobSql;

/* ---- the names of states and modes, as the table spells them ---- */

static const char *const state_names[] = {
	[TSM_QUEUED] = "queued",
	[TSM_PREPARING] = "preparing",
	[TSM_COPYING] = "copying",
	[TSM_CATCHING_UP] = "catching_up",
	[TSM_SWITCHING] = "switching",
	[TSM_WARMING] = "warming",
	[TSM_DONE] = "done",
	[TSM_FAILED] = "failed",
	[TSM_CANCELLED] = "cancelled",
	[TSM_SKIPPED] = "skipped",
	[TSM_PAUSED] = "paused",
};

static const char *const mode_names[] = {
	[TSM_MODE_ONLINE] = "online",
	[TSM_MODE_QUIESCE] = "quiesce",
	[TSM_MODE_EXCLUSIVE] = "exclusive",
};

const char *
tsm_state_name(TsmJobState state)
{
	return state_names[state];
}

TsmJobState
tsm_state_from_name(const char *name)
{
	for (int i = 0; i < lengthof(state_names); i++)
		if (strcmp(state_names[i], name) == 0)
			return (TsmJobState) i;
	elog(ERROR, "unknown pg_tsmove job state \"%s\"", name);
	return TSM_FAILED;			/* keep compiler quiet */
}


const char *
tsm_mode_name(TsmMoveMode mode)
{
	return mode_names[mode];
}

/* The mode called name; *found says whether there is one. */
TsmMoveMode
tsm_mode_from_name(const char *name, bool missing_ok, bool *found)
{
	for (int i = 0; i < lengthof(mode_names); i++)
		if (strcmp(mode_names[i], name) == 0)
		{
			*found = true;
			return (TsmMoveMode) i;
		}
	if (!missing_ok)
		elog(ERROR, "unknown pg_tsmove mode \"%s\"", name);
	*found = false;
	return TSM_MODE_ONLINE;
}

/* ---- running statements on the job table ---- */

/* An aborted (sub)transaction never reaches jobsql_end(). */
static void
jobsql_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		jobsql_depth = 0;
}

static void
jobsql_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		jobsql_depth = 0;
}

static void
jobsql_begin(JobSql *ctx)
{
	if (!jobsql_callbacks_registered)
	{
		RegisterXactCallback(jobsql_xact_callback, NULL);
		RegisterSubXactCallback(jobsql_subxact_callback, NULL);
		jobsql_callbacks_registered = true;
	}
	ctx->caller_cxt = CurrentMemoryContext;
	GetUserIdAndSecContext(&ctx->save_userid, &ctx->save_sec);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   ctx->save_sec | SECURITY_LOCAL_USERID_CHANGE);
	ctx->guc_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", TSM_SAFE_SEARCH_PATH,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
							 true, 0, false);
	jobsql_depth++;
	/* a statement's own snapshot, if the caller holds none */
	ctx->pushed_snapshot = !ActiveSnapshotSet();
	if (ctx->pushed_snapshot)
		PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

static void
jobsql_end(JobSql *ctx)
{
	SPI_finish();
	if (ctx->pushed_snapshot)
		PopActiveSnapshot();
	jobsql_depth--;
	AtEOXact_GUC(true, ctx->guc_nestlevel);
	SetUserIdAndSecContext(ctx->save_userid, ctx->save_sec);
}

/* Run one statement between jobsql_begin() and jobsql_end(). */
static void
jobsql_run(const char *sql, int nargs, Oid *argtypes, Datum *values,
		   const char *nulls, bool read_only, long count, int expected)
{
	int			rc = SPI_execute_with_args(sql, nargs, argtypes, values, nulls,
										   read_only, count);

	if (rc != expected)
		elog(ERROR, "pg_tsmove: statement on tsmove.job returned %s: %s",
			 SPI_result_code_string(rc), sql);
}

static Datum
jobsql_value(int row, int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc,
						 col, isnull);
}

static char *
jobsql_text(JobSql *ctx, int row, int col)
{
	char	   *value = SPI_getvalue(SPI_tuptable->vals[row],
									 SPI_tuptable->tupdesc, col);

	return value ? MemoryContextStrdup(ctx->caller_cxt, value) : NULL;
}

/* A single statement that returns no rows; returns SPI_processed. */
static uint64
jobsql_update(const char *sql, int nargs, Oid *argtypes, Datum *values,
			  const char *nulls)
{
	JobSql		ctx;
	uint64		processed;

	jobsql_begin(&ctx);
	jobsql_run(sql, nargs, argtypes, values, nulls, false, 0, SPI_OK_UPDATE);
	processed = SPI_processed;
	jobsql_end(&ctx);
	return processed;
}

/*
 * The index jobs queued behind a table's job (with_indexes) never run if
 * the table's job ended failed or cancelled: the table stayed where it was.
 * An index job's end concerns that index only.  Same transaction as the end.
 */
static void
jobsql_end_chain(int64 job_id, TsmJobState state)
{
	Oid			argtypes[2] = {INT8OID, TEXTOID};
	Datum		values[2];
	char		reason[128];

	snprintf(reason, sizeof(reason), "not started: job %lld, which it was queued behind, was %s",
			 (long long) job_id, tsm_state_name(state));
	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(reason);
	(void) jobsql_update("UPDATE tsmove.job SET state = 'cancelled', error = $2, "
						 "finished_at = pg_catalog.clock_timestamp() "
						 "WHERE state = 'queued' AND parent_job = $1",
						 2, argtypes, values, NULL);
}

/*
 * Insert a job row in the current transaction and return its id.
 */
int64
tsm_jobrec_insert(const TsmNewJob *job)
{
	Oid			argtypes[15] = {OIDOID, TEXTOID, CHAROID, OIDOID, OIDOID,
		TEXTOID, OIDOID, OIDOID, FLOAT8OID, OIDOID, INT8OID, TEXTOID,
	TEXTOID, TEXTOID, TEXTOID};
	Datum		values[15];
	char		nulls[15];
	JobSql		ctx;
	bool		isnull;
	int64		job_id;
	bool		relocation = (job->kind == TSM_KIND_RELOCATE);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = ObjectIdGetDatum(job->relid);
	values[1] = CStringGetTextDatum(job->relname);
	values[2] = CharGetDatum(job->relkind);
	values[3] = ObjectIdGetDatum(job->owner);
	values[4] = ObjectIdGetDatum(job->submitted_by);
	values[5] = CStringGetTextDatum(tsm_mode_name(job->mode));
	values[6] = ObjectIdGetDatum(job->source_spc);
	values[7] = ObjectIdGetDatum(job->target_spc);
	values[8] = Float8GetDatum(job->max_rate_mb);
	values[9] = ObjectIdGetDatum(job->relfilenode);
	values[10] = Int64GetDatum(job->parent_job);
	if (job->parent_job == 0)
		nulls[10] = 'n';
	values[11] = CStringGetTextDatum(relocation ? "relocate" : "move");
	if (job->new_location)
		values[12] = CStringGetTextDatum(job->new_location);
	else
		nulls[12] = 'n';
	values[13] = CStringGetTextDatum(job->skip_reason ? "skipped" : "queued");
	if (job->skip_reason)
		values[14] = CStringGetTextDatum(job->skip_reason);
	else
		nulls[14] = 'n';

	jobsql_begin(&ctx);
	jobsql_run("INSERT INTO tsmove.job (relid, relname, relkind, owner, "
			   "submitted_by, mode, source_tablespace, target_tablespace, "
			   "max_rate_mb, members, old_relfilenodes, parent_job, job_kind, "
			   "new_location, state, error, finished_at) "
			   "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
			   "CASE WHEN $12 = 'move' THEN ARRAY[$1] ELSE '{}' END, "
			   "CASE WHEN $12 = 'move' THEN ARRAY[$10] ELSE '{}' END, "
			   "$11, $12, $13, $14, $15, "
			   "CASE WHEN $14 = 'skipped' THEN pg_catalog.clock_timestamp() END) "
			   "RETURNING job_id",
			   15, argtypes, values, nulls, false, 1, SPI_OK_INSERT_RETURNING);
	job_id = DatumGetInt64(jobsql_value(0, 1, &isnull));
	jobsql_end(&ctx);
	return job_id;
}

/*
 * Read a job's state, submitter and relation owner.  With latest, as
 * committed now whatever the caller's snapshot (tsmove.wait() polls).
 * Returns false if there is no such job.
 */
bool
tsm_jobrec_read(int64 job_id, bool latest, TsmJobInfo *info)
{
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(job_id);
	JobSql		ctx;
	bool		found;

	if (tsm_job_is_local(job_id))
	{
		TsmLocalJob local;

		if (!tsm_localjob_read(job_id, &local))
			return false;
		info->state = local.state;
		info->submitted_by = local.submitted_by;
		info->owner = local.owner;
		info->submitted_here = false;
		return true;
	}
	jobsql_begin(&ctx);
	if (latest)
		PushActiveSnapshot(GetLatestSnapshot());
	jobsql_run("SELECT state, submitted_by, owner, xmin FROM tsmove.job "
			   "WHERE job_id = $1",
			   1, &argtype, &arg, NULL, true, 1, SPI_OK_SELECT);
	found = (SPI_processed == 1);
	if (found)
	{
		bool		isnull;
		char	   *state = jobsql_text(&ctx, 0, 1);

		info->state = tsm_state_from_name(state);
		info->submitted_by = DatumGetObjectId(jobsql_value(0, 2, &isnull));
		info->owner = DatumGetObjectId(jobsql_value(0, 3, &isnull));
		info->submitted_here = TransactionIdIsCurrentTransactionId(
			DatumGetTransactionId(jobsql_value(0, 4, &isnull)));
	}
	if (latest)
		PopActiveSnapshot();
	jobsql_end(&ctx);
	return found;
}

/* The relation move of relid that has not ended, or 0. */
int64
tsm_jobrec_active_job(Oid relid)
{
	Oid			argtype = OIDOID;
	Datum		arg = ObjectIdGetDatum(relid);
	JobSql		ctx;
	int64		job_id = 0;

	jobsql_begin(&ctx);
	jobsql_run("SELECT job_id FROM tsmove.job WHERE relid = $1 "
			   "AND job_kind = 'move' AND state NOT IN " TSM_FINAL_STATES_SQL,
			   1, &argtype, &arg, NULL, true, 1, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		bool		isnull;

		job_id = DatumGetInt64(jobsql_value(0, 1, &isnull));
	}
	jobsql_end(&ctx);
	return job_id;
}

/*
 * A job of this database that has not ended and involves tablespace spc:
 * of kind TSM_KIND_RELOCATE, a relocation of it; of kind TSM_KIND_MOVE, a
 * relation move into or out of it.  0 if none.
 */
int64
tsm_jobrec_active_job_on_tablespace(Oid spc, TsmJobKind kind)
{
	Oid			argtypes[2] = {OIDOID, TEXTOID};
	Datum		values[2];
	JobSql		ctx;
	int64		job_id = 0;

	values[0] = ObjectIdGetDatum(spc);
	values[1] = CStringGetTextDatum(kind == TSM_KIND_RELOCATE ? "relocate" : "move");
	jobsql_begin(&ctx);
	jobsql_run("SELECT job_id FROM tsmove.job WHERE job_kind = $2 "
			   "AND (source_tablespace = $1 OR target_tablespace = $1) "
			   "AND state NOT IN " TSM_FINAL_STATES_SQL " ORDER BY job_id LIMIT 1",
			   2, argtypes, values, NULL, true, 1, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		bool		isnull;

		job_id = DatumGetInt64(jobsql_value(0, 1, &isnull));
	}
	jobsql_end(&ctx);
	return job_id;
}

/*
 * The queue's order: oldest first, a table's index jobs right behind it.
 * A job chained to another (parent_job) can run once that one is done.
 */
#define TSM_CLAIMABLE_SQL \
	"SELECT c.job_id FROM tsmove.job c WHERE c.state = 'queued' " \
	"AND (c.parent_job IS NULL OR EXISTS (SELECT FROM tsmove.job p " \
	"     WHERE p.job_id = c.parent_job AND p.state = 'done')) " \
	"ORDER BY COALESCE(c.parent_job, c.job_id), c.job_id LIMIT 1"

/*
 * Claim the next queued job that can run: mark it 'preparing' in the
 * caller's transaction and return it.  The caller publishes the job in its
 * slot before committing, so the recovery pass never takes a claimed job
 * for an abandoned one.  Returns false if none can run now.
 */
bool
tsm_jobrec_claim_next(TsmClaimedJob *claimed)
{
	JobSql		ctx;
	bool		found;

	jobsql_begin(&ctx);
	jobsql_run("UPDATE tsmove.job SET state = 'preparing', "
			   "started_at = COALESCE(started_at, pg_catalog.clock_timestamp()) "
			   "WHERE state = 'queued' AND job_id = (" TSM_CLAIMABLE_SQL
			   " FOR UPDATE SKIP LOCKED) "
			   "RETURNING job_id, relid, relname, mode, source_tablespace, "
			   "target_tablespace, max_rate_mb::pg_catalog.float8, "
			   "COALESCE(old_relfilenodes[1], 0), submitted_by, job_kind, new_location, "
			   "members, old_relfilenodes, new_relfilenodes, pause_requested, "
			   "blocks_recopied, bytes_written, wal_bytes, switch_attempts, lock_wait_ms",
			   0, NULL, NULL, NULL, false, 1, SPI_OK_UPDATE_RETURNING);
	found = (SPI_processed == 1);
	if (found)
	{
		bool		isnull;
		bool		known;
		Datum		new_nodes;

		claimed->job_id = DatumGetInt64(jobsql_value(0, 1, &isnull));
		claimed->relid = DatumGetObjectId(jobsql_value(0, 2, &isnull));
		claimed->relname = jobsql_text(&ctx, 0, 3);
		claimed->mode = tsm_mode_from_name(jobsql_text(&ctx, 0, 4), false, &known);
		claimed->source_spc = DatumGetObjectId(jobsql_value(0, 5, &isnull));
		claimed->target_spc = DatumGetObjectId(jobsql_value(0, 6, &isnull));
		claimed->max_rate_mb = DatumGetFloat8(jobsql_value(0, 7, &isnull));
		claimed->submitted_relfilenode = DatumGetObjectId(jobsql_value(0, 8, &isnull));
		claimed->submitted_by = DatumGetObjectId(jobsql_value(0, 9, &isnull));
		claimed->kind = strcmp(jobsql_text(&ctx, 0, 10), "relocate") == 0 ?
			TSM_KIND_RELOCATE : TSM_KIND_MOVE;
		claimed->new_location = jobsql_text(&ctx, 0, 11);

		/* a job with new storage recorded is one the recovery pass re-queued */
		new_nodes = jobsql_value(0, 14, &isnull);
		claimed->resuming = !isnull && claimed->kind == TSM_KIND_MOVE;
		if (claimed->resuming)
		{
			claimed->nmembers = oid_array_values(jobsql_value(0, 12, &isnull),
												 claimed->members);
			(void) oid_array_values(jobsql_value(0, 13, &isnull), claimed->old_nodes);
			(void) oid_array_values(new_nodes, claimed->new_nodes);
		}
		claimed->pause_requested = DatumGetBool(jobsql_value(0, 15, &isnull));
		claimed->earlier.blocks_recopied = DatumGetInt64(jobsql_value(0, 16, &isnull));
		claimed->earlier.bytes_written = DatumGetInt64(jobsql_value(0, 17, &isnull));
		claimed->earlier.wal_bytes = DatumGetInt64(jobsql_value(0, 18, &isnull));
		claimed->earlier.switch_attempts = DatumGetInt32(jobsql_value(0, 19, &isnull));
		claimed->earlier.lock_wait_ms = DatumGetFloat8(jobsql_value(0, 20, &isnull));
	}
	jobsql_end(&ctx);
	return found;
}

/* Whether another queued job could be claimed now (for a second worker). */
bool
tsm_jobrec_has_claimable(void)
{
	JobSql		ctx;
	bool		found;

	jobsql_begin(&ctx);
	jobsql_run(TSM_CLAIMABLE_SQL " FOR UPDATE SKIP LOCKED",
			   0, NULL, NULL, NULL, false, 1, SPI_OK_SELECT);
	found = (SPI_processed > 0);
	jobsql_end(&ctx);
	return found;
}

/* Whether any job is queued, runnable now or not. */
bool
tsm_jobrec_has_queued(void)
{
	JobSql		ctx;
	bool		found;

	jobsql_begin(&ctx);
	jobsql_run("SELECT FROM tsmove.job WHERE state = 'queued' LIMIT 1",
			   0, NULL, NULL, NULL, true, 1, SPI_OK_SELECT);
	found = (SPI_processed > 0);
	jobsql_end(&ctx);
	return found;
}

/* The elements of an oid[] (at most TSM_MAX_MEMBERS) into oids; returns how many. */
static int
oid_array_values(Datum array, Oid *oids)
{
	Datum	   *elems;
	int			nelems;

	deconstruct_array(DatumGetArrayTypeP(array), OIDOID, sizeof(Oid),
					  true, TYPALIGN_INT, &elems, NULL, &nelems);
	nelems = Min(nelems, TSM_MAX_MEMBERS);
	for (int i = 0; i < nelems; i++)
		oids[i] = DatumGetObjectId(elems[i]);
	return nelems;
}

static ArrayType *
oid_array(int n, const Oid *oids)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = ObjectIdGetDatum(oids[i]);
	return construct_array(elems, n, OIDOID, sizeof(Oid), true, TYPALIGN_INT);
}

/*
 * Record which files a job moves and the new relfilenodes it chose, before
 * it creates any: after a crash this is the record of what to remove.
 */
void
tsm_jobrec_record_storage(int64 job_id, int nmembers, const Oid *members,
						  const TsmRelFileNumber *old_nodes,
						  const TsmRelFileNumber *new_nodes)
{
	Oid			argtypes[4] = {INT8OID, OIDARRAYOID, OIDARRAYOID, OIDARRAYOID};
	Datum		values[4];

	values[0] = Int64GetDatum(job_id);
	values[1] = PointerGetDatum(oid_array(nmembers, members));
	values[2] = PointerGetDatum(oid_array(nmembers, old_nodes));
	values[3] = PointerGetDatum(oid_array(nmembers, new_nodes));
	(void) jobsql_update("UPDATE tsmove.job SET members = $2, "
						 "old_relfilenodes = $3, new_relfilenodes = $4 "
						 "WHERE job_id = $1",
						 4, argtypes, values, NULL);
}

/*
 * Record where a relocation's files are before it writes any: after a
 * crash this is the record of what to remove (the new location is in the
 * row since submission).
 */
void
tsm_jobrec_record_old_location(int64 job_id, const char *old_location)
{
	Oid			argtypes[2] = {INT8OID, TEXTOID};
	Datum		values[2];

	if (tsm_job_is_local(job_id))
	{
		tsm_localjob_record_old_location(job_id, old_location);
		return;
	}
	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(old_location);
	(void) jobsql_update("UPDATE tsmove.job SET old_location = $2 WHERE job_id = $1",
						 2, argtypes, values, NULL);
}

/*
 * Save a job's state, error (NULL clears it) and counters in its row.
 * Final states stamp finished_at, and failed or cancelled ends the chain.
 */
void
tsm_jobrec_save(int64 job_id, const TsmProgress *progress, const char *error)
{
	Oid			argtypes[12] = {INT8OID, TEXTOID, TEXTOID, INT8OID, INT8OID,
		INT8OID, INT8OID, INT8OID, INT4OID, FLOAT8OID, FLOAT8OID, INT8OID};
	Datum		values[12];
	char		nulls[12];

	if (tsm_job_is_local(job_id))
	{
		tsm_localjob_save(job_id, progress, error);
		return;
	}
	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(tsm_state_name(progress->state));
	if (error)
		values[2] = CStringGetTextDatum(error);
	else
		nulls[2] = 'n';
	values[3] = Int64GetDatum(progress->blocks_total);
	values[4] = Int64GetDatum(progress->blocks_copied);
	values[5] = Int64GetDatum(progress->blocks_recopied);
	values[6] = Int64GetDatum(progress->bytes_written);
	values[7] = Int64GetDatum(progress->wal_bytes);
	values[8] = Int32GetDatum(progress->switch_attempts);
	values[9] = Float8GetDatum(progress->lock_wait_ms);
	values[10] = Float8GetDatum(progress->switch_ms);
	if (progress->switch_ms < 0)
		nulls[10] = 'n';
	values[11] = Int64GetDatum(progress->blocks_under_lock);

	(void) jobsql_update("UPDATE tsmove.job SET state = $2, error = $3, "
						 "blocks_total = $4, blocks_copied = $5, blocks_recopied = $6, "
						 "bytes_written = $7, wal_bytes = $8, switch_attempts = $9, "
						 "lock_wait_ms = $10, switch_ms = $11, blocks_under_lock = $12, "
						 "started_at = COALESCE(started_at, pg_catalog.clock_timestamp()), "
						 "finished_at = CASE WHEN $2 IN " TSM_FINAL_STATES_SQL
						 " THEN pg_catalog.clock_timestamp() END "
						 "WHERE job_id = $1",
						 12, argtypes, values, nulls);
	if (progress->state == TSM_FAILED || progress->state == TSM_CANCELLED)
		jobsql_end_chain(job_id, progress->state);
}

/*
 * Set a job's state, and its error unless error is NULL; the rest as
 * tsm_jobrec_save().
 */
void
tsm_jobrec_set_state(int64 job_id, TsmJobState state, const char *error)
{
	Oid			argtypes[3] = {INT8OID, TEXTOID, TEXTOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	if (tsm_job_is_local(job_id))
	{
		tsm_localjob_set_state(job_id, state, error);
		return;
	}
	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(tsm_state_name(state));
	if (error)
		values[2] = CStringGetTextDatum(error);
	else
		nulls[2] = 'n';
	(void) jobsql_update("UPDATE tsmove.job SET state = $2, "
						 "error = COALESCE($3, error), "
						 "finished_at = CASE WHEN $2 IN " TSM_FINAL_STATES_SQL
						 " THEN pg_catalog.clock_timestamp() END "
						 "WHERE job_id = $1",
						 3, argtypes, values, nulls);
	if (state == TSM_FAILED || state == TSM_CANCELLED)
		jobsql_end_chain(job_id, state);
}

/*
 * Cancel a job if it is still queued or paused before it started, with the
 * jobs queued behind it.  Returns whether it was; *storage gets the new
 * relfilenodes of a job that was queued to resume, for the caller to drop.
 */
bool
tsm_jobrec_cancel_queued(int64 job_id, TsmUnfinishedJob *storage)
{
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(job_id);
	JobSql		ctx;
	bool		cancelled;

	if (tsm_job_is_local(job_id))
	{
		memset(storage, 0, sizeof(*storage));
		return tsm_localjob_cancel_queued(job_id);
	}
	memset(storage, 0, sizeof(*storage));
	jobsql_begin(&ctx);
	jobsql_run("UPDATE tsmove.job SET state = 'cancelled', "
			   "error = CASE WHEN new_relfilenodes IS NULL "
			   "        THEN 'cancelled before it started' "
			   "        ELSE 'cancelled while it waited to resume' END, "
			   "finished_at = pg_catalog.clock_timestamp() "
			   "WHERE job_id = $1 AND state IN ('queued', 'paused') "
			   "RETURNING target_tablespace, new_relfilenodes",
			   1, &argtype, &arg, NULL, false, 1, SPI_OK_UPDATE_RETURNING);
	cancelled = (SPI_processed == 1);
	if (cancelled)
	{
		bool		isnull;
		Datum		nodes;

		storage->job_id = job_id;
		storage->target_spc = DatumGetObjectId(jobsql_value(0, 1, &isnull));
		nodes = jobsql_value(0, 2, &isnull);
		if (!isnull)
			storage->nnew = oid_array_values(nodes, storage->new_relfilenodes);
	}
	jobsql_end(&ctx);
	if (cancelled)
		jobsql_end_chain(job_id, TSM_CANCELLED);
	return cancelled;
}

void
tsm_jobrec_set_rate(int64 job_id, double max_rate_mb)
{
	Oid			argtypes[2] = {INT8OID, FLOAT8OID};
	Datum		values[2];

	if (tsm_job_is_local(job_id))
	{
		tsm_localjob_set_rate(job_id, max_rate_mb);
		return;
	}
	values[0] = Int64GetDatum(job_id);
	values[1] = Float8GetDatum(max_rate_mb);
	(void) jobsql_update("UPDATE tsmove.job SET max_rate_mb = $2 WHERE job_id = $1",
						 2, argtypes, values, NULL);
}

/*
 * Call callback for every job that has started and not ended, oldest
 * first, with its row locked (FOR UPDATE) until the caller's transaction
 * ends.  For the recovery pass; the callback may update the job.
 */
void
tsm_jobrec_foreach_unfinished(TsmUnfinishedJobCallback callback, void *arg)
{
	JobSql		ctx;
	SPITupleTable *rows;
	uint64		nrows;

	jobsql_begin(&ctx);
	jobsql_run("SELECT job_id, state, target_tablespace, new_relfilenodes, "
			   "job_kind, old_location, new_location, mode, source_tablespace, "
			   "old_relfilenodes "
			   "FROM tsmove.job WHERE state NOT IN " TSM_FINAL_STATES_SQL
			   " AND (state NOT IN ('queued', 'paused') OR new_relfilenodes IS NOT NULL) "
			   "ORDER BY job_id FOR UPDATE",
			   0, NULL, NULL, NULL, false, 0, SPI_OK_SELECT);
	rows = SPI_tuptable;
	nrows = SPI_processed;
	for (uint64 i = 0; i < nrows; i++)
	{
		TsmUnfinishedJob job;
		bool		isnull;
		bool		known;
		Datum		nodes;

		memset(&job, 0, sizeof(job));
		SPI_tuptable = rows;
		job.job_id = DatumGetInt64(jobsql_value(i, 1, &isnull));
		job.state = tsm_state_from_name(SPI_getvalue(rows->vals[i], rows->tupdesc, 2));
		job.target_spc = DatumGetObjectId(jobsql_value(i, 3, &isnull));
		job.kind = strcmp(SPI_getvalue(rows->vals[i], rows->tupdesc, 5), "relocate") == 0 ?
			TSM_KIND_RELOCATE : TSM_KIND_MOVE;
		job.old_location = SPI_getvalue(rows->vals[i], rows->tupdesc, 6);
		job.new_location = SPI_getvalue(rows->vals[i], rows->tupdesc, 7);
		job.mode = tsm_mode_from_name(SPI_getvalue(rows->vals[i], rows->tupdesc, 8),
									  false, &known);
		job.source_spc = DatumGetObjectId(jobsql_value(i, 9, &isnull));
		nodes = jobsql_value(i, 4, &isnull);
		if (!isnull)
		{
			job.nnew = oid_array_values(nodes, job.new_relfilenodes);
			/* recorded in the same statement as the new ones */
			job.nold = oid_array_values(jobsql_value(i, 10, &isnull),
										job.old_relfilenodes);
		}
		callback(&job, arg);
	}
	jobsql_end(&ctx);
}

/*
 * Ask a job to pause (pause) or to go on.  A queued job becomes 'paused'
 * at once, and a paused one that no worker runs 'queued' again; a running
 * job's worker reads the request from its slot, and a job a restart
 * interrupted from the row when it is claimed again.  Returns the job's
 * state after the update, or TSM_DONE if it had ended (nothing changed).
 */
TsmJobState
tsm_jobrec_request_pause(int64 job_id, bool pause)
{
	Oid			argtypes[2] = {INT8OID, BOOLOID};
	Datum		values[2];
	JobSql		ctx;
	TsmJobState state = TSM_DONE;

	if (tsm_job_is_local(job_id))
		return tsm_localjob_request_pause(job_id, pause);
	values[0] = Int64GetDatum(job_id);
	values[1] = BoolGetDatum(pause);
	jobsql_begin(&ctx);
	jobsql_run("UPDATE tsmove.job SET pause_requested = $2, "
			   "state = CASE WHEN $2 AND state = 'queued' AND new_relfilenodes IS NULL "
			   "             THEN 'paused' "
			   "             WHEN NOT $2 AND state = 'paused' THEN 'queued' "
			   "             ELSE state END "
			   "WHERE job_id = $1 AND state NOT IN " TSM_FINAL_STATES_SQL
			   " RETURNING state",
			   2, argtypes, values, NULL, false, 1, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 1)
		state = tsm_state_from_name(jobsql_text(&ctx, 0, 1));
	jobsql_end(&ctx);
	return state;
}

/*
 * The recovery pass found a move its worker left with a resume point:
 * queue it again, to be claimed before newer jobs (it keeps its id).
 */
void
tsm_jobrec_requeue_to_resume(int64 job_id)
{
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(job_id);

	(void) jobsql_update("UPDATE tsmove.job SET state = 'queued', "
						 "restarts = restarts + CASE WHEN state = 'queued' THEN 0 ELSE 1 END, "
						 "error = NULL WHERE job_id = $1",
						 1, &argtype, &arg, NULL);
}

/*
 * Whether job_id is a job that has not ended (false if there is none), as
 * committed now: a job claimed after the caller's snapshot was taken
 * counts.
 */
bool
tsm_jobrec_is_unfinished(int64 job_id)
{
	Oid			argtype = INT8OID;
	Datum		arg = Int64GetDatum(job_id);
	JobSql		ctx;
	bool		found;

	if (tsm_job_is_local(job_id))
	{
		TsmLocalJob local;

		return tsm_localjob_read(job_id, &local) && !tsm_state_is_final(local.state);
	}
	jobsql_begin(&ctx);
	PushActiveSnapshot(GetLatestSnapshot());
	jobsql_run("SELECT FROM tsmove.job WHERE job_id = $1 AND state NOT IN "
			   TSM_FINAL_STATES_SQL,
			   1, &argtype, &arg, NULL, true, 1, SPI_OK_SELECT);
	found = (SPI_processed > 0);
	PopActiveSnapshot();
	jobsql_end(&ctx);
	return found;
}

/*
 * Delete the jobs that ended before cutoff, whole chains only (a table's
 * job with the jobs of its indexes), and only chains every job of which
 * role submitted or owns the relation of (any chain for a superuser).
 * Returns the number of rows deleted.
 */
int64
tsm_jobrec_purge(TimestampTz cutoff, Oid role)
{
	Oid			argtypes[2] = {TIMESTAMPTZOID, OIDOID};
	Datum		values[2];
	JobSql		ctx;
	int64		deleted;

	values[0] = TimestampTzGetDatum(cutoff);
	values[1] = ObjectIdGetDatum(role);
	jobsql_begin(&ctx);
	jobsql_run("DELETE FROM tsmove.job j "
			   "WHERE NOT EXISTS (SELECT FROM tsmove.job c "
			   "  WHERE COALESCE(c.parent_job, c.job_id) = COALESCE(j.parent_job, j.job_id) "
			   "  AND (c.state NOT IN " TSM_FINAL_STATES_SQL
			   "       OR c.finished_at IS NULL OR c.finished_at >= $1 "
			   "       OR NOT (pg_catalog.pg_has_role($2, c.submitted_by, 'USAGE') "
			   "               OR pg_catalog.pg_has_role($2, c.owner, 'USAGE'))))",
			   2, argtypes, values, NULL, false, 0, SPI_OK_DELETE);
	deleted = (int64) SPI_processed;
	jobsql_end(&ctx);
	return deleted;
}

/*
 * tsmove.job_ignore_replicated_change() RETURNS trigger
 *
 * BEFORE ROW trigger on tsmove.job, enabled as a REPLICA trigger: it fires
 * only where session_replication_role = replica, that is when a logical
 * replication apply (or table synchronization) worker writes the table on
 * a subscriber.  It discards every change pg_tsmove did not make itself.
 */
Datum
tsm_job_ignore_replicated_change(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "tsmove.job_ignore_replicated_change() must be called as a trigger");
	if (jobsql_depth == 0)
		return PointerGetDatum(NULL);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return PointerGetDatum(trigdata->tg_newtuple);
	return PointerGetDatum(trigdata->tg_trigtuple);
}
