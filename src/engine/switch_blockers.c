/*-------------------------------------------------------------------------
 *
 * switch_blockers.c
 *	  The sessions whose locks block a switch, and cancelling them.
 *
 * A switch needs a lock on every relation it changes (AccessExclusiveLock
 * for a relation move, ExclusiveLock for a relocation: frontend.h), and
 * waits at most pg_tsmove.switch_lock_timeout per attempt (a queued
 * exclusive request blocks every later query of the relation).  Two kinds
 * of holder are cancelled instead of waited for:
 *	- autovacuum, when an attempt has timed out, as ProcSleep() cancels one
 *	  that blocks any lock request for deadlock_timeout (which an attempt
 *	  never waits that long for); never one that prevents wraparound;
 *	- with pg_tsmove.switch_cancel_blockers_after set (off by default),
 *	  once the switch has been blocked that long, the queries of the client
 *	  sessions that block it: long readers that overlap would otherwise
 *	  starve the switch for ever.  Only a transaction that already blocked
 *	  the previous attempt is cancelled: a short one (an UPDATE that holds
 *	  the lock for a millisecond) ends by itself in the grace below.  The rule is pg_cancel_backend()'s,
 *	  applied to the job's submitter (the worker runs with more rights than
 *	  the role that asked for the move): a superuser's session, or one with
 *	  no role, only for a superuser; another only for a member of its role
 *	  or of pg_signal_backend.  Background workers are never signalled.  A
 *	  session idle in a transaction ignores a cancel, as it ignores
 *	  pg_cancel_backend(); idle_in_transaction_session_timeout ends those.
 *
 * The caller sends the cancels just before it requests the locks, then
 * waits up to TSM_CANCEL_GRACE_MS: later queries queue behind its request
 * meanwhile, so only a query that starts in the moment between the two can
 * take the lock first.
 *
 * Locks: GetLockConflicts() takes the lock partition locks; a holder's
 * PGPROC is read under ProcArrayLock (shared).  A holder that has moved on
 * to another transaction since is left alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"

#include "jobs/jobs.h"
#include "engine/switch_blockers.h"

/* A session whose lock blocks the switch. */
typedef struct TsmBlocker
{
	VirtualTransactionId vxid;
	int			pid;
	Oid			role;			/* its session user; InvalidOid if none */
	uint8		status_flags;	/* PROC_IS_AUTOVACUUM, ... */
	bool		background_worker;
} TsmBlocker;

/*
 * The sessions holding a lock on one of the tags that conflicts with the
 * switch's, each once.  A prepared transaction (no process) and
 * a holder that has moved on to another transaction are left out.
 */
static List *
find_blockers(const TsmSwitchBlock *block, const LOCKTAG *tags, int ntags)
{
	List	   *blockers = NIL;

	for (int i = 0; i < ntags; i++)
	{
		VirtualTransactionId *conflicts = GetLockConflicts(&tags[i], block->lockmode, NULL);

		for (VirtualTransactionId *holders = conflicts;
			 VirtualTransactionIdIsValid(*holders); holders++)
		{
			PGPROC	   *proc = tsm_vxid_proc(*holders);
			TsmBlocker	b = {0};
			ListCell   *lc;
			bool		listed = false;

			if (proc == NULL)
				continue;
			LWLockAcquire(ProcArrayLock, LW_SHARED);
			if (TSM_PROC_LXID(proc) == holders->localTransactionId)
			{
				b.vxid = *holders;
				b.pid = proc->pid;
				b.role = proc->roleId;
				b.status_flags = proc->statusFlags;
				b.background_worker = !tsm_proc_is_client_session(proc);
			}
			LWLockRelease(ProcArrayLock);
			if (b.pid == 0 || b.pid == MyProcPid)
				continue;
			foreach(lc, blockers)
				listed |= ((TsmBlocker *) lfirst(lc))->pid == b.pid;
			if (!listed)
				blockers = lappend(blockers, memcpy(palloc(sizeof(b)), &b, sizeof(b)));
		}
		/* a fresh array, except in hot standby, where no job runs */
		if (!RecoveryInProgress())
			pfree(conflicts);
	}
	return blockers;
}

/* A job's switch, not blocked yet. */
void
tsm_switch_block_init(TsmSwitchBlock *block, int64 job_id, const char *what,
					  Oid submitted_by, LOCKMODE lockmode)
{
	memset(block, 0, sizeof(*block));
	block->job_id = job_id;
	block->what = what;
	block->submitted_by = submitted_by;
	block->lockmode = lockmode;
}

/* Whether the switch has been blocked long enough to cancel its blockers. */
static bool
cancelling_is_due(const TsmSwitchBlock *block)
{
	return tsm_switch_cancel_blockers_after_ms >= 0 &&
		block->blocked_since != 0 &&
		TimestampDifferenceExceeds(block->blocked_since, GetCurrentTimestamp(),
								   tsm_switch_cancel_blockers_after_ms);
}

static bool
blocked_last_attempt(const TsmSwitchBlock *block, VirtualTransactionId vxid)
{
	for (int i = 0; i < block->nblockers; i++)
		if (VirtualTransactionIdEquals(block->blockers[i], vxid))
			return true;
	return false;
}

/*
 * An attempt did not get its locks in time.  Remember since when the
 * switch is blocked and which client transactions blocked it, and cancel
 * the autovacuum workers among the blockers (but wraparound's).  Runs with
 * no transaction open.
 */
