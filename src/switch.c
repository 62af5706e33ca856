/*-------------------------------------------------------------------------
 *
 * switch.c
 *	  The switch, the only moment DML waits: the relation starts using its
 *	  new files.  And warming: the blocks that were cached before the switch
 *	  are read back in afterwards.
 *
 * One switch attempt is one transaction:
 *	1. AccessExclusiveLock on every member (relation, TOAST table, TOAST
 *	   index, in that order, as ALTER TABLE does) with lock_timeout set to
 *	   pg_tsmove.switch_lock_timeout.  A queued exclusive request blocks all
 *	   later queries of the relation, so a request is never left queued
 *	   longer than that; on timeout the attempt is abandoned and the worker
 *	   backs off, keeps mirroring, and tries again.
 *	2. Under the lock nothing can change the pages any more: flush the WAL,
 *	   read it to the end, re-copy the last dirty blocks and any blocks the
 *	   relation grew by, copy the FSM and VM forks whole, fsync every fork
 *	   of the new storage.
 *	3. SetRelationTableSpace() points pg_class at the new relfilenode (it
 *	   handles the catalog's locking), RelationAssumeNewRelfilenode() as
 *	   core's SET TABLESPACE does, RelationDropStorage() of the old files so
 *	   that the commit record unlinks them, here and on standbys.
 *	4. The job row says 'warming' in the same transaction, so after a crash
 *	   the row tells whether the switch committed.  In the worker, an xact
 *	   callback sets job->switch_committed as soon as the commit record is
 *	   written, and from then on the abort path keeps the new files.
 *
 * Locks: called with the job's session lock held and no transaction open.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/catalog.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_class.h"
#include "catalog/storage.h"
#include "commands/tablecmds.h"
#include "miscadmin.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "jobrecord.h"
#include "move.h"

/*
 * Remember which blocks of each member's old main fork are in shared
 * buffers, to read the same blocks of the new file after the switch (the
 * scan pg_buffercache does).  Runs before the lock: a slightly stale list
 * only warms a little more or less.
 */
static void
tsm_collect_cached_blocks(TsmJob *job)
{
	for (int i = 0; i < job->nmembers; i++)
	{
		TsmMember  *m = &job->members[i];

		if (m->warm_blocks)
			pfree(m->warm_blocks);
		m->warm_blocks = MemoryContextAlloc(job->cxt,
											sizeof(BlockNumber) * Max(1, Min(NBuffers, m->nblocks)));
		m->nwarm = 0;
	}

	for (int b = 0; b < NBuffers; b++)
	{
		BufferDesc *desc = GetBufferDescriptor(b);
		TsmRelFileNode node;
		ForkNumber	fork;
		BlockNumber blkno;
		uint32		state = LockBufHdr(desc);

		tsm_buffer_tag(desc, &node, &fork, &blkno);
		UnlockBufHdr(desc, state);
		if (!(state & BM_VALID) || fork != MAIN_FORKNUM)
			continue;
		for (int i = 0; i < job->nmembers; i++)
		{
			TsmMember  *m = &job->members[i];

			if (TsmRelFileNodeEquals(node, m->old_node) &&
				m->nwarm < Max(1, Min(NBuffers, m->nblocks)))
				m->warm_blocks[m->nwarm++] = blkno;
		}
	}
}

/*
 * Take AccessExclusiveLock on every member, waiting at most
 * switch_lock_timeout for each.  Returns false, with the transaction
 * aborted and a new one started, if a lock was not granted in time.
 *
 * lock_timeout is set for this transaction only (SET LOCAL), so no error
 * can leave it set for the rest of the worker's life, and back to 0 once
 * the locks are held: the switch's own catalog updates must not time out.
 */
