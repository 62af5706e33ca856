/*-------------------------------------------------------------------------
 *
 * relation_switch.c
 *	  The switch of a relation move, the only moment DML waits: the
 *	  relation starts using its new files.  Before it, the blocks of the
 *	  old files that are cached are listed, for relation_move.c to read
 *	  the same blocks of the new files back in afterwards (warming).
 *
 * One switch attempt is one transaction, driven by worker.c:
 *	1. tsm_relation_switch_lock: AccessExclusiveLock on every member
 *	   (relation, TOAST table, TOAST index, in that order, as ALTER TABLE
 *	   does) with lock_timeout = pg_tsmove.switch_lock_timeout, SET LOCAL.
 *	   A queued exclusive request blocks all later queries of the relation,
 *	   so a request is never left queued longer than that; on timeout the
 *	   attempt is abandoned and the worker backs off, keeps mirroring and
 *	   tries again.  Autovacuum runs beside an online move (its session
 *	   lock is AccessShareLock); if an autovacuum worker holds a member's
 *	   lock when an attempt times out, it is cancelled, as the deadlock
 *	   detector cancels one that blocks any lock request after
 *	   deadlock_timeout (which an attempt never waits that long for) -
 *	   unless it runs to prevent wraparound.  Once the switch has been
 *	   blocked for pg_tsmove.switch_cancel_blockers_after (off by default),
 *	   an attempt first cancels the queries of the client sessions that
 *	   block it, those the job's submitter may signal, and waits a little
 *	   longer: long overlapping readers would otherwise starve the switch
 *	   (switch_blockers.c).
 *	2. tsm_relation_switch_check: the FSM and VM forks join the files, to
 *	   be copied whole (neither can be mirrored: the FSM is not WAL-logged,
 *	   VM bit clears carry no block reference of the VM); step 1 read them
 *	   into shared buffers just before the locks, so that the copy finds
 *	   them there.
 *	3. The worker flushes the WAL, reads it to the end, re-copies the last
 *	   dirty blocks and any blocks the relation grew by, copies the FSM and
 *	   VM, and fsyncs every fork of the new storage.
 *	4. tsm_relation_switch_commit: SetRelationTableSpace() points pg_class
 *	   at the new relfilenode (it handles the catalog's locking),
 *	   RelationAssumeNewRelfilenode() as core's SET TABLESPACE does.  The
 *	   job row says 'warming' in the same transaction, so after a crash the
 *	   row tells whether the switch committed; an xact callback sets
 *	   job->switch_committed as soon as the commit record is written, and
 *	   from then on nothing drops the new files.  The old files are not
 *	   dropped here: relation_move.c shrinks them gently after warming and
 *	   drops them in the commit that records the job as done (freed all at
 *	   once when this commit releases the locks, a big file stalled
 *	   everyone's WAL flushes).
 *
 * Locks: called with the job's session lock held and no transaction open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "catalog/catalog.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/storage.h"
#include "commands/tablecmds.h"
#include "miscadmin.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/smgr.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "relation/relation_internal.h"
#include "engine/switch_blockers.h"

/*
 * Remember which blocks of each member's old main fork are in shared
 * buffers, to read the same blocks of the new file after the switch (the
 * scan pg_buffercache does).  Runs before the lock: a slightly stale list
 * only warms a little more or less.
 */
static void
collect_cached_blocks(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		TsmFile    *f = tsm_fileset_find(&job->files, m->old_node, MAIN_FORKNUM);
		int			room = Max(1, Min(NBuffers, f->nblocks));

		if (m->warm_blocks)
			pfree(m->warm_blocks);
		m->warm_blocks = MemoryContextAlloc(job->cxt, sizeof(BlockNumber) * room);
		m->nwarm = 0;
	}

	for (int b = 0; b < NBuffers; b++)
	{
		BufferDesc *desc = GetBufferDescriptor(b);
		TsmRelFileNode node;
		ForkNumber	fork;
		BlockNumber blkno;
		TsmBufState state = LockBufHdr(desc);

		tsm_buffer_tag(desc, &node, &fork, &blkno);
		tsm_unlock_buf_hdr(desc, state);
		if (!(state & BM_VALID) || fork != MAIN_FORKNUM)
			continue;
		for (int i = 0; i < move->nmembers; i++)
		{
			TsmRelMember *m = &move->members[i];
			TsmFile    *f = tsm_fileset_find(&job->files, m->old_node, MAIN_FORKNUM);

			if (TsmRelFileNodeEquals(node, m->old_node) &&
				m->nwarm < Max(1, Min(NBuffers, f->nblocks)))
				m->warm_blocks[m->nwarm++] = blkno;
		}
	}
}