void
tsm_switch_attempt_failed(TsmSwitchBlock *block, const LOCKTAG *tags, int ntags)
{
	List	   *blockers = find_blockers(block, tags, ntags);
	ListCell   *lc;

	if (block->blocked_since == 0)
		block->blocked_since = GetCurrentTimestamp();
	block->nblockers = 0;
	foreach(lc, blockers)
	{
		TsmBlocker *b = lfirst(lc);

		if ((b->status_flags & PROC_IS_AUTOVACUUM) &&
			!(b->status_flags & PROC_VACUUM_FOR_WRAPAROUND))
		{
			ereport(LOG,
					(errmsg("pg_tsmove: cancelling autovacuum (PID %d), which blocks the switch of job %lld on \"%s\"",
							b->pid, (long long) block->job_id, block->what)));
			(void) kill(b->pid, SIGINT);
		}
		else if (!b->background_worker && !(b->status_flags & PROC_IS_AUTOVACUUM) &&
				 block->nblockers < TSM_MAX_REMEMBERED_BLOCKERS)
		{
			block->blocker_pids[block->nblockers] = b->pid;
			block->blockers[block->nblockers++] = b->vxid;
		}
	}
	list_free_deep(blockers);
}

/*
 * "process 123, 456" for the client sessions that blocked the last failed
 * attempt, "" if none was seen (the lock was granted to them meanwhile, or
 * only background processes blocked it).
 */
void
tsm_switch_blockers_named(const TsmSwitchBlock *block, char *buf, size_t len)
{
	size_t		used = 0;

	buf[0] = '\0';
	for (int i = 0; i < block->nblockers && used + 16 < len; i++)
		used += snprintf(buf + used, len - used, "%s%d",
						 i == 0 ? (block->nblockers > 1 ? "processes " : "process ") : ", ",
						 block->blocker_pids[i]);
}

/* The job's note while tsm_last_blockers_remain() holds attempts back. */
void
tsm_note_blockers_remain(TsmJobCtl *ctl, const TsmSwitchBlock *block)
{
	char		who[160];

	tsm_switch_blockers_named(block, who, sizeof(who));
	tsm_ctl_note(ctl, "%s blocked the last switch attempt: waiting for its transaction to end, "
				 "with no lock requested (pg_tsmove.switch_cancel_blockers_after cancels its query)",
				 who[0] ? who : "the session");
}

/*
 * Whether a client transaction that blocked the last failed attempt still
 * holds a conflicting lock: another attempt now would time out the same
 * way.  The caller then skips it: a request queued meanwhile holds up
 * the sessions behind it for nothing, and every AccessExclusiveLock on a
 * relation (a relation move's) is WAL-logged, and a hot standby replays it by taking the same
 * lock, which waits for the standby's own queries of the relation and
 * cancels them after max_standby_streaming_delay.  Needs a transaction.
 */
bool
tsm_last_blockers_remain(const TsmSwitchBlock *block, const LOCKTAG *tags, int ntags)
{
	List	   *blockers;
	ListCell   *lc;
	bool		remain = false;

	if (block->nblockers == 0)
		return false;
	blockers = find_blockers(block, tags, ntags);
	foreach(lc, blockers)
		remain |= blocked_last_attempt(block, ((TsmBlocker *) lfirst(lc))->vxid);
	list_free_deep(blockers);
	return remain;
}

/* pg_cancel_backend()'s rule, for the submitter.  Needs a transaction. */
static bool
submitter_may_signal(Oid submitter, Oid role)
{
	if ((!OidIsValid(role) || superuser_arg(role)) && !superuser_arg(submitter))
		return false;
	return has_privs_of_role(submitter, role) ||
		has_privs_of_role(submitter, ROLE_PG_SIGNAL_BACKEND);
}

/*
 * Before an attempt: once cancelling is due, cancel the queries of the
 * client transactions that block the switch now and already blocked the
 * last attempt, those the submitter may signal.  Each cancel is logged;
 * those it may not send are logged once per job.  Returns how many were
 * sent.  Needs a transaction (catalog lookups).
 */
int
tsm_cancel_blocking_queries(TsmSwitchBlock *block, const LOCKTAG *tags, int ntags)
{
	List	   *blockers;
	ListCell   *lc;
	StringInfoData refused;
	int			cancelled = 0;

	if (!cancelling_is_due(block))
		return 0;
	blockers = find_blockers(block, tags, ntags);
	initStringInfo(&refused);
	foreach(lc, blockers)
	{
		TsmBlocker *b = lfirst(lc);

		if (!blocked_last_attempt(block, b->vxid))
			continue;
		if (!submitter_may_signal(block->submitted_by, b->role))
		{
			appendStringInfo(&refused, "%s%d", refused.len ? ", " : "", b->pid);
			continue;
		}
		ereport(LOG,
				(errmsg("pg_tsmove: cancelling the query of PID %d, which blocks the switch of job %lld on \"%s\" (blocked for %d ms or more)",
						b->pid, (long long) block->job_id, block->what,
						tsm_switch_cancel_blockers_after_ms)));
		(void) kill(b->pid, SIGINT);
		cancelled++;
	}
	if (refused.len > 0 && !block->refusal_logged)
	{
		ereport(LOG,
				(errmsg("pg_tsmove: not cancelling PIDs %s, which block the switch of job %lld on \"%s\": its submitter may not signal them",
						refused.data, (long long) block->job_id, block->what)));
		block->refusal_logged = true;
	}
	pfree(refused.data);
	list_free_deep(blockers);
	return cancelled;
}
