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
 * Timed attempts (pg_tsmove.switch_timed_wait, 1 s by default): readers
 * whose transactions always overlap (the essay's long joins) leave no moment
 * at which an attempt of switch_lock_timeout gets its locks.  While blocked,
 * the worker looks at the blocking sessions every TSM_WATCH_INTERVAL_MS
 * (tsm_switch_block_watch) and learns how long each one's transactions hold
 * the locks (seen whole: from a look where it held none to one where it
 * held none again, or held them in another transaction).  When every
 * current blocker's transaction is due to end within switch_timed_wait
 * (each lasting as long as that session's last one, give or take a tenth),
 * the attempt is made then and waits that long; sessions whose transaction
 * ends meanwhile queue their next one behind the request.  Transactions
 * shorter than TSM_SHORT_TRANSACTION_MS (writers) end while any attempt
 * waits, and are left out.  When they are never
 * due together, an attempt made just before the first is due waits
 * switch_timed_wait (at most one every TSM_LINE_UP_INTERVAL_MS): those that
 * end meanwhile start again together when it gives up, so the next gap is
 * shorter, until they line up.  After a timed attempt failed, none is
 * made for TSM_LINE_UP_INTERVAL_MS: writers wait at most
 * switch_timed_wait in any such interval.  A blocker running later than
 * its last transaction by more than a tenth and its lengths' recent
 * variation is not timed at all.  A blocker whose transactions are unknown
 * (idle in transaction, not yet seen whole) gets no timed attempt.
 *
 * No attempt lines blockers up while an autovacuum worker works in this
 * database, or a VACUUM (not FULL) works on a table of it stored on the
 * file system the job reads from (tsm_switch_block_look_at_vacuums, every
 * TSM_VACUUM_LOOK_MS of a watch; the looks are vacuum_look.c's), for up to
 * TSM_VACUUM_HOLD_MS at a time:
 * the sessions there already lose much of their throughput to its reads
 * (in the evaluation, the update streams fell to 55-60 % while autovacuum
 * read the other table of the disk), and a line-up's wait, which writers
 * spend queued, came on top of that: 43-44 % in the worst 5 s.  An
 * autovacuum worker counts from its start in the database: it reads the
 * catalogs and the statistics before it starts on a table (in the
 * evaluation a line-up 4 s after the worker came was followed by its
 * vacuum of the disk's other table: 49 %).  An attempt timed to blockers
 * due together within the wait is still made.  A relocation looks only
 * in the database of its worker.
 *
 * The caller sends the cancels just before it requests the locks, then
 * waits up to TSM_CANCEL_GRACE_MS: later queries queue behind its request
 * meanwhile, so only a query that starts in the moment between the two can
 * take the lock first.
 *
 * Who blocked an attempt: the holders are looked at after it timed out and
 * withdrew its requests, and by then the sessions that queued behind a
 * request (a writer's UPDATE) have been granted their locks.  They did not
 * block it, and must not be named, waited for or cancelled as if they had:
 * just before the requests, the caller has the transactions that hold a
 * conflicting lock then recorded (tsm_switch_attempt_starting), and only a
 * holder among those counts as a blocker of the attempt.
 *
 * Locks: GetLockConflicts() takes the lock partition locks (and each
 * backend's fast-path lock); a holder's PGPROC is read under ProcArrayLock
 * (shared).  A holder that has moved on to another transaction since is
 * left alone.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>
#include <signal.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "jobs/jobs.h"
#include "engine/switch_blockers.h"
#include "engine/vacuum_look.h"

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
find_blockers(const TsmSwitchBlock *block, const LOCKTAG *tags, int ntags,
			  bool *left_out, bool *held)
{
	List	   *blockers = NIL;

	for (int i = 0; i < ntags; i++)
	{
		VirtualTransactionId *conflicts = GetLockConflicts(&tags[i], block->lockmode, NULL);

		if (held)
			held[i] = VirtualTransactionIdIsValid(*conflicts);

		for (VirtualTransactionId *holders = conflicts;
			 VirtualTransactionIdIsValid(*holders); holders++)
		{
			PGPROC	   *proc = tsm_vxid_proc(*holders);
			TsmBlocker	b = {0};
			ListCell   *lc;
			bool		listed = false;

			if (proc == NULL)
			{
				if (left_out)
					*left_out = true;	/* a prepared transaction */
				continue;
			}
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
			if (b.pid == 0 && VirtualTransactionIdIsValid(b.vxid) && left_out)
				*left_out = true;	/* a prepared transaction's */
			if (b.pid == 0 || b.pid == MyProcPid)
				continue;		/* that, or one that has moved on */
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
					  Oid submitted_by, LOCKMODE lockmode, Oid source_spc)
{
	memset(block, 0, sizeof(*block));
	block->cxt = CurrentMemoryContext;
	block->job_id = job_id;
	block->what = what;
	block->submitted_by = submitted_by;
	block->lockmode = lockmode;
	block->source_spc = OidIsValid(source_spc) ? source_spc : MyDatabaseTableSpace;
}

/*
 * Look for what holds line-ups off (the header comment): block->vacuum_what
 * says what, or is empty.  Outside a transaction: the PGPROCs first, and
 * only when a lazy VACUUM runs in this database (and no autovacuum worker
 * already decides it), a transaction to find the table's tablespace.
 */
void
tsm_switch_block_look_at_vacuums(TsmSwitchBlock *block)
{
	bool		autovacuum;
	bool		vacuum;
	Oid			relid;
	const char *command;

	Assert(!IsTransactionState());
	block->vacuum_what[0] = '\0';
	tsm_vacuums_in_this_database(&autovacuum, &vacuum);
	if (autovacuum)
		strlcpy(block->vacuum_what, "autovacuum works in this database",
				sizeof(block->vacuum_what));
	else if (vacuum &&
			 OidIsValid(relid = tsm_vacuum_reading(block->source_spc, &command)))
		snprintf(block->vacuum_what, sizeof(block->vacuum_what),
				 "%s of relation %u reads the source's file system", command, relid);
}

/*
 * Whether a line-up, due now otherwise, is held off by a VACUUM: for up to
 * TSM_VACUUM_HOLD_MS from the first one it held off; then one is made.
 */
static bool
line_up_held_off(TsmSwitchBlock *block, TimestampTz now)
{
	if (block->vacuum_what[0] == '\0')
	{
		block->held_off_since = 0;
		return false;
	}
	if (block->held_off_since == 0)
		block->held_off_since = now;
	return !TimestampDifferenceExceeds(block->held_off_since, now, TSM_VACUUM_HOLD_MS);
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
 * Add the tags that had holders to those the watcher looks at: of a
 * relocation's thousands of locks, the few its readers hold.  A union over
 * the failed attempts, so that a stream between two queries at one failure
 * is seen at the next; a tag no attempt found held is not looked at (a
 * timed attempt it blocks fails, and adds it).  In the job's memory.
 */
static void
remember_held_tags(TsmSwitchBlock *block, const LOCKTAG *tags, int ntags,
				   const bool *held)
{
	for (int i = 0; i < ntags; i++)
	{
		bool		known = false;

		if (!held[i])
			continue;
		for (int k = 0; k < block->ntags && !known; k++)
			known = memcmp(&block->tags[k], &tags[i], sizeof(LOCKTAG)) == 0;
		if (known)
			continue;
		if (block->ntags == block->tags_room)
		{
			int			room = Max(block->tags_room * 2, 8);

			block->tags = block->tags == NULL ?
				MemoryContextAlloc(block->cxt, sizeof(LOCKTAG) * room) :
				repalloc(block->tags, sizeof(LOCKTAG) * room);
			block->tags_room = room;
		}
		block->tags[block->ntags++] = tags[i];
	}
}

/*
 * An attempt that held locks for its wait and failed: if it was a timed
 * one (block->timed_wait_ms, a wait longer than the lock timeout), no
 * timed attempt for TSM_LINE_UP_INTERVAL_MS, whatever it failed at.
 */
void
tsm_switch_timed_attempt_failed(TsmSwitchBlock *block)
{
	if (block->timed_wait_ms > 0)
		block->timed_failed_at = GetCurrentTimestamp();
}

static bool
held_before_request(const TsmSwitchBlock *block, VirtualTransactionId vxid)
{
	for (int i = 0; i < block->nheld_before; i++)
		if (VirtualTransactionIdEquals(block->held_before[i], vxid))
			return true;
	return false;
}

/*
 * Just before an attempt requests its locks (tags, the same the caller
 * passes to tsm_switch_attempt_failed): record the transactions that hold
 * a lock on one of them that conflicts with the switch's.  Only they can
 * block the attempt; a session that holds one after it failed and was not
 * among them queued behind the request and was granted its lock when the
 * request was withdrawn.  More than TSM_MAX_HOLDERS_BEFORE_REQUEST: the
 * record is not complete, and the failed attempt counts every holder.
 *
 * A GetLockConflicts() per tag, the look a failed attempt takes after
 * its requests (none once the record is full): made before the first
 * request, so no query waits behind the switch meanwhile.  Needs no
 * transaction.
 */
void
tsm_switch_attempt_starting(TsmSwitchBlock *block, const LOCKTAG *tags, int ntags)
{
	block->nheld_before = 0;
	block->held_before_complete = true;
	for (int i = 0; i < ntags && block->held_before_complete; i++)
	{
		VirtualTransactionId *conflicts = GetLockConflicts(&tags[i], block->lockmode, NULL);

		for (VirtualTransactionId *holders = conflicts;
			 VirtualTransactionIdIsValid(*holders); holders++)
		{
			if (held_before_request(block, *holders))
				continue;
			if (block->nheld_before == TSM_MAX_HOLDERS_BEFORE_REQUEST)
			{
				block->held_before_complete = false;
				break;
			}
			block->held_before[block->nheld_before++] = *holders;
		}
		/* a fresh array, except in hot standby, where no job runs */
		if (!RecoveryInProgress())
			pfree(conflicts);
	}
}

/*
 * An attempt did not get its locks in time.  Remember since when the
 * switch is blocked and which client transactions blocked it, and cancel
 * the autovacuum workers among the holders (but wraparound's).  Runs with
 * no transaction open, after tsm_switch_attempt_starting() for the same
 * tags.
 *
 * A blocker is a holder that already held a conflicting lock before the
 * requests (in the same transaction).  One that took its lock on a tag
 * the attempt had not requested yet while it waited on an earlier one is
 * left out too, although it would block the next attempt: it is counted
 * when that fails.  Leaving one out is the safe way to err: an attempt is
 * made rather than skipped, a cancel comes an attempt later; counting a
 * session that queued behind the request would cancel a writer that
 * blocked nothing.
 *
 * Autovacuum is cancelled whether it held its lock before or not: a
 * worker that does not prevent wraparound takes its table lock only
 * conditionally (VACOPT_SKIP_LOCKED), which fails while the request
 * waits, so it never queues behind one; one that holds a lock now blocked
 * this attempt or took its lock after the request was withdrawn, and
 * would block the next.
 */
void
tsm_switch_attempt_failed(TsmSwitchBlock *block, const LOCKTAG *tags, int ntags)
{
	bool	   *held = palloc0(sizeof(bool) * Max(ntags, 1));
	List	   *blockers = find_blockers(block, tags, ntags, NULL, held);
	bool		filter = block->held_before_complete;
	ListCell   *lc;

	if (block->blocked_since == 0)
		block->blocked_since = GetCurrentTimestamp();
	remember_held_tags(block, tags, ntags, held);
	pfree(held);
	tsm_switch_timed_attempt_failed(block);
	block->nblockers = 0;
	block->held_before_complete = false;	/* one record, one attempt */
	foreach(lc, blockers)
	{
		TsmBlocker *b = lfirst(lc);
		bool		queued_behind = filter && !held_before_request(block, b->vxid);

		elog(DEBUG1, "pg_tsmove: job %lld: attempt failed, held by PID %d%s%s%s",
			 (long long) block->job_id, b->pid,
			 (b->status_flags & PROC_IS_AUTOVACUUM) ? " (autovacuum)" : "",
			 b->background_worker ? " (background)" : "",
			 queued_behind ? " (granted after the request)" : "");
		if ((b->status_flags & PROC_IS_AUTOVACUUM) &&
			!(b->status_flags & PROC_VACUUM_FOR_WRAPAROUND))
		{
			ereport(LOG,
					(errmsg("pg_tsmove: cancelling autovacuum (PID %d), which blocks the switch of job %lld on \"%s\"",
							b->pid, (long long) block->job_id, block->what)));
			(void) kill(b->pid, SIGINT);
		}
		else if (!b->background_worker && !(b->status_flags & PROC_IS_AUTOVACUUM) &&
				 !queued_behind && block->nblockers < TSM_MAX_REMEMBERED_BLOCKERS)
		{
			block->blocker_pids[block->nblockers] = b->pid;
			block->blockers[block->nblockers++] = b->vxid;
		}
	}
	list_free_deep(blockers);
}

/*
 * The watched session of a process, added if there is room; NULL if not.
 * A pid seen before in another backend slot is a new session: what was
 * learnt of the old one is forgotten.  (Only in another slot: PostgreSQL
 * 15 gives a new backend the PGPROC freed last, so there a reused pid may
 * well land in the old session's slot and inherit its lengths until one
 * of its own transactions is seen whole; 18, read for this, takes the
 * oldest free one.)
 */
static TsmWatchedSession *
watched_session(TsmSwitchBlock *block, int pid, PGPROC *proc)
{
	TsmWatchedSession *w = NULL;

	for (int i = 0; i < block->nwatched && w == NULL; i++)
		if (block->watched[i].pid == pid)
		{
			if (block->watched[i].proc == proc)
				return &block->watched[i];
			w = &block->watched[i];
		}
	/* a session that holds nothing now makes room, else a free slot */
	for (int i = 0; i < block->nwatched && w == NULL; i++)
		if (!LocalTransactionIdIsValid(block->watched[i].lxid))
			w = &block->watched[i];
	if (w == NULL && block->nwatched < TSM_MAX_WATCHED_SESSIONS)
		w = &block->watched[block->nwatched++];
	if (w == NULL)
		return NULL;
	memset(w, 0, sizeof(TsmWatchedSession));
	w->pid = pid;
	w->proc = proc;
	w->last_length_ms = -1;
	return w;
}

/* A watched session's transaction is over: its length, if seen whole. */
static void
watched_transaction_ended(TsmWatchedSession *w, TimestampTz now, bool continuous)
{
	if (w->seen_from_start && continuous)
	{
		double		length_ms = tsm_ms_between(w->since, now);

		/* how much its lengths vary: the last change, fading by half */
		if (w->last_length_ms >= 0)
			w->variation_ms = Max(w->variation_ms / 2, fabs(length_ms - w->last_length_ms));
		w->last_length_ms = length_ms;
	}
	w->lxid = InvalidLocalTransactionId;
}

/*
 * One look at the client sessions that hold a lock the switch needs (the
 * tags failed attempts found held): which transaction each is in, since
 * when, and how long the ones that ended lasted.  Runs with or without a
 * transaction; every TSM_WATCH_INTERVAL_MS while the switch is blocked.
 */
void
tsm_switch_block_watch(TsmSwitchBlock *block)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		continuous;
	bool		after_attempt;
	bool		unwatched = false;
	bool		present[TSM_MAX_WATCHED_SESSIONS] = {0};
	List	   *blockers;
	ListCell   *lc;

	if (block->ntags == 0)
		return;
	/*
	 * A look long after the last may have missed a whole transaction, and
	 * cannot time one that ended in between.  After an attempt that waited
	 * long, the transactions that started meanwhile were queued behind its
	 * request: they began as it gave up, just before this look.
	 */
	continuous = block->last_look != 0 &&
		!TimestampDifferenceExceeds(block->last_look, now, TSM_WATCH_GAP_MS);
	after_attempt = block->last_look != 0 && block->attempted_since_look;
	block->attempted_since_look = false;
	blockers = find_blockers(block, block->tags, block->ntags, &unwatched, NULL);
	foreach(lc, blockers)
	{
		TsmBlocker *b = lfirst(lc);
		TsmWatchedSession *w;

		if (b->background_worker || (b->status_flags & PROC_IS_AUTOVACUUM))
		{
			unwatched = true;
			continue;
		}
		w = watched_session(block, b->pid, tsm_vxid_proc(b->vxid));
		if (w == NULL)
		{
			unwatched = true;
			continue;
		}
		present[w - block->watched] = true;
		if (w->lxid == b->vxid.localTransactionId)
			continue;
		if (LocalTransactionIdIsValid(w->lxid))
			watched_transaction_ended(w, now, continuous);
		w->lxid = b->vxid.localTransactionId;
		w->since = now;
		w->seen_from_start = continuous || after_attempt;
	}
	list_free_deep(blockers);
	for (int i = 0; i < block->nwatched; i++)
		if (!present[i] && LocalTransactionIdIsValid(block->watched[i].lxid))
			watched_transaction_ended(&block->watched[i], now, continuous);
	block->unwatched_blockers = unwatched;
	block->last_look = now;
}

/*
 * Whether to make an attempt now, timed to the blockers' predicted ends
 * (TSM_TIMED_NOW: block->timed_wait_ms says how long it waits for its
 * locks), later (every blocker's transaction is timed: watch on), or not
 * (TSM_TIMED_NEVER: one cannot be timed, or nobody blocks; attempts as
 * usual).  recheck: the look just before an attempt decided earlier,
 * which must still be due (the rate limits were applied then).  After
 * tsm_switch_block_watch.
 */
TsmTimedAttempt
tsm_switch_block_timed(TsmSwitchBlock *block, bool recheck)
{
	TimestampTz now = GetCurrentTimestamp();
	double		first_due_ms = -1;	/* from now */
	double		last_due_ms = -1;
	double		margin_ms = 0;
	int			current = 0;
	bool		learning = false;
	bool		line_up;

	block->timed_wait_ms = 0;
	block->line_up_held_off = false;
	if (tsm_switch_timed_wait_ms <= 0 || block->unwatched_blockers)
		return TSM_TIMED_NEVER; /* off, or a blocker it cannot follow */
	/* after one failed, writers have waited: none for TSM_LINE_UP_INTERVAL_MS */
	if (!recheck && block->timed_failed_at != 0 &&
		!TimestampDifferenceExceeds(block->timed_failed_at, now, TSM_LINE_UP_INTERVAL_MS))
		return TSM_TIMED_LATER;
	for (int i = 0; i < block->nwatched; i++)
	{
		TsmWatchedSession *w = &block->watched[i];
		double		elapsed_ms;
		double		due_ms;
		double		w_margin_ms;

		if (!LocalTransactionIdIsValid(w->lxid))
			continue;
		elapsed_ms = tsm_ms_between(w->since, now);
		if (w->last_length_ms >= 0 && w->last_length_ms < TSM_SHORT_TRANSACTION_MS &&
			elapsed_ms < TSM_SHORT_TRANSACTION_MS)
			continue;			/* a short one: ends while any attempt waits */
		if (!w->seen_from_start)
			return TSM_TIMED_NEVER; /* began unseen: not timed */
		if (w->last_length_ms < TSM_SHORT_TRANSACTION_MS)
		{
			learning = true;	/* its length is learnt at its end */
			continue;
		}
		/* lengths vary: a tenth, and a look either way */
		w_margin_ms = w->last_length_ms / 10 + 2 * TSM_WATCH_INTERVAL_MS;
		due_ms = w->last_length_ms - elapsed_ms;
		if (due_ms < -(w_margin_ms + w->variation_ms))
			return TSM_TIMED_NEVER; /* overdue: this one is not as before */

		first_due_ms = current == 0 ? due_ms : Min(first_due_ms, due_ms);
		last_due_ms = current == 0 ? due_ms : Max(last_due_ms, due_ms);
		margin_ms = Max(margin_ms, w_margin_ms);
		current++;
	}
	if (learning)
		return TSM_TIMED_NEVER;	/* attempts as usual meanwhile */
	if (current == 0)
		return TSM_TIMED_NEVER; /* nobody holds the locks now: as usual */
	/*
	 * Not before the first is about to end: later queries wait from the
	 * request on, and one that ended before it would start another.
	 */
	if (first_due_ms > margin_ms)
		return TSM_TIMED_LATER;
	if (last_due_ms + margin_ms <= tsm_switch_timed_wait_ms)
	{
		/* all due within the wait (one already late: the margin again) */
		block->timed_wait_ms = (int) Max(last_due_ms + margin_ms, margin_ms);
		block->lining_up = false;
		return TSM_TIMED_NOW;
	}
	if (recheck)
		line_up = block->lining_up;
	else
	{
		line_up = block->last_lining_up == 0 ||
			TimestampDifferenceExceeds(block->last_lining_up, now, TSM_LINE_UP_INTERVAL_MS);
		block->line_up_held_off = line_up && line_up_held_off(block, now);
		line_up = line_up && !block->line_up_held_off;
	}
	if (line_up)
	{
		block->timed_wait_ms = tsm_switch_timed_wait_ms;
		block->lining_up = true;
		return TSM_TIMED_NOW;
	}
	return TSM_TIMED_LATER;
}

/*
 * What the watcher knows, for a DEBUG1 line: each watched session's
 * transaction (how long it has run, its last length and their variation;
 * '?' begun unseen) and whether a holder it cannot time was seen.
 */
void
tsm_switch_block_describe(const TsmSwitchBlock *block, char *buf, size_t len)
{
	TimestampTz now = GetCurrentTimestamp();
	size_t		used;

	used = snprintf(buf, len, "%s", block->unwatched_blockers ? "untimed holder; " : "");
	if (block->line_up_held_off)
		used += snprintf(buf + used, len - used, "no line-up: %s; ", block->vacuum_what);
	for (int i = 0; i < block->nwatched && used + 64 < len; i++)
	{
		const TsmWatchedSession *w = &block->watched[i];

		if (!LocalTransactionIdIsValid(w->lxid))
			continue;
		if (w->last_length_ms < 0)
			used += snprintf(buf + used, len - used, "%d: %.0f%s ms, length unknown; ",
							 w->pid, tsm_ms_between(w->since, now),
							 w->seen_from_start ? "" : "?");
		else
			used += snprintf(buf + used, len - used, "%d: %.0f%s of %.0f+-%.0f ms; ",
							 w->pid, tsm_ms_between(w->since, now),
							 w->seen_from_start ? "" : "?", w->last_length_ms,
							 w->variation_ms);
	}
}

/*
 * Just before the locks of an attempt tsm_switch_block_timed() decided
 * on: whether its blockers are still due (the attempt then waits
 * block->timed_wait_ms from now).  What ran since (the backlog's copy and
 * fsync, the front end's preparations) takes milliseconds to seconds, and
 * a blocker that ended meanwhile started another transaction.
 */
bool
tsm_switch_block_still_due(TsmSwitchBlock *block)
{
	tsm_switch_block_watch(block);
	if (tsm_switch_block_timed(block, true) != TSM_TIMED_NOW)
		return false;
	if (block->lining_up)
	{
		block->last_lining_up = GetCurrentTimestamp();
		block->held_off_since = 0;	/* made: a hold starts anew */
	}
	block->attempted_since_look = true;	/* the request follows this look */
	return true;
}

/*
 * "process 123, 456" for the client sessions that blocked the last failed
 * attempt, "" if none was seen (the lock was granted to them meanwhile,
 * only background processes blocked it, or the holders it saw had all
 * queued behind its request).
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
	blockers = find_blockers(block, tags, ntags, NULL, NULL);
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
	blockers = find_blockers(block, tags, ntags, NULL, NULL);
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
