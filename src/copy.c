/*-------------------------------------------------------------------------
 *
 * copy.c
 *	  The new storage of a move: creating it, copying pages into it through
 *	  shared buffers, and dropping it when a move fails.
 *
 * Design (DESIGN.md section 2; models: RelationCopyStorageUsingBuffer and
 * RelationCopyStorage):
 *	- Pages are read through shared buffers, never from the old file, which
 *	  lacks the dirty pages: pin, share content lock, memcpy into a private
 *	  page, unlock.  A share lock excludes every WAL-logged change, so the
 *	  copy holds either all or none of a change, and any change it missed
 *	  has an LSN after the copy, which the mirror (mirror.c) will see.
 *	- The private copy is WAL-logged as a full page image of the new
 *	  relfilenode (standbys and crash recovery rebuild the file from it; it
 *	  also sets the page LSN), then checksummed, then written with smgr.
 *	- Writes never go through the checkpointer's fsync queue: a checkpoint
 *	  that completes between a page's WAL record and its write would not
 *	  sync it, and crash recovery would not replay it.  The worker fsyncs
 *	  the new files itself (tsm_sync_new_storage): the bulk copy outside
 *	  any lock, then every fork again under the switch's lock, before the
 *	  switch commits (RelationCopyStorage's rule).
 *	- The new storage is created without a pending delete: it must survive
 *	  the transaction that created it.  It is dropped by RelationDropStorage
 *	  in a transaction with an XID, so the commit record unlinks it on
 *	  standbys too.  Never unlink() by hand.  A relfilenode that pg_class
 *	  maps is never dropped, whoever asks: once the switch has committed,
 *	  the new files are the relation's storage.
 *
 * Locks: the caller is in a transaction and holds the job's session lock
 * (or the switch's AccessExclusiveLock) on every member.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xloginsert.h"
#include "catalog/storage.h"
#include "miscadmin.h"
#include "catalog/storage_xlog.h"
#include "access/xlogutils.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "utils/rel.h"
#include "utils/relfilenodemap.h"

#include "move.h"

/*
 * Create the main fork of every member's new relfilenode.  The caller's
 * transaction may commit or abort: the files stay until tsm_drop_storage().
 */
void
tsm_create_new_storage(TsmJob *job)
{
	for (int i = 0; i < job->nmembers; i++)
	{
		SMgrRelation srel = RelationCreateStorage(job->members[i].new_node,
												  RELPERSISTENCE_PERMANENT,
												  false);

		smgrclose(srel);
	}
	job->storage_created = true;
}

/*
 * Schedule the removal of a relfilenode's files (every fork) at commit of
 * the current transaction, which must get an XID before it commits.  Does
 * nothing, with a log message, if a relation of pg_class uses the
 * relfilenode: a switch that committed made it live storage.
 */
void
tsm_drop_storage(TsmRelFileNode node)
{
	Relation	fake;
	Oid			owner_relid;

	owner_relid = RelidByRelfilenode(TSM_SPC(node) == MyDatabaseTableSpace ?
									 InvalidOid : TSM_SPC(node),
									 TSM_REL(node));
	if (OidIsValid(owner_relid))
	{
		ereport(LOG,
				(errmsg("pg_tsmove: relfilenode %u is the storage of relation %u; not dropping it",
						TSM_REL(node), owner_relid)));
		return;
	}
	fake = CreateFakeRelcacheEntry(node);

	RelationDropStorage(fake);
	FreeFakeRelcacheEntry(fake);
}

/*
 * Copy one page of rel into the member's new storage.  extend says the
 * block is the new fork's next block; otherwise it overwrites an earlier
 * copy.  Extra forks (FSM, VM) are zeroed on read errors, as their own
 * readers do, and logged without assuming a standard page layout.
 */
static void
tsm_copy_block(TsmJob *job, TsmMember *m, Relation rel, ForkNumber fork,
			   BlockNumber blkno, bool extend)
{
	PGAlignedBlock page;
	Buffer		buf;
	bool		main_fork = (fork == MAIN_FORKNUM);

	buf = ReadBufferExtended(rel, fork, blkno,
							 main_fork ? RBM_NORMAL : RBM_ZERO_ON_ERROR,
							 main_fork ? job->strategy : NULL);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(page.data, BufferGetPage(buf), BLCKSZ);
	UnlockReleaseBuffer(buf);

	log_newpage(&m->new_node, fork, blkno, page.data,
				main_fork && m->standard_pages);
	PageSetChecksumInplace(page.data, blkno);
	tsm_smgr_put_block(tsm_smgropen(m->new_node), fork, blkno, page.data,
					   extend, true);
}

