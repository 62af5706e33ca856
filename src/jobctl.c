/*-------------------------------------------------------------------------
 *
 * jobctl.c
 *	  Services every running job uses: state and counters, publishing them,
 *	  saving them, cancel and shutdown checks, sleeping, the byte budget.
 *
 * These sit below the engine (copy.c, mirror.c, fileset.c) and its two
 * front ends (relmove.c and switch.c for relations, relocate.c for
 * tablespaces): all of them call down into this file, and it calls none
 * of them.  What a front end must be asked at each check (whether someone
 * waits for its locks) it registers as a callback.
 *
 * The throttle is a byte budget per second, counting the pages written and
 * the WAL this process wrote for them; credit banked while idle is capped
 * at TSM_BURST_SECONDS, so no window runs above the rate.  tsmove.set_rate()
 * changes the rate through the slot.
 *
 * Locks: the slot fields under TsmShared->lock (pg_tsmove.h); nothing else.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/instrument.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "jobctl.h"
#include "jobrecord.h"

TsmWorkerSlot *tsm_my_slot = NULL;

static volatile sig_atomic_t got_sigterm = false;

/* How often progress reaches shared memory, and the rate is sampled. */
#define TSM_PUBLISH_INTERVAL_MS 200
#define TSM_RATE_SAMPLE_MS 1000
/* Credit the throttle may bank while idle: 50 ms worth of the rate. */
#define TSM_BURST_SECONDS 0.05
/* How long pg_tsmove.debug_pause_at holds the worker still. */
#define TSM_DEBUG_PAUSE_MS 60000

void
tsm_ctl_sigterm(SIGNAL_ARGS)
{
	int			save_errno = errno;

	got_sigterm = true;
	SetLatch(MyLatch);
	errno = save_errno;
}

bool
tsm_ctl_shutdown_requested(void)
{
	return got_sigterm;
}

void
tsm_ctl_init(TsmJobCtl *ctl, int64 job_id, const char *label, double max_rate_mb)
{
	memset(ctl, 0, sizeof(*ctl));
	ctl->job_id = job_id;
	ctl->label = label;
	ctl->progress.state = TSM_PREPARING;
	ctl->progress.switch_ms = -1;
	ctl->max_rate_mb = max_rate_mb;
	ctl->wal_usage_at_start = pgWalUsage.wal_bytes;
	ctl->budget_start = ctl->rate_sample_time = GetCurrentTimestamp();
}

void
tsm_ctl_set_state(TsmJobCtl *ctl, TsmJobState state)
{
	ctl->progress.state = state;
	tsm_ctl_publish(ctl, true);
}

/* Set the note the view shows while the job waits; "" clears it. */
void
tsm_ctl_note(TsmJobCtl *ctl, const char *fmt,...)
{
	va_list		args;

	va_start(args, fmt);
	vsnprintf(ctl->progress.note, sizeof(ctl->progress.note), fmt, args);
	va_end(args);
}

/*
 * Copy the counters to the slot, at most every TSM_PUBLISH_INTERVAL_MS
 * unless forced.
 */
void
tsm_ctl_publish(TsmJobCtl *ctl, bool force)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		written;

	ctl->progress.wal_bytes = pgWalUsage.wal_bytes - ctl->wal_usage_at_start;
	written = ctl->progress.bytes_written + ctl->progress.wal_bytes;
	if (!force && !TimestampDifferenceExceeds(ctl->last_publish, now, TSM_PUBLISH_INTERVAL_MS))
		return;
	ctl->last_publish = now;

	if (TimestampDifferenceExceeds(ctl->rate_sample_time, now, TSM_RATE_SAMPLE_MS))
	{
		double		seconds = (double) (now - ctl->rate_sample_time) / USECS_PER_SEC;

		ctl->progress.rate_mb_s = (written - ctl->rate_sample_bytes) / seconds / (1024.0 * 1024.0);
		ctl->rate_sample_time = now;
		ctl->rate_sample_bytes = written;
	}

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_my_slot->progress = ctl->progress;
	LWLockRelease(tsm_shared->lock);
}

