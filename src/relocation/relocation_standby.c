/*-------------------------------------------------------------------------
 *
 * relocation_standby.c
 *	  A hot standby's relocation of its own copy of a tablespace: the
 *	  switch holds WAL replay instead of locks.
 *
 * On a hot standby nothing but WAL replay changes a page (readers never
 * prune there, and hint bits are hints), and replay can be paused.  So the
 * switch (relocation_switch.c) takes no relation lock at all, and no
 * reader ever waits for it:
 *	1. it pauses replay (SetRecoveryPause) and waits until the startup
 *	   process says it is paused: from here until it is resumed, no page of
 *	   the tablespace changes but for hint bits;
 *	2. the worker reads the WAL up to the last record replayed, copies what
 *	   is dirty (through shared buffers: every buffer's page as replay left
 *	   it) and fsyncs, as on a primary;
 *	3. the rename and the SMGRRELEASE barrier, as on a primary: a buffer
 *	   written through an old descriptor meanwhile holds what its copy
 *	   holds (hint bits aside), so nothing is lost when the old file goes;
 *	4. replay resumes.
 * Replay keeps up afterwards at its own speed: it fell behind by the
 * switch's milliseconds.
 *
 * What can restart replay in that window, and how each is kept out:
 *	- pg_wal_replay_resume() (a DBA, a failover manager): the switch holds
 *	  an advisory lock of its own in ExclusiveLock mode from before the
 *	  pause to after the resume; a call of pg_wal_replay_resume(),
 *	  pg_wal_replay_pause() or pg_promote() takes it in ShareLock first
 *	  (tsm_standby_replay_control_called(), from the object access hook
 *	  relocation_backups.c installs), so it waits for the switch's
 *	  milliseconds, and a switch never starts while such a call's
 *	  transaction runs (the switch does not wait for the lock);
 *	- a promotion by pg_ctl promote or the promote signal file, which no
 *	  lock can hold back: the startup process records the request
 *	  (PromoteIsTriggered) before it replays another record or ends
 *	  recovery.  Before the rename the switch checks it and gives up (the
 *	  job fails, the new location is removed); after the barrier it checks
 *	  again, and if the request came in between, a page changed by the
 *	  promoted server may have been written through an old descriptor and
 *	  lost to the new file: the worker stops the server with PANIC, and
 *	  crash recovery replays that WAL into the new files (README, Limits,
 *	  says what this costs and what is left).  The PANIC waits for the
 *	  startup process to be gone, since the postmaster forgets a crash
 *	  reported just before that process ends normally, and the launcher
 *	  and every statement parsed PANIC again if the restart was skipped all
 *	  the same (tsm_standby_before_crash).
 * A promotion at any other moment fails the job at its next step, before
 * its rename, as a primary's failed relocation: the new location is
 * removed.
 *
 * Calls nothing of pg_tsmove outside the relocation; relocation_switch.c
 * and relocation_finish.c call it, and relocation_backups.c's hook.
 *
 * Locks: the replay-control advisory lock (tsm_standby_replay_locktag),
 * ExclusiveLock by the switch in its transaction, ShareLock by callers of
 * the replay-control functions in theirs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "parser/analyze.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "utils/fmgroids.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "jobs/queue.h"
#include "relocation/relocation_internal.h"

/* How often the switch looks whether replay has paused. */
#define TSM_PAUSE_POLL_MS 5
/*
 * How long it waits for that.  Nobody waits meanwhile (no lock is held);
 * replay stops at its next record, unless that record waits for a
 * recovery conflict (max_standby_streaming_delay).
 */
#define TSM_PAUSE_TIMEOUT_MS 5000

/*
 * How long a PANIC for a promotion in the window waits for the startup
 * process to end, once recovery has ended (it ends within milliseconds
 * then), and while recovery still ends (19's end of recovery waits for
 * the checkpoint that the switch holds back, so it cannot end first).
 */
#define TSM_STARTUP_EXIT_WAIT_MS 10000
#define TSM_RECOVERY_END_WAIT_MS 1000

/* The startup process, found before the rename (tsm_standby_pause_replay). */
static int	startup_pid = 0;

static int	find_startup_process(void);

static post_parse_analyze_hook_type prev_post_parse_analyze_hook = NULL;

/* Whether this process paused replay for a switch and must resume it. */
static bool replay_paused_here = false;
static bool resume_callback_registered = false;

