/*-------------------------------------------------------------------------
 *
 * pilot.c
 *	  The autopilot's workers: the pilot, one per cluster, which keeps the
 *	  clock, and the step worker, one per database and step, which runs
 *	  tsmove.autopilot_step() there.
 *
 * Co-access and relation sizes are per database, and only a process
 * connected to a database can read them, but devices are shared by the
 * whole cluster and the autopilot must run one move at a time.  So each
 * cycle (every pg_tsmove.autopilot_interval, while pg_tsmove.autopilot is
 * not off) has two passes:
 *	1. look: a step worker in each database that has the extension follows
 *	   up its own decisions (a move that ended, a measurement now due), logs
 *	   what it would not do and why, and answers with its best acceptable
 *	   candidate's predicted benefit, whether a move of the autopilot's is
 *	   running there, when the last one ended, what it moved in the last
 *	   24 hours, and whether its log says the autopilot stopped;
 *	2. act: unless a move is running, the database with the best candidate
 *	   gets a second step that may act, with the cluster's sums, from which
 *	   it derives any reason not to (window, daily limits, fresh evidence,
 *	   stopped) and logs it, or proposes or starts the move.
 * One step worker runs at a time; its answer travels in shared memory.
 *
 * A database whose step fails or does not answer (its owner's lock on a
 * relation the step reads, a broken installation) blocks only its own
 * decisions: it is never the one that acts, and what it last answered
 * (since the pilot started) still counts in the cluster's sums: a move of
 * the autopilot's running there, the last end, the day's moves and bytes.
 * The pilot is the only one that starts the autopilot's moves, and only in
 * a database that answered, so a database that never answered since the
 * pilot started has none it knows of.  Each such cycle is logged (at most
 * every 10 minutes per database) with the database's OID.
 *
 * What the steps run as: the step worker connects as the bootstrap
 * superuser, with search_path = pg_catalog, pg_temp, and calls
 * tsmove.autopilot_step() only if that function belongs to the pg_tsmove
 * extension (pg_depend), so a schema someone named "tsmove" in a database
 * without the extension is never run.  The move itself is submitted as the
 * relation's owner (see tsmove.autopilot_step()).
 *
 * Locking: the pilot takes none; the step worker takes what its SQL takes,
 * with lock_timeout = 10s and statement_timeout = 10min, so that a step
 * stuck behind a lock cannot hold up the pilot for long (it fails, logs,
 * and the next cycle tries again).
 * The result slot is written under the spinlock (autopilot_internal.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "autopilot/autopilot_internal.h"

#define STEP_FUNCTION \
	"tsmove.autopilot_step(boolean,boolean,timestamp with time zone,integer,bigint,oid)"

/* The databases a step may connect to: every one that allows connections. */
static List *
list_databases(void)
{
	List	   *dbs = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	MemoryContext caller = CurrentMemoryContext;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext old;

		if (!db->datallowconn || db->datistemplate)
			continue;
		old = MemoryContextSwitchTo(caller);
		dbs = lappend_oid(dbs, db->oid);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	return dbs;
}

/*
 * Run one step in database dbid and wait for it; false (result untouched)
 * if no worker slot was free or the step did not answer.
 */
static bool
run_step(Oid dbid, TsmStepOrder *order, TsmStepResult *result)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	static TimestampTz last_no_slot_log = 0;
	static uint64 last_step_id = 0;
	pid_t		pid;

	order->step_id = ((uint64) MyProcPid << 32) | (++last_step_id & 0xFFFFFFFF);

	SpinLockAcquire(&tsm_autopilot->mutex);
	memset(&tsm_autopilot->result, 0, sizeof(TsmStepResult));
	SpinLockRelease(&tsm_autopilot->mutex);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_autopilot_step_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "pg_tsmove autopilot step in database %u", dbid);
	strlcpy(worker.bgw_type, "pg_tsmove autopilot step", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(dbid);
	worker.bgw_notify_pid = MyProcPid;
	StaticAssertStmt(sizeof(TsmStepOrder) <= BGW_EXTRALEN, "step order too large");
	memcpy(worker.bgw_extra, order, sizeof(TsmStepOrder));

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		TimestampTz now = GetCurrentTimestamp();

		if (TimestampDifferenceExceeds(last_no_slot_log, now, 600 * 1000))
		{
			ereport(LOG,
					(errmsg("pg_tsmove autopilot: no background worker slot for a step, skipping this cycle"),
					 errhint("Raise max_worker_processes.")));
			last_no_slot_log = now;
		}
		return false;
	}
	if (WaitForBackgroundWorkerStartup(handle, &pid) == BGWH_STARTED)
		(void) WaitForBackgroundWorkerShutdown(handle);
	pfree(handle);

	SpinLockAcquire(&tsm_autopilot->mutex);
	*result = tsm_autopilot->result;
	SpinLockRelease(&tsm_autopilot->mutex);
	return result->answered && result->step_id == order->step_id;
}

/* What a database's step last answered, kept for the cycles it does not. */
typedef struct LastAnswer
{
	Oid			dbid;			/* hash key */
	TsmStepResult result;
	TimestampTz silent_logged;	/* when its silence was last logged */
} LastAnswer;

