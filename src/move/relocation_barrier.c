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
 * there, and every query of the tablespace behind it.  So before an attempt
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
 * (ProcessClientWriteInterrupt()).  With pg_tsmove.switch_cancel_blockers_after
 * set, a client session blocked writing to its client that holds the
 * switch that long is terminated: before the locks, by the caller; after
 * the rename, from the same hook, since the wait runs with interrupts held
 * (tsm_barrier_release()).  A relocation is a superuser's: it may signal
 * any session.
 *
 * The wait runs in an internal subtransaction, so that the timeout's
 * cancel, turned into an error inside the condition-variable sleep, is
 * cleaned up as an error is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <signal.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/procsignal.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"
#include "utils/wait_event.h"

#include "compat.h"
#include "move/move.h"
#include "move/relocation_barrier.h"


static TimeoutId probe_timeout = MAX_TIMEOUTS;
static volatile sig_atomic_t probe_timed_out = false;
static bool probing = false;
static int	laggard_pid = 0;
static emit_log_hook_type prev_emit_log_hook = NULL;

/* While the barrier after the rename is waited for (tsm_barrier_release). */
static bool releasing = false;
static TimestampTz release_started = 0;
static int	release_terminated = 0;	/* the last process terminated, or 0 */

/*
 * tsm_terminate_client_writer
 *		If pid is a client session blocked writing to its client, send it
 *		SIGTERM and return true.  Takes ProcArrayLock; no ereport, no palloc.
 */
bool
tsm_terminate_client_writer(int pid)
{
	PGPROC	   *proc;
	bool		writing = false;

	if (pid == 0 || pid == MyProcPid)
		return false;
	LWLockAcquire(ProcArrayLock, LW_SHARED);
	proc = BackendPidGetProcWithLock(pid);
	if (proc != NULL)
		writing = tsm_proc_is_client_session(proc) &&
			((volatile PGPROC *) proc)->wait_event_info == WAIT_EVENT_CLIENT_WRITE;
	LWLockRelease(ProcArrayLock);
	return writing && kill(pid, SIGTERM) == 0;
}

static void
probe_timeout_handler(void)
{
	probe_timed_out = true;
	QueryCancelPending = true;
	InterruptPending = true;
	SetLatch(MyLatch);
}

/* While probing: the PID that WaitForProcSignalBarrier() says it waits for. */
static void
capture_laggard(ErrorData *edata)
{
	if (probing && edata->elevel == LOG && edata->message_id != NULL &&
		strcmp(edata->message_id, TSM_BARRIER_WAIT_MESSAGE) == 0 && edata->message != NULL)
	{
		const char *p = edata->message;

		while (*p != '\0' && !isdigit((unsigned char) *p))
			p++;
		laggard_pid = atoi(p);
	}
	if (releasing && tsm_switch_cancel_blockers_after_ms >= 0 &&
		edata->elevel == LOG && edata->message_id != NULL &&
		strcmp(edata->message_id, TSM_BARRIER_WAIT_MESSAGE) == 0 && edata->message != NULL &&
		TimestampDifferenceExceeds(release_started, GetCurrentTimestamp(),
								   tsm_switch_cancel_blockers_after_ms))
	{
		const char *p = edata->message;
		int			pid;

		while (*p != '\0' && !isdigit((unsigned char) *p))
			p++;
		pid = atoi(p);
		if (tsm_terminate_client_writer(pid))
			release_terminated = pid;
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
 * tsm_barrier_release
 *		After the rename: every process closes the descriptors it has of the
 *		old files.  Emits the barrier, answers it (our interrupts may be
 *		held) and waits for every process, with no bound: an error here
 *		would release the locks with old descriptors still open.  With
 *		pg_tsmove.switch_cancel_blockers_after set, a client session blocked
 *		writing to its client that holds the wait that long is terminated
 *		(from the hook, at WaitForProcSignalBarrier()'s 5 s reports).
 */
void
tsm_barrier_release(void)
{
	uint64		generation = EmitProcSignalBarrier(PROCSIGNAL_BARRIER_SMGRRELEASE);

	install_hooks();
	ProcessProcSignalBarrier();
	release_started = GetCurrentTimestamp();
	release_terminated = 0;
	releasing = true;
	WaitForProcSignalBarrier(generation);
	releasing = false;
	if (release_terminated != 0)
		ereport(LOG,
				(errmsg("pg_tsmove: terminated process %d, which was blocked writing to its client "
						"and held the relocation's switch after the rename",
						release_terminated),
				 errdetail("pg_tsmove.switch_cancel_blockers_after is %d ms.",
						   tsm_switch_cancel_blockers_after_ms)));
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

	install_hooks();
	laggard_pid = 0;
	probe_timed_out = false;
	probing = true;
	generation = EmitProcSignalBarrier(PROCSIGNAL_BARRIER_SMGRRELEASE);
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
	*laggard = laggard_pid;
	return absorbed;
}