/*
 * Read every member's FSM and VM into shared buffers before the locks:
 * switch_check has them copied whole under the locks, where each block
 * read from a device other readers keep busy would cost everyone waiting
 * milliseconds.  Read a moment before, they are still cached then (they
 * are small: about 35 FSM blocks and 4 VM blocks for a table of 1 GB).
 * Not a fork over 1 024 blocks (8 MB): read on each attempt, it would
 * crowd out others' pages.  In the attempt's transaction, only for an
 * attempt that requests the locks: a buffer pin needs a resource owner.
 */
#define TSM_CACHED_FORK_MAX_BLOCKS 1024	/* 8 MB: the FSM of a 256 GB table */

static void
cache_locked_forks(TsmRelMove *move)
{
	static const ForkNumber locked_forks[] = {FSM_FORKNUM, VISIBILITYMAP_FORKNUM};

	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		SMgrRelation src = tsm_smgropen(m->old_node);

		for (int k = 0; k < lengthof(locked_forks); k++)
		{
			BlockNumber nblocks;

			if (!smgrexists(src, locked_forks[k]))
				continue;
			nblocks = smgrnblocks(src, locked_forks[k]);
			if (nblocks > TSM_CACHED_FORK_MAX_BLOCKS)
				continue;		/* a big table's: not worth a cache's room each attempt */
			for (BlockNumber blkno = 0; blkno < nblocks; blkno++)
				ReleaseBuffer(tsm_read_buffer(m->old_node, locked_forks[k], blkno,
											  RBM_ZERO_ON_ERROR, NULL,
											  m->relpersistence == RELPERSISTENCE_PERMANENT));
		}
	}
}

/* The lock tags of the members, for switch_blockers.c. */
static LOCKTAG *
member_lock_tags(TsmRelMove *move)
{
	LOCKTAG    *tags = palloc(sizeof(LOCKTAG) * move->nmembers);

	for (int i = 0; i < move->nmembers; i++)
	{
		LOCKTAG		tag;		/* the macro evaluates its target many times */

		SET_LOCKTAG_RELATION(tag, MyDatabaseId, move->members[i].relid);
		tags[i] = tag;
	}
	return tags;
}

static void
lock_member(void *arg, int i)
{
	TsmRelMove *move = (TsmRelMove *) arg;

	LockRelationOid(move->members[i].relid, AccessExclusiveLock);
}

/*
 * Start the switch transaction and take AccessExclusiveLock on every
 * member, waiting at most switch_lock_timeout for each.  Once the switch
 * has been blocked for switch_cancel_blockers_after, the attempt first
 * cancels the blocking queries and waits up to TSM_CANCEL_GRACE_MS
 * (switch_blockers.c).  Returns false, with no transaction open and the
 * session locks still held, if a lock was not granted in time.
 */
bool
tsm_relation_switch_lock(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;
	LOCKTAG    *tags = member_lock_tags(move);
	int			timeout_ms = tsm_switch_lock_timeout_ms;
	int			failed_at;

	collect_cached_blocks(job);
	tsm_job_start_transaction();
	if (tsm_cancel_blocking_queries(&job->block, tags, move->nmembers) > 0)
		timeout_ms = Max(timeout_ms, TSM_CANCEL_GRACE_MS);
	else if (job->block.timed_wait_ms > 0)
	{
		if (!tsm_switch_block_still_due(&job->block))
		{
			CommitTransactionCommand();
			tsm_ctl_note(&job->ctl, "%s", "a switch attempt timed to the end of the transactions "
						 "that block it was put off: they are no longer due to end together");
			pfree(tags);
			return false;
		}
		timeout_ms = Max(timeout_ms, job->block.timed_wait_ms);
	}
	else if (tsm_last_blockers_remain(&job->block, tags, move->nmembers))
	{
		/* it would fail as the last did, and log its lock for standbys */
		CommitTransactionCommand();
		tsm_note_blockers_remain(&job->ctl, &job->block);
		pfree(tags);
		return false;
	}
	cache_locked_forks(move);
	/* who holds the locks now: those granted theirs after it did not block it */
	tsm_switch_attempt_starting(&job->block, tags, move->nmembers);
	if (tsm_ctl_lock_all_or_none(lock_member, move, move->nmembers, timeout_ms,
								 &failed_at))
	{
		pfree(tags);
		return true;
	}
	CommitTransactionCommand();
	tsm_switch_attempt_failed(&job->block, tags, move->nmembers);
	pfree(tags);
	return false;
}