static bool
tsm_lock_members(TsmJob *job)
{
	MemoryContext cxt = CurrentMemoryContext;
	char		timeout[32];
	volatile bool locked = true;

	snprintf(timeout, sizeof(timeout), "%d", tsm_switch_lock_timeout_ms);
	(void) set_config_option("lock_timeout", timeout, PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	PG_TRY();
	{
		for (int i = 0; i < job->nmembers; i++)
			LockRelationOid(job->members[i].relid, AccessExclusiveLock);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		FreeErrorData(edata);
		AbortCurrentTransaction();
		StartTransactionCommand();
		locked = false;
	}
	PG_END_TRY();
	if (locked)
		(void) set_config_option("lock_timeout", "0", PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
	return locked;
}

/*
 * Runs at XACT_EVENT_COMMIT of the switch transaction, that is after its
 * commit record is written: from then on the new files are the relation's
 * storage, and nothing may drop them, whatever happens next.  Also ends
 * switch_ms: the locks go a moment later.
 */
static TimestampTz switch_committed_at;

static void
tsm_note_switch_commit(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT)
	{
		((TsmJob *) arg)->switch_committed = true;
		switch_committed_at = GetCurrentTimestamp();
	}
}

/*
 * Try to switch the job's relation to its new files.  Returns true if the
 * switch committed, false if the exclusive lock was not granted in time.
 */
bool
tsm_try_switch(TsmJob *job)
{
	TimestampTz lock_requested;
	TimestampTz lock_granted;
	bool		locked;

	tsm_collect_cached_blocks(job);
	job->switch_attempts++;

	StartTransactionCommand();
	lock_requested = GetCurrentTimestamp();
	locked = tsm_lock_members(job);
	lock_granted = GetCurrentTimestamp();
	job->lock_wait_ms += (double) (lock_granted - lock_requested) / 1000.0;
	if (!locked)
	{
		CommitTransactionCommand();
		return false;
	}
	tsm_set_state(job, TSM_SWITCHING);

	/* Nothing changes the pages now; make sure the reader sees everything. */
	XLogFlush(GetXLogInsertRecPtr());
	tsm_mirror_drain(job);
	for (int i = 0; i < job->nmembers; i++)
		tsm_copy_pending(job, &job->members[i], PG_INT64_MAX, true, false);
	tsm_copy_extra_forks(job);
	tsm_sync_new_storage(job);

	PushActiveSnapshot(GetTransactionSnapshot());
	for (int i = 0; i < job->nmembers; i++)
	{
		TsmMember  *m = &job->members[i];
		Relation	rel = relation_open(m->relid, NoLock);
		BlockNumber new_nblocks = smgrnblocks(tsm_smgropen(m->new_node), MAIN_FORKNUM);

		if (!TsmRelFileNodeEquals(TsmRelationNode(rel), m->old_node) ||
			new_nblocks != RelationGetNumberOfBlocks(rel) ||
			m->dirty.count != 0)
			elog(ERROR, "pg_tsmove: new storage of \"%s\" does not match the old one "
				 "(%u blocks, old %u, %lld dirty)",
				 RelationGetRelationName(rel), new_nblocks,
				 RelationGetNumberOfBlocks(rel), (long long) m->dirty.count);

		RelationDropStorage(rel);
		SetRelationTableSpace(rel, job->target_spc, TSM_REL(m->new_node));
		InvokeObjectPostAlterHook(RelationRelationId, m->relid, 0);
		RelationAssumeNewRelfilenode(rel);
		relation_close(rel, NoLock);
		CommandCounterIncrement();
	}

	tsm_jobrec_set_state(job->job_id, TSM_WARMING, NULL);
	PopActiveSnapshot();
	tsm_debug_pause(job, "switching");

	/*
	 * switch_ms ends at commit: CommitTransaction releases the locks right
	 * after the commit callbacks, and only then unlinks the old files,
	 * which can take long for a big relation but blocks nobody.
	 */
	RegisterXactCallback(tsm_note_switch_commit, job);
	PG_TRY();
	{
		CommitTransactionCommand();
	}
	PG_FINALLY();
	{
		UnregisterXactCallback(tsm_note_switch_commit, job);
	}
	PG_END_TRY();
	job->switch_ms = (double) (switch_committed_at - lock_granted) / 1000.0;
	tsm_set_state(job, TSM_WARMING);
	return true;
}

/*
 * warming: read into shared buffers the blocks of the new files that were
 * cached from the old ones, so the relation stays as hot as it was.  Best
 * effort: an error here does not undo a committed switch.
 */
void
tsm_warm_new_storage(TsmJob *job)
{
	StartTransactionCommand();
	for (int i = 0; i < job->nmembers; i++)
	{
		TsmMember  *m = &job->members[i];
		Relation	rel = try_relation_open(m->relid, AccessShareLock);
		BlockNumber nblocks;

		if (rel == NULL)
			continue;
		nblocks = RelationGetNumberOfBlocks(rel);
		for (int b = 0; b < m->nwarm; b++)
		{
			if (m->warm_blocks[b] < nblocks)
				ReleaseBuffer(ReadBufferExtended(rel, MAIN_FORKNUM, m->warm_blocks[b],
												 RBM_NORMAL, NULL));
			if (b % 256 == 0)
				tsm_check_for_cancel(job);
		}
		relation_close(rel, AccessShareLock);
	}
	CommitTransactionCommand();
}
