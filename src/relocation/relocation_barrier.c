/*-------------------------------------------------------------------------
 *
 * relocation_barrier.c
 *	  The SMGRRELEASE procsignal barrier of a relocation's switch, tried
 *	  first with a bound.
 *
 * After the rename every process must close its descriptors of the old
 * files before the switch's locks go (relocation_switch.c, step 4), and
 * WaitForProcSignalBarrier() waits for every process, with no bound, while
 * the switch holds interrupts and every relation of the tablespace.  A
 * process that does not absorb barriers for a while (a backend blocked
 * writing to a client that stopped reading, the archiver inside
 * archive_command, a backend waiting inside dblink) would hold the switch
 * there, and every writer of the tablespace behind it.  So before an attempt
 * takes any lock, the worker emits the same barrier and waits for it at
 * most TSM_BARRIER_PROBE_MS, interruptibly (pg_cancel_backend(), shutdown;
 * tsmove.cancel() at the end of the wait).  If a process lags, the attempt
 * is not made, nothing is locked, and the job names the process (from the
 * LOG line that WaitForProcSignalBarrier() writes after 5 s, caught by an
 * emit_log_hook in the worker).
 *
 * The probe does not settle it.  A backend blocked writing to its client
 * wakes at the barrier's signal, retries its write, and when the kernel
 * took a little more (it often does) runs on to its next
 * CHECK_FOR_INTERRUPTS() and answers; a moment later it is blocked again.
 * So it can answer the probe and not the barrier after the rename, which
 * then holds every lock until the client reads or goes (README, Limits).
 * A cancel does not reach such a backend; a termination does
 * (ProcessClientWriteInterrupt(), unless it holds interrupts itself).  With
 * pg_tsmove.switch_terminate_client_writers_after set, a client session
 * whose wait event is ClientWrite and that holds the switch that long is
 * sent SIGTERM: before the locks by the caller, once two probes in a row
 * named it; after the rename from the same hook, at the reports that name
 * it, since that wait runs with interrupts held (tsm_barrier_release()).
 * A slow reader cannot be told from one that stopped: the setting is the
 * DBA's choice of how long the tablespace may wait for either.  Only a
 * superuser can submit a relocation; the worker signals only while the
 * submitter still is one (the caller checks it before each attempt).
 *
 * The wait runs in an internal subtransaction, so that the timeout's
 * cancel, turned into an error inside the condition-variable sleep, is
 * cleaned up as an error is.
 *
 * Where /proc shows who holds a file of the old location
 * (relocation_holders.c), a primary's switch under AccessExclusiveLock
 * waits for those processes only, and before the rename:
 * tsm_barrier_wait_for_holders() emits the barrier and waits, bounded and
 * interruptibly, until none holds one; the switch does this under its
 * locks, once the tablespace's buffers are written, when no process can
 * open one again (see there), so after the rename tsm_barrier_release()
 * finds none to wait for.  Before the locks, the probe is made only for
 * the process that kept the last attempt from switching, and only that
 * one is waited for.  The archiver inside archive_command, or a session
 * blocked on its client that never read the tablespace, holds nothing and
 * keeps nothing waiting.  The readers' switch and a standby's, where
 * processes read the tablespace during the switch, wait for the whole
 * barrier as described above.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/procsignal.h"
#include "replication/walsender_private.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "jobs/jobs.h"
#include "relocation/relocation_barrier.h"
#include "relocation/relocation_holders.h"
#include "relocation/relocation_internal.h"


static TimeoutId probe_timeout = MAX_TIMEOUTS;
static volatile sig_atomic_t probe_timed_out = false;
static bool probing = false;
static int	laggard_pid = 0;
static emit_log_hook_type prev_emit_log_hook = NULL;

/* While the barrier after the rename is waited for (tsm_barrier_release). */
#define TSM_MAX_TERMINATED 8
static bool releasing = false;
static bool release_may_terminate = false;
static bool release_on_standby = false;	/* a standby's switch: see below */
static TimestampTz release_started = 0;
static int	release_terminated[TSM_MAX_TERMINATED];	/* sent SIGTERM, in order */
static int	release_nterminated = 0;