/* Under the locks: the FSM and VM forks, if any, are copied whole. */
bool
tsm_relation_switch_check(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;
	static const ForkNumber locked_forks[] = {FSM_FORKNUM, VISIBILITYMAP_FORKNUM};

	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		SMgrRelation src = tsm_smgropen(m->old_node);

		for (int k = 0; k < lengthof(locked_forks); k++)
		{
			TsmFile    *f;

			if (!smgrexists(src, locked_forks[k]))
				continue;
			f = tsm_fileset_add(&job->files, m->old_node, locked_forks[k],
								TSM_COPY_LOCKED,
								m->relpersistence == RELPERSISTENCE_PERMANENT);
			f->owner = i;
			f->relid = m->relid;
			f->standard_page = false;
		}
	}
	return true;
}

/*
 * tsm_relation_switch_check never says no; for the interface's sake.  A
 * commit, not an abort: that would release the session locks too.
 */
void
tsm_relation_switch_release(TsmJob *job)
{
	CommitTransactionCommand();
}

/*
 * Runs at XACT_EVENT_COMMIT of the switch transaction, that is after its
 * commit record is written: from then on the new files are the relation's
 * storage, and nothing may drop them, whatever happens next.  Also ends
 * switch_ms: the locks go a moment later.
 */
static TimestampTz switch_committed_at;

static void
note_switch_commit(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT)
	{
		((TsmJob *) arg)->switch_committed = true;
		switch_committed_at = GetCurrentTimestamp();
	}
}

/*
 * With the locks held and the new storage complete and synced: point
 * pg_class at the new files and commit.  The old files stay, unused, for
 * relation_move.c to remove after warming.  Always true: nothing outside the
 * locks can hold a relation's switch back.
 */
bool
tsm_relation_switch_commit(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	PushActiveSnapshot(GetTransactionSnapshot());
	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		Relation	rel = relation_open(m->relid, NoLock);
		TsmFile    *f = tsm_fileset_find(&job->files, m->old_node, MAIN_FORKNUM);
		BlockNumber new_nblocks = smgrnblocks(tsm_smgropen(m->new_node), MAIN_FORKNUM);

		if (!TsmRelFileNodeEquals(TsmRelationNode(rel), m->old_node) ||
			new_nblocks != RelationGetNumberOfBlocks(rel) ||
			f->dirty.count != 0)
			elog(ERROR, "pg_tsmove: new storage of \"%s\" does not match the old one "
				 "(%u blocks, old %u, %lld dirty)",
				 RelationGetRelationName(rel), new_nblocks,
				 RelationGetNumberOfBlocks(rel), (long long) f->dirty.count);

		SetRelationTableSpace(rel, job->row.target_spc, TSM_REL(m->new_node));
		InvokeObjectPostAlterHook(RelationRelationId, m->relid, 0);
		tsm_relation_assume_new_storage(rel);
		relation_close(rel, NoLock);
		CommandCounterIncrement();
	}

	tsm_jobrec_set_state(job->row.job_id, TSM_WARMING, NULL);
	PopActiveSnapshot();
	tsm_ctl_debug_pause(&job->ctl, "switching");

	/* switch_ms ends at commit: CommitTransaction releases the locks right after the commit callbacks. */
	RegisterXactCallback(note_switch_commit, job);
	PG_TRY();
	{
		CommitTransactionCommand();
	}
	PG_FINALLY();
	{
		UnregisterXactCallback(note_switch_commit, job);
	}
	PG_END_TRY();
	job->ctl.progress.switch_ms = tsm_ms_between(job->lock_granted, switch_committed_at);
	tsm_ctl_set_state(&job->ctl, TSM_WARMING);
	return true;
}
