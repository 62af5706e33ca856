/*-------------------------------------------------------------------------
 *
 * sampler.c
 *	  The "pg_tsmove sampler" background worker: the clock of pg_tsmove's
 *	  monitoring.
 *
 * A static background worker, registered by _PG_init when the library is
 * preloaded; it starts once the server is consistent (so it runs on a hot
 * standby too) and is restarted 10 s after it dies.  It connects to no
 * database.  Its loop:
 *	- every pg_tsmove.sample_interval: a tablespace I/O sample
 *	  (tablespace_io.c), which also feeds the load history (history.c); then it
 *	  lets the relation map start a refresh worker if one is due
 *	  (relation_map.c);
 *	- every pg_tsmove.coaccess_sample_interval, while
 *	  pg_tsmove.track_coaccess is on: a concurrency tick (coaccess.c),
 *	  which first merges the backends' pending pairs into the pair table
 *	  (the I/O sample merges them too).
 * Everything a pass allocates goes into a memory context reset after it.
 * On SIGTERM it closes the history's open rows, so that a clean shutdown
 * keeps the load up to its last sample, and exits.  It absorbs procsignal
 * barriers (CHECK_FOR_INTERRUPTS) as every connected process must.
 *
 * Locks: none of its own; see the files it calls.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "autopilot/autopilot.h"
#include "monitor/monitor_internal.h"

/* Seconds before the postmaster restarts a sampler that died. */
#define TSM_SAMPLER_RESTART_S 10

void
tsm_register_sampler(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = TSM_SAMPLER_RESTART_S;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_sampler_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "pg_tsmove sampler", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "pg_tsmove sampler", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

/* before_shmem_exit: end the history's open rows, tell readers we are gone. */
static void
sampler_exit(int code, Datum arg)
{
	tsm_history_close_bucket(GetCurrentTimestamp());
	tsm_io_sampler_exit();
}

/* The next due time after `due`, skipping the ones already missed. */
static TimestampTz
next_due(TimestampTz due, TimestampTz now, int interval_ms)
{
	due = TimestampTzPlusMilliseconds(due, interval_ms);
	if (due <= now)
		due = TimestampTzPlusMilliseconds(now, interval_ms);
	return due;
}

void
tsm_sampler_main(Datum main_arg)
{
	MemoryContext pass_context;
	TimestampTz next_io;
	TimestampTz next_tick;

	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	before_shmem_exit(sampler_exit, (Datum) 0);

	pass_context = AllocSetContextCreate(TopMemoryContext, "pg_tsmove sampler pass",
										 ALLOCSET_DEFAULT_SIZES);
	next_io = next_tick = GetCurrentTimestamp();

	while (!ShutdownRequestPending)
	{
		TimestampTz now = GetCurrentTimestamp();
		TimestampTz wake;
		long		timeout_ms;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			/* a shorter interval takes effect at once */
			next_io = Min(next_io, TimestampTzPlusMilliseconds(now, tsm_sample_interval_ms));
			next_tick = Min(next_tick,
							TimestampTzPlusMilliseconds(now, tsm_coaccess_sample_interval_ms));
		}
		/* the autopilot's pilot runs while it is on (the clock's one call out) */
		tsm_autopilot_ensure_pilot();

		if (tsm_sample_interval_ms > 0 && now >= next_io)
		{
			MemoryContext old = MemoryContextSwitchTo(pass_context);

			tsm_io_sample(now);
			tsm_relmap_schedule(now);
			tsm_coaccess_merge_pending();	/* also when no ticks are taken */
			MemoryContextSwitchTo(old);
			MemoryContextReset(pass_context);
			next_io = next_due(next_io, now, tsm_sample_interval_ms);
		}
		if (tsm_coaccess_sample_interval_ms > 0 && now >= next_tick)
		{
			if (tsm_track_coaccess)
			{
				MemoryContext old = MemoryContextSwitchTo(pass_context);

				tsm_coaccess_sample_concurrency(now);
				MemoryContextSwitchTo(old);
				MemoryContextReset(pass_context);
			}
			next_tick = next_due(next_tick, now, tsm_coaccess_sample_interval_ms);
		}

		/* sleep until the next due pass (at most a minute: intervals may change) */
		wake = TimestampTzPlusMilliseconds(now, 60 * 1000);
		if (tsm_sample_interval_ms > 0)
			wake = Min(wake, next_io);
		if (tsm_coaccess_sample_interval_ms > 0 && tsm_track_coaccess)
			wake = Min(wake, next_tick);
		timeout_ms = Max(1, TimestampDifferenceMilliseconds(GetCurrentTimestamp(), wake));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	proc_exit(0);
}
