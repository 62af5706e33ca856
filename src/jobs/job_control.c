/*-------------------------------------------------------------------------
 *
 * job_control.c
 *	  Services every running job uses: state and counters, publishing them,
 *	  saving them, cancel and shutdown checks, sleeping, the byte budget;
 *	  and the session settings of the engine's workers.
 *
 * These sit below the engine (copy.c, mirror.c, fileset.c) and its two front
 * ends (relation_move.c and relation_switch.c for relations, the
 * relocation_*.c files for tablespaces): all of them call down into this
 * file, and it calls none of them.  What a front end must be asked at each
 * check (whether someone waits for its locks) it registers as a callback.
 *
 * The throttle is a byte budget per second, counting the pages written and
 * the WAL this process wrote for them; credit banked while idle is capped
 * at TSM_BURST_SECONDS, so no window runs above the rate.  The rate is the
 * job's max_rate_mb (tsmove.set_rate() changes it through the slot) with
 * pg_tsmove.pacing = fixed, and the pace pacing.c decides, up to it, with
 * adaptive.  On top, every worker charges what it writes, in chunks of
 * TSM_TOTAL_BUDGET_CHUNK, to one budget in shared memory
 * (pg_tsmove.total_max_rate_mb): a virtual clock that each charge moves
 * forward by its cost, and that the worker then waits for.  It never runs
 * ahead of the current time by more than what was charged, so the sum of
 * the rates never exceeds the total over any window longer than a chunk.
 *
 * A switch takes its locks through tsm_ctl_lock_all_or_none(), in a
 * subtransaction: a lock not granted in time rolls back only that, and the
 * caller commits.  Rolling back the main transaction instead would release
 * the job's session locks as well (ProcReleaseLocks releases session locks
 * at a main-transaction abort), and nothing would keep DDL off the
 * relations until the next switch.
 *
 * tsmove.pause() sets a flag in the slot; tsm_ctl_check() copies it to
 * ctl->pause_requested, the throttle then returns at once, and the worker
 * holds still at its next pause point (worker.c).
 *
 * The job workers and the recovery worker run with the same session
 * settings, whatever the database's or the role's defaults say
 * (tsm_worker_session_settings).
 *
 * Calls job_record.c, pacing.c, queue.c and settings.c, nothing above
 * them.
 *
 * Locks: the slot fields and the shared budget under TsmShared->lock
 * (queue.h); nothing else.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "executor/instrument.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "jobs/job_control.h"
#include "jobs/job_record.h"

TsmWorkerSlot *tsm_my_slot = NULL;

static volatile sig_atomic_t got_sigterm = false;

/* How often progress reaches shared memory, and the rate is sampled. */
#define TSM_PUBLISH_INTERVAL_MS 200
#define TSM_RATE_SAMPLE_MS 1000
/* Credit the throttle may bank while idle: 50 ms worth of the rate. */
#define TSM_BURST_SECONDS 0.05
/* How long pg_tsmove.debug_pause_at holds the worker still. */
#define TSM_DEBUG_PAUSE_MS 60000
/* Bytes a worker charges to the shared budget at once. */
#define TSM_TOTAL_BUDGET_CHUNK (256 * 1024)
/* Longest sleep of the throttle with adaptive pacing, which samples between. */
#define TSM_PACER_SLICE_MS 10

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
	ctl->budget_rate = -1;
	ctl->wal_usage_at_start = pgWalUsage.wal_bytes;
	ctl->budget_start = ctl->rate_sample_time = GetCurrentTimestamp();
	tsm_pacer_init(&ctl->pacer);
}