/* Whether pid is a walsender (PGPROC tells it apart only from 18 on). */
static bool
is_walsender(int pid)
{
	if (WalSndCtl == NULL)
		return false;
	for (int i = 0; i < max_wal_senders; i++)
		if (((volatile WalSnd *) &WalSndCtl->walsnds[i])->pid == pid)
			return true;
	return false;
}

/*
 * tsm_terminate_client_writer
 *		If pid is a client session blocked writing to its client, send it
 *		SIGTERM and return true.  Sent under ProcArrayLock, so that the PID
 *		is still that session's.  No ereport, no palloc.
 */
bool
tsm_terminate_client_writer(int pid)
{
	PGPROC	   *proc;
	bool		sent = false;

	if (pid == 0 || pid == MyProcPid || is_walsender(pid))
		return false;
	LWLockAcquire(ProcArrayLock, LW_SHARED);
	proc = BackendPidGetProcWithLock(pid);
	if (proc != NULL && tsm_proc_is_client_session(proc) &&
		(proc->statusFlags & PROC_IS_AUTOVACUUM) == 0 &&
		((volatile PGPROC *) proc)->wait_event_info == WAIT_EVENT_CLIENT_WRITE)
		sent = kill(pid, SIGTERM) == 0;
	LWLockRelease(ProcArrayLock);
	return sent;
}

/* The PID in WaitForProcSignalBarrier()'s report, or 0 if it is not one. */
static int
reported_laggard(const ErrorData *edata)
{
	const char *p = edata->message;

	if (edata->elevel != LOG || edata->message_id == NULL || p == NULL ||
		strcmp(edata->message_id, TSM_BARRIER_WAIT_MESSAGE) != 0)
		return 0;
	while (*p != '\0' && !isdigit((unsigned char) *p))
		p++;
	return atoi(p);
}