/* The advisory lock that keeps the replay-control functions out of a switch. */
static void
tsm_standby_replay_locktag(LOCKTAG *tag)
{
	/* database 0: cluster-wide; the keys spell "tsmove" and the 4th is ours */
	SET_LOCKTAG_ADVISORY(*tag, InvalidOid, 0x7473, 0x6D6F7665, 3);
}

/*
 * Resume replay if this process paused it: after the switch, on error,
 * and at exit (a worker that dies with FATAL must not leave replay
 * paused; a crash resets it anyway).
 */
void
tsm_standby_resume_replay(void)
{
	if (!replay_paused_here)
		return;
	replay_paused_here = false;
	if (RecoveryInProgress())
		SetRecoveryPause(false);
}

static void
resume_replay_at_exit(int code, Datum arg)
{
	tsm_standby_resume_replay();
}

/*
 * Error out if the server has left recovery or been asked to: the
 * relocation of a standby's copy cannot go on on a primary (its switch
 * would need locks the job never planned for).  Before the rename only.
 */
void
tsm_standby_check_not_promoted(TsmRelocation *st)
{
	if (!RecoveryInProgress() || PromoteIsTriggered())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the server was promoted during the relocation of tablespace \"%s\"",
						st->spcname),
				 errdetail("A standby's relocation is undone when its server leaves recovery before the switch."),
				 errhint("Relocate again with tsmove.relocate_tablespace(); the new location was removed.")));
}

/*
 * The switch's first step on a standby: take the replay-control lock
 * without waiting, then pause replay and wait, at most
 * TSM_PAUSE_TIMEOUT_MS, for
 * the startup process to say it has paused.  Returns false, with replay
 * as it was and a note, if either cannot be had now.  In the switch's
 * transaction.
 */
bool
tsm_standby_pause_replay(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	LOCKTAG		tag;
	TimestampTz deadline;

	tsm_standby_check_not_promoted(st);
	tsm_standby_replay_locktag(&tag);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		tsm_ctl_note(&job->ctl, "a session is calling pg_wal_replay_resume(), "
					 "pg_wal_replay_pause() or pg_promote(); retrying");
		return false;
	}
	if (GetRecoveryPauseState() != RECOVERY_NOT_PAUSED)
	{
		/* paused by someone else: the switch must not resume it */
		st->replay_was_paused = true;
	}
	else
	{
		if (!resume_callback_registered)
		{
			before_shmem_exit(resume_replay_at_exit, 0);
			resume_callback_registered = true;
		}
		st->replay_was_paused = false;
		replay_paused_here = true;
		SetRecoveryPause(true);
	}
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), TSM_PAUSE_TIMEOUT_MS);
	while (GetRecoveryPauseState() != RECOVERY_PAUSED)
	{
		/*
		 * The startup process confirms a pause between two records, or, when
		 * it waits for WAL, after its wait: wake it from that.
		 */
		WakeupRecovery();
		if (!RecoveryInProgress() || PromoteIsTriggered())
		{
			tsm_standby_resume_replay();
			tsm_standby_check_not_promoted(st);
		}
		if (GetCurrentTimestamp() >= deadline)
		{
			tsm_standby_resume_replay();
			tsm_ctl_note(&job->ctl, "WAL replay did not pause within %d ms (a record waiting "
						 "for a recovery conflict?); retrying", TSM_PAUSE_TIMEOUT_MS);
			return false;
		}
		pg_usleep(TSM_PAUSE_POLL_MS * 1000L);
		CHECK_FOR_INTERRUPTS();
	}
	st->replay_paused = true;
	startup_pid = find_startup_process();
	if (startup_pid == 0)
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld found no startup process in the backends' status",
						(long long) job->row.job_id),
				 errdetail("A PANIC for a promotion during its switch will not wait for the end of recovery.")));
	return true;
}

/* The pid of the startup process, from the backends' status; 0 if none. */
static int
find_startup_process(void)
{
	int			nbackends;

	pgstat_clear_backend_activity_snapshot();
	nbackends = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= nbackends; i++)
	{
		LocalPgBackendStatus *local = tsm_local_backend_status(i);

		if (local != NULL && local->backendStatus.st_backendType == B_STARTUP)
			return local->backendStatus.st_procpid;
	}
	return 0;
}