/* A job resumed after a restart goes on counting from what its row says. */
void
tsm_ctl_continue_counters(TsmJobCtl *ctl, const TsmProgress *earlier)
{
	ctl->progress.blocks_recopied = earlier->blocks_recopied;
	ctl->recopied_before = earlier->blocks_recopied;
	ctl->progress.bytes_written = earlier->bytes_written;
	ctl->progress.switch_attempts = earlier->switch_attempts;
	ctl->progress.lock_wait_ms = earlier->lock_wait_ms;
	ctl->wal_usage_at_start = pgWalUsage.wal_bytes - earlier->wal_bytes;
	ctl->progress.wal_bytes = earlier->wal_bytes;
	ctl->rate_sample_bytes = earlier->bytes_written + earlier->wal_bytes;
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
	char		note[sizeof(ctl->progress.note)];

	va_start(args, fmt);
	vsnprintf(note, sizeof(note), fmt, args);
	va_end(args);
	/* a starved switch is diagnosed from its notes: each new one, at DEBUG1 */
	if (note[0] != '\0' && strcmp(note, ctl->progress.note) != 0)
		elog(DEBUG1, "pg_tsmove: job %lld: %s", (long long) ctl->job_id, note);
	memcpy(ctl->progress.note, note, sizeof(note));
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
	ctl->progress.pace_mb_s = tsm_pacing == TSM_PACING_ADAPTIVE && !ctl->others_wait ?
		tsm_pacer_budget_mb(&ctl->pacer) : -1;

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	tsm_my_slot->progress = ctl->progress;
	LWLockRelease(tsm_shared->lock);
}

/* Save state, counters and error (NULL clears it) in the row, in the current transaction. */
void
tsm_ctl_save_in_transaction(TsmJobCtl *ctl, const char *error)
{
	ctl->progress.wal_bytes = pgWalUsage.wal_bytes - ctl->wal_usage_at_start;
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_save(ctl->job_id, &ctl->progress, error);
	PopActiveSnapshot();
}

/* The same, in a transaction of its own. */
void
tsm_ctl_save(TsmJobCtl *ctl, const char *error)
{
	tsm_job_start_transaction();
	tsm_ctl_save_in_transaction(ctl, error);
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
	bool		pause;

	CHECK_FOR_INTERRUPTS();
	if (ConfigReloadPending)
	{
		ConfigReloadPending = false;
		ProcessConfigFile(PGC_SIGHUP);
	}
	if (ctl->stops_held)
		return;
	if (got_sigterm)
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("move interrupted by server shutdown or pg_terminate_backend()")));

	LWLockAcquire(tsm_shared->lock, LW_SHARED);
	cancel = (tsm_my_slot->cancel_job_id == ctl->job_id);
	rate = tsm_my_slot->max_rate_mb;
	pause = tsm_my_slot->pause_requested;
	LWLockRelease(tsm_shared->lock);
	ctl->pause_requested = pause;

	if (cancel)
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("move cancelled by tsmove.cancel()")));
	if (ctl->check_conflicts)
		ctl->check_conflicts(ctl, ctl->check_conflicts_arg);
	ctl->max_rate_mb = rate;
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
 * that tests can kill the server at moments too short to hit otherwise,
 * or until a reload no longer names the phase.  The pause answers cancel,
 * SIGTERM and the postmaster's death like any sleep of the worker: a lock
 * held here is never held beyond them.
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
	while (GetCurrentTimestamp() < until && tsm_debug_pause_at != NULL &&
		   strcmp(tsm_debug_pause_at, phase) == 0)
		tsm_ctl_sleep(ctl, 100);
}

/*
 * Whether the other sessions were idle when adaptive pacing last looked:
 * then nobody needs protecting from what the job does.  Never with fixed
 * pacing, which does not look.
 */
bool
tsm_ctl_others_idle(TsmJobCtl *ctl)
{
	return tsm_pacing == TSM_PACING_ADAPTIVE && ctl->pacer.others_idle;
}

/*
 * Charge what this worker wrote since its last charge to the budget all
 * workers share, and sleep until it is paid for.  Charges in chunks: the
 * shared lock is not taken per page.
 */