static void
probe_timeout_handler(void)
{
	probe_timed_out = true;
	QueryCancelPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/*
 * WaitForProcSignalBarrier() reports every 5 s the process it waits for
 * (the first in slot order that has not answered).  While probing:
 * remember it.  While releasing: once the wait has lasted
 * pg_tsmove.switch_terminate_client_writers_after (the process named has
 * not answered since the wait began), terminate it if it is blocked
 * writing to its client.  Runs with interrupts held: nothing here may
 * throw or allocate.  The reports are LOG messages, made whatever
 * log_min_messages says (log_at_log_level).
 */
static void
capture_laggard(ErrorData *edata)
{
	int			pid = reported_laggard(edata);

	if (pid != 0 && probing)
		laggard_pid = pid;
	if (pid != 0 && releasing && release_may_terminate &&
		tsm_switch_terminate_client_writers_after_ms >= 0 &&
		TimestampDifferenceExceeds(release_started, GetCurrentTimestamp(),
								   tsm_switch_terminate_client_writers_after_ms) &&
		tsm_terminate_client_writer(pid))
	{
		bool		listed = false;

		for (int i = 0; i < release_nterminated; i++)
			listed |= release_terminated[i] == pid;
		if (!listed && release_nterminated < TSM_MAX_TERMINATED)
			release_terminated[release_nterminated++] = pid;
	}
	/*
	 * A standby's switch (relocation_standby.c) that waits this long after
	 * its rename, with the server promoted meanwhile: the promoted server may
	 * be writing through old descriptors, and a checkpoint may be waiting
	 * for the switch (DELAY_CHKPT_COMPLETE) without answering the barrier.
	 * Only crash recovery can put its writes into the new files: now.
	 */
	if (pid != 0 && releasing && release_on_standby &&
		(!RecoveryInProgress() || PromoteIsTriggered()))
	{
		tsm_standby_before_crash();
		ereport(PANIC,
				(errmsg("pg_tsmove: the server was promoted while a tablespace relocation's switch "
						"waited for process %d to close its files", pid),
				 errdetail("Pages changed after the promotion may have been written to the old location; "
						   "crash recovery replays them into the new one.")));
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

static void
install_hooks(void)
{
	if (probe_timeout == MAX_TIMEOUTS)
	{
		probe_timeout = RegisterTimeout(USER_TIMEOUT, probe_timeout_handler);
		prev_emit_log_hook = emit_log_hook;
		emit_log_hook = capture_laggard;
	}
}

/*
 * The waits' reports are LOG messages that the hook reads: with
 * log_min_messages above LOG none would be made (errstart() skips them),
 * and nobody would be named, signalled, or, on a standby promoted during
 * the wait, made to PANIC.  So this process logs at LOG while it waits;
 * restore_log_level() ends that.  Returns the GUC nesting level to pass it.
 */
static pg_noinline int
log_at_log_level(void)
{
	int			nest;

	if (!IsTransactionState())
		return -1;				/* cleanup after an error: as configured */
	/* LOG is output at every level but fatal and panic: leave the others */
	if (message_level_is_interesting(LOG))
		return -1;
	nest = NewGUCNestLevel();
	(void) set_config_option("log_min_messages", "log", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

static void
restore_log_level(int nest)
{
	if (nest >= 0)
		AtEOXact_GUC(true, nest);
}

/*
 * On a standby, the startup process waiting for WAL sleeps on the recovery
 * latch, which a procsignal does not set: with no WAL arriving it would
 * answer a barrier only when its wait times out, seconds later.  Wake it.
 */
static void
wake_startup_process(void)
{
	if (RecoveryInProgress())
		WakeupRecovery();
}

/*
 * Wait, interrupts held, until no process but ours holds a file under dir:
 * every process is looked at once, then only those that held one (no
 * other gets one now: relocation_holders.c).  Every 5 s the first is
 * logged; with pg_tsmove.switch_terminate_client_writers_after set and
 * may_terminate, a holder blocked writing to its client is sent SIGTERM
 * once the wait has lasted that long.  Returns false if /proc stopped
 * telling.
 */
static bool
release_holders(const char *dir, bool may_terminate)
{
	TimestampTz last_report = GetCurrentTimestamp();
	long		sleep_ms = 1;
	int		   *pids = palloc(sizeof(int) * Max(1, ProcGlobal->allProcCount));
	int			n = tsm_old_file_holders(dir, pids, ProcGlobal->allProcCount);

	while (n > 0)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (TimestampDifferenceExceeds(last_report, now, 5000))
		{
			ereport(LOG,
					(errmsg("pg_tsmove: a relocation's switch waits for process %d to close its files "
							"of the old location", pids[0]),
					 errdetail("%d processes hold one.", n)));
			last_report = now;
		}
		for (int i = 0; i < n; i++)
		{
			bool		listed = false;

			if (!may_terminate || tsm_switch_terminate_client_writers_after_ms < 0 ||
				!TimestampDifferenceExceeds(release_started, now,
											tsm_switch_terminate_client_writers_after_ms))
				break;
			for (int j = 0; j < release_nterminated; j++)
				listed |= release_terminated[j] == pids[i];
			if (!listed && release_nterminated < TSM_MAX_TERMINATED &&
				tsm_terminate_client_writer(pids[i]))
				release_terminated[release_nterminated++] = pids[i];
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, WAIT_EVENT_PG_SLEEP);
		ResetLatch(MyLatch);
		sleep_ms = Min(sleep_ms * 2, 10);
		n = tsm_old_file_holders_recheck(dir, pids, n);
	}
	pfree(pids);
	return n == 0;
}

/*
 * tsm_barrier_release
 *		After the rename: every process closes the descriptors it has of the
 *		old files.  Emits the barrier, answers it (our interrupts may be
 *		held), and waits with no bound (an error here would release the
 *		locks with old descriptors still open): with holders_dir, for the
 *		processes that hold a file under it (release_holders; the switch
 *		left none before the rename), else for every process.  With
 *		pg_tsmove.switch_terminate_client_writers_after set and may_terminate
 *		(the job's submitter is still a superuser), a client session
 *		blocked writing to its client that the wait names once it has
 *		lasted that long is sent SIGTERM (capture_laggard, release_holders);
 *		each is logged after the wait.  on_standby (a standby's switch,
 *		which holds checkpoints from completing): a report made after a
 *		promotion PANICs (capture_laggard).
 */
void
tsm_barrier_release(bool may_terminate, bool on_standby, const char *holders_dir)
{
	uint64		generation = EmitProcSignalBarrier(PROCSIGNAL_BARRIER_SMGRRELEASE);
	int			nest = log_at_log_level();

	wake_startup_process();
	install_hooks();
	ProcessProcSignalBarrier();
	release_started = GetCurrentTimestamp();
	release_nterminated = 0;
	release_may_terminate = may_terminate;
	release_on_standby = on_standby;
	releasing = true;
	if (holders_dir == NULL || !release_holders(holders_dir, may_terminate))
		WaitForProcSignalBarrier(generation);
	releasing = false;
	for (int i = 0; i < release_nterminated; i++)
		ereport(LOG,
				(errmsg("pg_tsmove: sent SIGTERM to process %d, which was blocked writing to its client "
						"and held the relocation's switch after the rename",
						release_terminated[i]),
				 errdetail("pg_tsmove.switch_terminate_client_writers_after is %d ms.",
						   tsm_switch_terminate_client_writers_after_ms)));
	restore_log_level(nest);
}

/*
 * tsm_barrier_wait_for_holders
 *		Emit PROCSIGNAL_BARRIER_SMGRRELEASE, answer it, and wait at most
 *		timeout_ms (from when the holders are known), interruptibly, until
 *		no process but ours holds a file under dir: with *nheld > 0 on
 *		entry, only the processes in held[]; else every process is looked
 *		at once, then only those that held one.  Returns 1 when none does,
 *		0 if some still do (*nheld of them in held[], at most max), -1 if
 *		/proc does not tell.
 */
int
tsm_barrier_wait_for_holders(const char *dir, int *held, int *nheld, int max, int timeout_ms)
{
	TimestampTz started;
	long		sleep_ms = 1;
	int		   *pids = palloc(sizeof(int) * Max(1, ProcGlobal->allProcCount));
	int			n = *nheld;

	(void) EmitProcSignalBarrier(PROCSIGNAL_BARRIER_SMGRRELEASE);
	ProcessProcSignalBarrier(); /* our own */
	if (n > 0)
	{
		memcpy(pids, held, sizeof(int) * n);
		n = tsm_old_file_holders_recheck(dir, pids, n);
	}
	else
		n = tsm_old_file_holders(dir, pids, ProcGlobal->allProcCount);
	/* the bound starts once the holders are known: the first look is long */
	started = GetCurrentTimestamp();
	while (n > 0 && !TimestampDifferenceExceeds(started, GetCurrentTimestamp(), timeout_ms))
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, WAIT_EVENT_PG_SLEEP);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		sleep_ms = Min(sleep_ms * 2, 20);
		n = tsm_old_file_holders_recheck(dir, pids, n);
	}
	*nheld = Max(0, Min(n, max));
	memcpy(held, pids, sizeof(int) * *nheld);
	pfree(pids);
	return n < 0 ? -1 : n == 0 ? 1 : 0;
}

/*
 * tsm_barrier_probe
 *		Emit PROCSIGNAL_BARRIER_SMGRRELEASE and wait at most timeout_ms for
 *		every process to absorb it.  Returns whether they did; if not,
 *		*laggard is the PID of one that had not, or 0 if not known yet.
 *
 * In a transaction, with no lock the switch needs.  Other errors (a
 * cancel, a shutdown) are thrown as they are.
 */
bool
tsm_barrier_probe(int timeout_ms, int *laggard)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	uint64		generation;
	volatile bool absorbed = true;
	volatile int nest = log_at_log_level();

	install_hooks();
	laggard_pid = 0;
	probe_timed_out = false;
	probing = true;
	generation = EmitProcSignalBarrier(PROCSIGNAL_BARRIER_SMGRRELEASE);
	wake_startup_process();
	ProcessProcSignalBarrier(); /* our own */

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		enable_timeout_after(probe_timeout, timeout_ms);
		WaitForProcSignalBarrier(generation);
		disable_timeout(probe_timeout, false);
		/* a timeout that fired just as the wait ended cancels nothing */
		if (probe_timed_out)
			QueryCancelPending = false;
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		disable_timeout(probe_timeout, false);
		if (!probe_timed_out)
		{
			probing = false;
			PG_RE_THROW();
		}
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		absorbed = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	probing = false;
	restore_log_level(nest);
	*laggard = laggard_pid;
	return absorbed;
}