static HTAB *last_answers = NULL;

static LastAnswer *
last_answer(Oid dbid, bool *found)
{
	if (last_answers == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(LastAnswer);
		ctl.hcxt = TopMemoryContext;
		last_answers = hash_create("pg_tsmove autopilot answers", 64, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	return hash_search(last_answers, &dbid, HASH_ENTER, found);
}

/* Add a database's answer to the cluster's sums. */
static void
add_to_order(TsmStepOrder *order, const TsmStepResult *r, Oid dbid)
{
	order->in_flight |= r->in_flight;
	order->last_finished = Max(order->last_finished, r->last_finished);
	order->moves_today += r->moves_today;
	order->bytes_today += r->bytes_today;
	if (r->stopped && !OidIsValid(order->stopped_db))
		order->stopped_db = dbid;
}

/* One cycle: look in every database, then let the best one act. */
static void
run_cycle(MemoryContext cycle_context)
{
	MemoryContext old = MemoryContextSwitchTo(cycle_context);
	List	   *dbs = list_databases();
	ListCell   *lc;
	TsmStepOrder order;
	Oid			best_db = InvalidOid;
	double		best_benefit = -1;

	memset(&order, 0, sizeof(order));
	order.stopped_db = InvalidOid;
	foreach(lc, dbs)
	{
		Oid			dbid = lfirst_oid(lc);
		TsmStepResult r;
		TsmStepOrder look;
		LastAnswer *last;
		bool		known;

		if (ShutdownRequestPending)
			break;
		memset(&look, 0, sizeof(look));
		if (!run_step(dbid, &look, &r))
		{
			/* it blocks its own decisions only; what it last said counts */
			last = last_answer(dbid, &known);
			if (!known)
			{
				memset(&last->result, 0, sizeof(last->result));
				last->silent_logged = 0;
			}
			if (last->result.installed)
				add_to_order(&order, &last->result, dbid);
			if (TimestampDifferenceExceeds(last->silent_logged, GetCurrentTimestamp(), 600 * 1000))
			{
				ereport(LOG,
						(errmsg("pg_tsmove autopilot: the step in database %u did not answer; "
								"it makes no decision there this cycle", dbid),
						 errdetail("What it answered last counts for the other databases: %s, %d moves in the last 24 hours.",
								   last->result.in_flight ? "a move of the autopilot's running" :
								   "no move of the autopilot's running",
								   last->result.moves_today),
						 errhint("The server log shows the step's error, if it had one.")));
				last->silent_logged = GetCurrentTimestamp();
			}
			continue;
		}
		last = last_answer(dbid, &known);
		last->result = r;
		last->silent_logged = 0;
		if (!r.installed)
			continue;
		add_to_order(&order, &r, dbid);
		if (r.best_benefit > best_benefit)
		{
			best_benefit = r.best_benefit;
			best_db = dbid;
		}
	}
	if (OidIsValid(best_db) && best_benefit >= 0 && !order.in_flight &&
		!ShutdownRequestPending)
	{
		TsmStepResult r;

		order.act = true;
		(void) run_step(best_db, &order, &r);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(cycle_context);
}

static void
pilot_exit(int code, Datum arg)
{
	SpinLockAcquire(&tsm_autopilot->mutex);
	tsm_autopilot->pilot_pid = 0;
	SpinLockRelease(&tsm_autopilot->mutex);
}

/*
 * tsm_autopilot_main
 *		The pilot: one cycle every pg_tsmove.autopilot_interval; it exits
 *		once pg_tsmove.autopilot is off (the sampler starts it again).
 *		Connected to no database (it reads only pg_database).
 */
void
tsm_autopilot_main(Datum main_arg)
{
	MemoryContext cycle_context;
	TimestampTz next_cycle;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	SpinLockAcquire(&tsm_autopilot->mutex);
	tsm_autopilot->pilot_pid = MyProcPid;
	SpinLockRelease(&tsm_autopilot->mutex);
	before_shmem_exit(pilot_exit, (Datum) 0);

	cycle_context = AllocSetContextCreate(TopMemoryContext, "pg_tsmove autopilot cycle",
										  ALLOCSET_DEFAULT_SIZES);
	/* the first look one interval after start: the monitoring needs samples */
	next_cycle = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											 tsm_autopilot_interval_s * 1000L);
	while (!ShutdownRequestPending && tsm_autopilot_mode != TSM_AUTOPILOT_OFF)
	{
		TimestampTz now;
		long		timeout_ms;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* a shorter interval, or turning it on, takes effect at once */
			next_cycle = Min(next_cycle,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 tsm_autopilot_interval_s * 1000L));
		}
		now = GetCurrentTimestamp();
		if (tsm_autopilot_mode != TSM_AUTOPILOT_OFF && now >= next_cycle)
		{
			run_cycle(cycle_context);
			now = GetCurrentTimestamp();
			next_cycle = TimestampTzPlusMilliseconds(now, tsm_autopilot_interval_s * 1000L);
		}
		timeout_ms = tsm_autopilot_mode == TSM_AUTOPILOT_OFF ? 60 * 1000L :
			Max(1, TimestampDifferenceMilliseconds(now, next_cycle));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	proc_exit(0);
}

/* Column `col` of the step's only row, or NULL. */
static Datum
step_value(int col, bool *isnull)
{
	return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, isnull);
}