static void
charge_total_budget(TsmJobCtl *ctl, int64 bytes)
{
	double		bytes_per_us;
	TimestampTz now;
	TimestampTz paid_until;

	ctl->total_unpaid += bytes;
	if (tsm_total_max_rate_mb <= 0)
	{
		ctl->total_unpaid = 0;
		return;
	}
	if (ctl->total_unpaid < TSM_TOTAL_BUDGET_CHUNK)
		return;
	bytes_per_us = tsm_total_max_rate_mb * 1024.0 * 1024.0 / USECS_PER_SEC;
	now = GetCurrentTimestamp();
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	paid_until = Max(tsm_shared->total_budget_paid_until, now) +
		(TimestampTz) (ctl->total_unpaid / bytes_per_us);
	tsm_shared->total_budget_paid_until = paid_until;
	LWLockRelease(tsm_shared->lock);
	ctl->total_unpaid = 0;

	while ((now = GetCurrentTimestamp()) < paid_until && !ctl->pause_requested)
	{
		tsm_ctl_sleep(ctl, Max(1, Min(100, (paid_until - now) / 1000)));
		tsm_ctl_publish(ctl, false);
	}
}

/*
 * The rate the budget runs at now: 0 = none.  Adaptive, the pace, never
 * above the job's max_rate_mb; but the ceiling itself while the job's lock
 * makes the others wait (quiesce, exclusive).  Sets *hold during a probe.
 */
static double
budget_rate_now(TsmJobCtl *ctl, TimestampTz now, bool *hold)
{
	bool		catching_up = (ctl->progress.state == TSM_CATCHING_UP);
	TsmPacerCounts counts;
	double		pace;

	*hold = false;
	ctl->pace_binds = false;
	if (tsm_pacing != TSM_PACING_ADAPTIVE || ctl->others_wait)
		return ctl->max_rate_mb;
	counts.bytes = ctl->progress.bytes_written + ctl->progress.wal_bytes;
	counts.read_cost = ctl->scattered_read_cost;
	counts.pages = ctl->progress.bytes_written / BLCKSZ;
	counts.dirtied = ctl->pages_changed;
	counts.changed_ahead = ctl->pages_changed_ahead;
	counts.recopied = tsm_ctl_recopied_here(ctl);
	counts.scattered = ctl->scattered_reads;
	counts.catchup_backlog = catching_up ? ctl->progress.dirty_backlog : 0;
	*hold = tsm_pacer_tick(&ctl->pacer, now, ctl->max_rate_mb, &counts);
	if (catching_up && tsm_pacer_sprint(&ctl->pacer, ctl->progress.dirty_backlog))
	{
		*hold = false;
		return ctl->max_rate_mb;
	}
	pace = tsm_pacer_budget_mb(&ctl->pacer);
	if (ctl->max_rate_mb > 0 && (pace == 0 || pace >= ctl->max_rate_mb))
		return ctl->max_rate_mb;
	ctl->pace_binds = (pace > 0 && !ctl->pacer.others_idle);
	return pace;
}

/*
 * Charge cost to the job's budget and sleep until the budget allows it;
 * then charge the bytes written to the budget all jobs share.  Credit
 * banked while idle is capped, so a pause is never followed by a burst
 * above the rate.  Returns at once when a pause is requested.
 */