/*
 * Before a PANIC for a promotion in the window (here and in the barrier's
 * log hook), which only crash recovery makes good.  The postmaster
 * forgets a crash that it learns of just before the startup process ends
 * normally: it then goes on without crash recovery, with this shared
 * memory.  So wait until the postmaster has collected the startup process
 * (kill() finds a zombie), at most TSM_STARTUP_EXIT_WAIT_MS once recovery
 * has ended and TSM_RECOVERY_END_WAIT_MS while it has not; and mark the
 * shared memory, so that the launcher PANICs again if the restart was
 * skipped all the same (tsm_crash_was_skipped).  No checkpoint completes
 * meanwhile: the switch holds DELAY_CHKPT_COMPLETE, and a PANIC does not
 * clear it.  Interrupts may be held; nothing here throws or allocates.
 */
void
tsm_standby_before_crash(void)
{
	TimestampTz start = GetCurrentTimestamp();

	while (startup_pid != 0 && kill(startup_pid, 0) == 0 &&
		   !TimestampDifferenceExceeds(start, GetCurrentTimestamp(),
									   RecoveryInProgress() ? TSM_RECOVERY_END_WAIT_MS :
									   TSM_STARTUP_EXIT_WAIT_MS))
		pg_usleep(1000L);
	tsm_note_crash_requested();
}

/*
 * After a switch's PANIC that the postmaster forgot (tsm_crash_was_skipped,
 * jobs/queue.c), every process was stopped but crash recovery never ran:
 * PANIC again, now that the startup process is gone.  The launcher asks at
 * its start; on 18 and later a crashed background worker is not restarted
 * until the server reinitialises, so every statement parsed asks too
 * (post_parse_analyze_hook, tsm_standby_crash_check_init): an atomic read.
 */
void
tsm_standby_crash_if_restart_skipped(void)
{
	if (tsm_crash_was_skipped())
		ereport(PANIC,
				(errmsg("pg_tsmove: the server did not restart after a tablespace relocation's PANIC"),
				 errdetail("The startup process ended at the moment of the PANIC, and the postmaster went on without crash recovery.")));
}

static void
crash_check_at_parse(ParseState *pstate, Query *query, TSM_JUMBLE_STATE *jstate)
{
	tsm_standby_crash_if_restart_skipped();
	if (prev_post_parse_analyze_hook)
		prev_post_parse_analyze_hook(pstate, query, jstate);
}

/* From _PG_init. */
void
tsm_standby_crash_check_init(void)
{
	prev_post_parse_analyze_hook = post_parse_analyze_hook;
	post_parse_analyze_hook = crash_check_at_parse;
}

/*
 * After the barrier: if a promotion was requested since the check before
 * the rename, the promoted server may have written pages through old
 * descriptors that its new files lack.  Only crash recovery, which
 * replays that WAL into the new files, can repair it: PANIC.
 */
void
tsm_standby_check_window(TsmRelocation *st)
{
	pg_memory_barrier();
	if (!RecoveryInProgress() || PromoteIsTriggered())
	{
		tsm_standby_before_crash();
		ereport(PANIC,
				(errmsg("pg_tsmove: the server was promoted during the switch of the relocation of tablespace \"%s\"",
						st->spcname),
				 errdetail("Pages changed after the promotion may have been written to the old location; "
						   "crash recovery replays them into the new one.")));
	}
}

/*
 * The end of a standby switch, or of an attempt: replay resumes (unless
 * someone else had paused it), before the caller's commit releases the
 * replay-control lock.
 */
void
tsm_standby_end_pause(TsmRelocation *st)
{
	if (!st->replay_paused)
		return;
	st->replay_paused = false;
	tsm_standby_resume_replay();
}

/*
 * From the object access hook (relocation_backups.c), before a function
 * runs: a call of one of the replay-control functions waits for a
 * standby's switch, and keeps the next one out until its transaction
 * ends.
 */
void
tsm_standby_replay_control_called(Oid funcid)
{
	LOCKTAG		tag;

	if (funcid != F_PG_WAL_REPLAY_RESUME && funcid != F_PG_WAL_REPLAY_PAUSE &&
		funcid != F_PG_PROMOTE)
		return;
	if (!RecoveryInProgress())
		return;
	tsm_standby_replay_locktag(&tag);
	(void) LockAcquire(&tag, ShareLock, false, false);
}