/* Save state, counters and error (NULL clears it) in the row, in a transaction of its own. */
void
tsm_ctl_save(TsmJobCtl *ctl, const char *error)
{
	ctl->progress.wal_bytes = pgWalUsage.wal_bytes - ctl->wal_usage_at_start;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_save(ctl->job_id, &ctl->progress, error);
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * React to everything that can reach the worker from outside: interrupts,
 * reloads, SIGTERM, tsmove.cancel(), rate changes from set_rate(), and the
 * front end's conflict check.  Throws the error that ends the job.
 */
void
tsm_ctl_check(TsmJobCtl *ctl)
{
	bool		cancel;
	double		rate;

	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	if (got_sigterm)
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("move interrupted by server shutdown or pg_terminate_backend()")));

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	cancel = (tsm_my_slot->cancel_job_id == ctl->job_id);
	rate = tsm_my_slot->max_rate_mb;
	LWLockRelease(tsm_shared->lock);

	if (cancel)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("move cancelled by tsmove.cancel()")));
	if (ctl->check_conflicts)
		ctl->check_conflicts(ctl, ctl->check_conflicts_arg);
	if (rate != ctl->max_rate_mb)
	{
		ctl->max_rate_mb = rate;
		ctl->budget_start = GetCurrentTimestamp();
		ctl->budget_spent = 0;
	}
}

/* Sleep on the latch, waking for cancel, rate changes and shutdown. */
void
tsm_ctl_sleep(TsmJobCtl *ctl, long ms)
{
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	tsm_ctl_check(ctl);
}

/*
 * pg_tsmove.debug_pause_at: hold still for a minute at a named phase, so
 * that tests can kill the server at moments too short to hit otherwise.
 * The pause answers cancel, SIGTERM and the postmaster's death like any
 * sleep of the worker: a lock held here is never held beyond them.
 */
void
tsm_ctl_debug_pause(TsmJobCtl *ctl, const char *phase)
{
	TimestampTz until;

	if (tsm_debug_pause_at == NULL || strcmp(tsm_debug_pause_at, phase) != 0)
		return;
	ereport(LOG, (errmsg("pg_tsmove: job %lld pauses at %s (pg_tsmove.debug_pause_at)",
						 (long long) ctl->job_id, phase)));
	until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), TSM_DEBUG_PAUSE_MS);
	while (GetCurrentTimestamp() < until)
		tsm_ctl_sleep(ctl, 100);
}

/*
 * Charge bytes to the budget and sleep until the budget allows them.
 * Credit banked while idle is capped, so a pause is never followed by a
 * burst above the rate.
 */
void
tsm_ctl_throttle(TsmJobCtl *ctl, int64 bytes)
{
	ctl->budget_spent += bytes;
	while (ctl->max_rate_mb > 0)
	{
		double		bytes_per_s = ctl->max_rate_mb * 1024.0 * 1024.0;
		TimestampTz now = GetCurrentTimestamp();
		double		earned = (now - ctl->budget_start) / 1.0e6 * bytes_per_s;
		double		max_credit = bytes_per_s * TSM_BURST_SECONDS;
		long		sleep_ms;

		if (earned - ctl->budget_spent > max_credit)
		{
			ctl->budget_start = now - (TimestampTz)
				((ctl->budget_spent + max_credit) / bytes_per_s * 1.0e6);
			return;
		}
		if (ctl->budget_spent <= earned)
			return;
		sleep_ms = (long) ((ctl->budget_spent - earned) / bytes_per_s * 1000.0);
		if (sleep_ms < 1)
			return;
		tsm_ctl_sleep(ctl, sleep_ms);
		tsm_ctl_publish(ctl, false);
	}
}

/*
 * Count one page just written to the new storage, with the WAL this
 * process wrote since the last call, and throttle if asked to (not under
 * the switch's locks: that copy is paid for before the locks are taken).
 */
void
tsm_ctl_charge_page(TsmJobCtl *ctl, bool throttled)
{
	int64		wal_total = pgWalUsage.wal_bytes - ctl->wal_usage_at_start;
	int64		wal_delta = wal_total - ctl->progress.wal_bytes;

	ctl->progress.bytes_written += BLCKSZ;
	ctl->progress.wal_bytes = wal_total;
	if (throttled)
		tsm_ctl_throttle(ctl, BLCKSZ + wal_delta);
	else
		ctl->budget_spent += BLCKSZ + wal_delta;
}