static void
throttle(TsmJobCtl *ctl, int64 cost, int64 written)
{
	bool		adaptive = (tsm_pacing == TSM_PACING_ADAPTIVE);

	ctl->budget_spent += cost;
	while (!ctl->pause_requested)
	{
		TimestampTz now = GetCurrentTimestamp();
		bool		hold;
		double		rate = budget_rate_now(ctl, now, &hold);
		double		bytes_per_s;
		double		earned;
		double		max_credit;
		long		sleep_ms;

		if (hold)
		{
			tsm_ctl_sleep(ctl, TSM_PACER_SLICE_MS);
			tsm_ctl_publish(ctl, false);
			continue;
		}
		if (rate != ctl->budget_rate)
		{
			/* a new rate starts a new budget, this charge included */
			ctl->budget_rate = rate;
			ctl->budget_start = now;
			ctl->budget_spent = cost;
		}
		if (rate <= 0)
			break;
		bytes_per_s = rate * 1024.0 * 1024.0;
		earned = (now - ctl->budget_start) / 1.0e6 * bytes_per_s;
		max_credit = bytes_per_s * TSM_BURST_SECONDS;
		if (earned - ctl->budget_spent > max_credit)
		{
			ctl->budget_start = now - (TimestampTz)
				((ctl->budget_spent + max_credit) / bytes_per_s * 1.0e6);
			break;
		}
		if (ctl->budget_spent <= earned)
			break;
		sleep_ms = (long) ((ctl->budget_spent - earned) / bytes_per_s * 1000.0);
		if (sleep_ms < 1)
			break;
		tsm_ctl_sleep(ctl, adaptive ? Min(sleep_ms, TSM_PACER_SLICE_MS) : sleep_ms);
		tsm_ctl_publish(ctl, false);
	}
	charge_total_budget(ctl, written);
}

/*
 * Count one page just written to the new storage, with the WAL this
 * process wrote since the last call, and throttle if asked to (not under
 * the switch's locks: that copy is paid for before the locks are taken).
 *
 * A scattered read (a changed block re-copied after it left shared
 * buffers) costs TSM_PACER_SCATTERED_READ_COST more while the adaptive
 * pace is what limits the copy (pace_binds, from the last look at the
 * budget): it is a request of its own on a device the others are using,
 * where the copy in order is served by the kernel's readahead.  Not while
 * the job's max_rate_mb limits it, nor in a sprint or with the others
 * idle: those rates stay what the manual says, pages and their WAL (a
 * ceiling that outpaces the writes in bytes must go on doing so); nor
 * under fixed pacing or total_max_rate_mb.
 */
void
tsm_ctl_charge_page(TsmJobCtl *ctl, bool throttled, bool scattered_read)
{
	int64		wal_total = pgWalUsage.wal_bytes - ctl->wal_usage_at_start;
	int64		wal_delta = wal_total - ctl->progress.wal_bytes;
	int64		written = BLCKSZ + wal_delta;
	int64		cost = written;

	if (scattered_read)
		ctl->scattered_reads++;
	if (scattered_read && ctl->pace_binds)
	{
		cost += TSM_PACER_SCATTERED_READ_COST;
		ctl->scattered_read_cost += TSM_PACER_SCATTERED_READ_COST;
	}
	ctl->progress.bytes_written += BLCKSZ;
	ctl->progress.wal_bytes = wal_total;
	if (throttled)
		throttle(ctl, cost, written);
	else
		ctl->budget_spent += cost;
}

/*
 * Take nlocks locks, each through take_lock(arg, i) and within timeout_ms
 * (pg_tsmove.switch_lock_timeout, or longer for an attempt that has just
 * cancelled its blockers); all or none.  Called in a transaction,
 * which stays open either way.  Returns true with the locks held in it and
 * lock_timeout back at 0 (the switch's own catalog updates must not time
 * out); false, with none of them held and *failed_at the index of the lock
 * that was not granted in time, if one was not: the caller then ends the
 * transaction with a commit, which keeps the session locks.  Any other
 * error propagates.  lock_timeout is SET LOCAL to the transaction.
 */
