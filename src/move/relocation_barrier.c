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
 * emit_log_hook in the worker).  The barrier after the rename then meets
 * processes that have just answered one; one that stops answering in
 * between still holds it (README, Limits).
 *
 * The wait runs in an internal subtransaction, so that the timeout's
 * cancel, turned into an error inside the condition-variable sleep, is
 * cleaned up as an error is.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>

#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/procsignal.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timeout.h"

#include "compat.h"
#include "move/relocation_barrier.h"


static TimeoutId probe_timeout = MAX_TIMEOUTS;
static volatile sig_atomic_t probe_timed_out = false;
static bool probing = false;
static int	laggard_pid = 0;
static emit_log_hook_type prev_emit_log_hook = NULL;

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
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
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

	if (probe_timeout == MAX_TIMEOUTS)
	{
		probe_timeout = RegisterTimeout(USER_TIMEOUT, probe_timeout_handler);
		prev_emit_log_hook = emit_log_hook;
		emit_log_hook = capture_laggard;
	}
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