/*
 * Copy up to max_blocks pending blocks of one member's main fork: first the
 * blocks the relation grew by since the last look (appended in order), then,
 * with include_dirty, blocks the mirror found changed after their copy.
 * The dirty bit is cleared before the copy, so a change racing with it
 * marks the block again.  Returns the number of blocks copied.
 */
int64
tsm_copy_pending(TsmJob *job, TsmMember *m, int64 max_blocks,
				 bool include_dirty, bool throttled)
{
	Relation	rel = relation_open(m->relid, NoLock);
	int64		copied = 0;
	BlockNumber blkno;
	BlockNumber lowest = InvalidBlockNumber;
	BlockNumber highest = 0;

	m->nblocks = RelationGetNumberOfBlocks(rel);
	while (copied < max_blocks && m->copy_cursor < m->nblocks)
	{
		blkno = m->copy_cursor;
		tsm_copy_block(job, m, rel, MAIN_FORKNUM, blkno, true);
		m->copy_cursor++;
		copied++;
		lowest = Min(lowest, blkno);
		highest = Max(highest, blkno);
		tsm_account_write(job, throttled);
	}
	while (include_dirty && copied < max_blocks &&
		   tsm_dirty_take_next(&m->dirty, &blkno))
	{
		tsm_copy_block(job, m, rel, MAIN_FORKNUM, blkno, false);
		job->blocks_recopied++;
		copied++;
		lowest = Min(lowest, blkno);
		highest = Max(highest, blkno);
		tsm_account_write(job, throttled);
	}
	relation_close(rel, NoLock);

	/*
	 * Start the kernel's writeback of what this batch wrote, as
	 * checkpoint_flush_after does for checkpoints: otherwise the page cache
	 * collects the whole copy and flushes it in one burst, which stalls every
	 * commit's WAL fsync.  Not under the switch's lock, where it would only
	 * add latency.
	 */
	if (throttled && copied > 0)
		smgrwriteback(tsm_smgropen(m->new_node), MAIN_FORKNUM, lowest,
					  highest - lowest + 1);
	return copied;
}

/*
 * Copy the free space map and visibility map forks, whole.  Runs under the
 * switch's AccessExclusiveLock: neither fork can be mirrored (the FSM is
 * never WAL-logged, VM bit clears carry no block reference of the VM).
 */
void
tsm_copy_extra_forks(TsmJob *job)
{
	static const ForkNumber extra_forks[] = {FSM_FORKNUM, VISIBILITYMAP_FORKNUM};

	for (int i = 0; i < job->nmembers; i++)
	{
		TsmMember  *m = &job->members[i];
		Relation	rel = relation_open(m->relid, NoLock);
		SMgrRelation dst = tsm_smgropen(m->new_node);

		for (int f = 0; f < lengthof(extra_forks); f++)
		{
			ForkNumber	fork = extra_forks[f];
			BlockNumber nblocks;

			if (!smgrexists(RelationGetSmgr(rel), fork))
				continue;
			smgrcreate(dst, fork, false);
			log_smgrcreate(&m->new_node, fork);
			nblocks = smgrnblocks(RelationGetSmgr(rel), fork);
			for (BlockNumber blkno = 0; blkno < nblocks; blkno++)
			{
				tsm_copy_block(job, m, rel, fork, blkno, true);
				tsm_account_write(job, false);
			}
		}
		relation_close(rel, NoLock);
	}
}

/*
 * fsync every fork of every member's new storage.  Called after the bulk
 * copy and before each switch attempt with no lock held (so that little is
 * left to sync), and under the switch's lock before it commits.
 */
void
tsm_sync_new_storage(TsmJob *job)
{
	for (int i = 0; i < job->nmembers; i++)
	{
		SMgrRelation dst = tsm_smgropen(job->members[i].new_node);

		for (ForkNumber fork = 0; fork <= MAX_FORKNUM; fork++)
			if (smgrexists(dst, fork))
				smgrimmedsync(dst, fork);
	}
}