bool
tsm_ctl_lock_all_or_none(void (*take_lock) (void *arg, int i), void *arg,
						 int nlocks, int timeout_ms, int *failed_at)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	char		timeout[32];
	TimestampTz started = GetCurrentTimestamp();
	volatile int next = 0;
	volatile bool locked = true;

	snprintf(timeout, sizeof(timeout), "%d", timeout_ms);
	(void) set_config_option("lock_timeout", timeout, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		for (next = 0; next < nlocks; next++)
		{
			/*
			 * A long wait (a timed attempt) is the attempt's, not each
			 * lock's: a lock waited for shortens the next one's timeout.
			 */
			if (timeout_ms > 100 && next > 0)
			{
				long		left = timeout_ms -
					(long) ((GetCurrentTimestamp() - started) / 1000);

				snprintf(timeout, sizeof(timeout), "%ld", Max(left, 1));
				(void) set_config_option("lock_timeout", timeout, PGC_SUSET, PGC_S_SESSION,
										 GUC_ACTION_LOCAL, true, 0, false);
			}
			take_lock(arg, next);
		}
		ReleaseCurrentSubTransaction();		/* the locks pass to the caller's */
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		/* a deadlock the detector broke on our side: also a failed attempt */
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE &&
			edata->sqlerrcode != ERRCODE_T_R_DEADLOCK_DETECTED)
			PG_RE_THROW();
		FlushErrorState();
		FreeErrorData(edata);
		RollbackAndReleaseCurrentSubTransaction();
		locked = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	*failed_at = next;
	if (locked)
		(void) set_config_option("lock_timeout", "0", PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
	return locked;
}

/* ---- the session every worker of the engine runs in ---- */

/* The fastest page-image compression this server was built with. */
#ifdef USE_LZ4
#define TSM_WAL_COMPRESSION "lz4"
#else
#define TSM_WAL_COMPRESSION "pglz"
#endif

/*
 * Session settings the worker always runs with, whatever ALTER DATABASE
 * ... SET or ALTER ROLE ... SET say: names resolve in pg_catalog only;
 * job rows are written read-committed and durably (a row that names new
 * files must reach the WAL before the files exist); lock waits are the
 * worker's own choice.
 */
static const char *const worker_settings[][2] = {
	{"search_path", "pg_catalog, pg_temp"},
	{"default_transaction_isolation", "read committed"},
	{"default_transaction_read_only", "off"},
	{"default_transaction_deferrable", "off"},
	{"synchronous_commit", "on"},
	{"lock_timeout", "0"},
	{"session_replication_role", "origin"},
};

/*
 * Every page a relation move copies is logged as a full-page image, and
 * that WAL is most of what the move costs the commits running beside it:
 * they wait for the WAL writes and syncs it adds.  Unless the DBA chose a
 * wal_compression already, the worker compresses its own page images (a
 * session setting: the rest of the server is unaffected), which also lets
 * the byte budget copy more pages per second.
 */
static void
compress_page_images(void)
{
	const char *current = GetConfigOption("wal_compression", false, false);

	if (current != NULL && strcmp(current, "off") == 0)
		SetConfigOption("wal_compression", TSM_WAL_COMPRESSION,
						PGC_SUSET, PGC_S_SESSION);
}

/*
 * The settings of worker_settings, and page-image compression, for a job
 * worker (worker.c) or a recovery worker (recovery.c) that has just
 * connected.
 */
void
tsm_worker_session_settings(void)
{
	for (int i = 0; i < lengthof(worker_settings); i++)
		SetConfigOption(worker_settings[i][0], worker_settings[i][1],
						PGC_SUSET, PGC_S_SESSION);
	compress_page_images();
}

/* ---- whose rights a job's transactions have ---- */

static Oid	job_role = InvalidOid;
static bool job_role_callback_registered = false;

/* At the end of each transaction of a job: back to the worker's own identity. */
static void
job_role_xact_callback(XactEvent event, void *arg)
{
	if (!OidIsValid(job_role))
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID, 0);
}

void
tsm_job_run_as(Oid role)
{
	Assert(!IsTransactionState());
	if (!job_role_callback_registered)
	{
		RegisterXactCallback(job_role_xact_callback, NULL);
		job_role_callback_registered = true;
	}
	job_role = role;
}

void
tsm_job_start_transaction(void)
{
	StartTransactionCommand();
	if (OidIsValid(job_role))
		SetUserIdAndSecContext(job_role,
							   SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
}