/*
 * What a step worker runs with, whatever ALTER DATABASE ... SET says: its
 * own identity (role none: the bootstrap superuser it connected as), a
 * transaction that may write, errors that stay errors, and the formats its
 * SQL reads back.  search_path, lock_timeout and statement_timeout are set
 * for its transaction below.
 */
static const char *const step_settings[][2] = {
	{"role", "none"},
	{"default_transaction_read_only", "off"},
	{"default_transaction_isolation", "read committed"},
	{"default_transaction_deferrable", "off"},
	{"exit_on_error", "off"},
	{"row_security", "on"},
	{"DateStyle", "ISO, MDY"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "1"},
	{"check_function_bodies", "on"},
	{"session_replication_role", "origin"},
};

/*
 * tsm_autopilot_step_main
 *		A step worker: in database main_arg, run tsmove.autopilot_step() with
 *		the pilot's order (bgw_extra) in one transaction, then answer.
 */
void
tsm_autopilot_step_main(Datum main_arg)
{
	Oid			dbid = DatumGetObjectId(main_arg);
	TsmStepOrder order;
	TsmStepResult result;
	int			ret;

	memcpy(&order, MyBgworkerEntry->bgw_extra, sizeof(TsmStepOrder));
	memset(&result, 0, sizeof(result));
	result.best_benefit = -1;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, BGWORKER_BYPASS_ALLOWCONN);
	pgstat_report_appname("pg_tsmove autopilot");
	/*
	 * A database's owner must not make the step fail or run as someone else
	 * (ALTER DATABASE ... SET, applied at connection): the settings the
	 * step depends on are put back, above any such source.
	 */
	for (int i = 0; i < lengthof(step_settings); i++)
		SetConfigOption(step_settings[i][0], step_settings[i][1], PGC_SUSET, PGC_S_OVERRIDE);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "pg_tsmove autopilot step");
	SPI_execute("SET LOCAL search_path = pg_catalog, pg_temp", false, 0);
	/* a step that waits for a lock holds up the whole autopilot: bound it */
	SPI_execute("SET LOCAL lock_timeout = '10s'", false, 0);
	SPI_execute("SET LOCAL statement_timeout = '10min'", false, 0);

	/* only the extension's own function, never one someone else named so */
	ret = SPI_execute("SELECT 1 FROM pg_catalog.pg_depend d "
					  "JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid "
					  "WHERE e.extname = 'pg_tsmove' AND d.deptype = 'e' "
					  "AND d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass "
					  "AND d.objid = pg_catalog.to_regprocedure('" STEP_FUNCTION "')",
					  true, 1);
	if (ret == SPI_OK_SELECT && SPI_processed == 1)
	{
		Oid			argtypes[6] = {BOOLOID, BOOLOID, TIMESTAMPTZOID, INT4OID, INT8OID, OIDOID};
		Datum		values[6];
		char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
		bool		isnull;
		Datum		d;

		values[0] = BoolGetDatum(order.act);
		values[1] = BoolGetDatum(order.in_flight);
		values[2] = TimestampTzGetDatum(order.last_finished);
		if (order.last_finished == 0)
			nulls[2] = 'n';
		values[3] = Int32GetDatum(order.moves_today);
		values[4] = Int64GetDatum(order.bytes_today);
		values[5] = ObjectIdGetDatum(order.stopped_db);
		if (!OidIsValid(order.stopped_db))
			nulls[5] = 'n';
		ret = SPI_execute_with_args("SELECT best_benefit, in_flight, last_finished, "
									"moves_today, bytes_today, stopped "
									"FROM tsmove.autopilot_step($1, $2, $3, $4, $5, $6)",
									6, argtypes, values, nulls, false, 1);
		if (ret != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "tsmove.autopilot_step() returned no row");
		result.installed = true;
		d = step_value(1, &isnull);
		if (!isnull)
			result.best_benefit = DatumGetFloat8(d);
		d = step_value(2, &isnull);
		result.in_flight = !isnull && DatumGetBool(d);
		d = step_value(3, &isnull);
		result.last_finished = isnull ? 0 : DatumGetTimestampTz(d);
		d = step_value(4, &isnull);
		result.moves_today = isnull ? 0 : DatumGetInt32(d);
		d = step_value(5, &isnull);
		result.bytes_today = isnull ? 0 : DatumGetInt64(d);
		d = step_value(6, &isnull);
		result.stopped = !isnull && DatumGetBool(d);
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(true);

	result.answered = true;
	result.step_id = order.step_id;
	SpinLockAcquire(&tsm_autopilot->mutex);
	tsm_autopilot->result = result;
	SpinLockRelease(&tsm_autopilot->mutex);
	proc_exit(0);
}
