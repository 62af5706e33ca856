/*-------------------------------------------------------------------------
 *
 * reconcile.c
 *	  A switch that lets readers on: the buffers written to the old files
 *	  before it, and the pages readers changed in its window reconciled
 *	  after it.
 *
 * Such a switch (a relocation's, under ExclusiveLock: frontend.h) stops
 * every writer, but readers go on reading and, through on-access pruning
 * and (with checksums or wal_log_hints) hint bits, changing pages, with
 * WAL.  Until every process has closed its descriptors of the old files,
 * a process may write a page through one, and read one through one:
 *	- before the rename, every dirty buffer of the set is written to the
 *	  old files: all of them just before the locks are requested
 *	  (tsm_fileset_flush_buffers, one pass over the buffer pool, no lock
 *	  held), then, under the locks, the buffer of each page the switch
 *	  copies (copy.c, fs->flush_source).  Every change a writer made since
 *	  the first is in the WAL, so its page is among those: what a process
 *	  then reads from an old file is what the copy holds, but for what
 *	  readers changed since (and hint bits, and the FSM: hints);
 *	- after the barrier, with the locks still held, each page the WAL
 *	  shows changed since the last copy (the mirror marks it dirty) is
 *	  reconciled (tsm_reconcile_file): under its buffer's exclusive lock,
 *	  the newest of the buffer, the old file's page and the new file's page
 *	  by page LSN is installed in the buffer, and the page is WAL-logged
 *	  whole.  A change written only through an old descriptor comes back;
 *	  crash recovery and standbys, which replayed the window's records
 *	  onto their own copy, converge on the full-page image.
 * A reader can meanwhile read a page from the new file that lacks a
 * change of the window (one written only to the old file): what readers
 * change is pruning and hints, which never change what a query sees, and
 * writers wait until the page is reconciled.
 *
 * Locks: the caller holds the switch's locks (no writer runs) and is in a
 * transaction; each page is reconciled under its buffer's exclusive lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xloginsert.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "storage/smgr.h"

#include "compat.h"
#include "engine/engine.h"

/*
 * Write every dirty shared buffer of the set's files to the files they
 * are read from (all forks), in one pass over the buffer pool.
 */
void
tsm_fileset_flush_buffers(TsmFileSet *fs)
{
	SMgrRelation *rels = palloc(sizeof(SMgrRelation) * Max(1, fs->nfiles));
	TsmRelFileNode *nodes = palloc(sizeof(TsmRelFileNode) * Max(1, fs->nfiles));
	int			n = 0;

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		bool		listed = false;

		if (f->gone)
			continue;
		/* a relfilenode's forks are mostly added one after the other */
		for (int j = n - 1; j >= 0 && j >= n - MAX_FORKNUM - 1 && !listed; j--)
			listed = memcmp(&nodes[j], &f->key.node, sizeof(TsmRelFileNode)) == 0;
		if (listed)
			continue;
		nodes[n] = f->key.node;
		rels[n++] = tsm_smgropen(f->key.node);
	}
	if (n > 0)
		FlushRelationsAllBuffers(rels, n);
	pfree(rels);
	pfree(nodes);
}

/* Keep the copy in page if it is sound and newer than best's. */
static bool
newer_copy(char *page, BlockNumber blkno, XLogRecPtr best_lsn)
{
	return !PageIsNew((Page) page) && tsm_page_verified(page, blkno) &&
		PageGetLSN((Page) page) > best_lsn;
}

/*
 * Reconcile the blocks of f the mirror marked dirty since the last copy
 * (see above).  Returns how many.
 */
int64
tsm_reconcile_file(TsmFileSet *fs, TsmFile *f)
{
	PGAlignedBlock old_page;
	PGAlignedBlock new_page;
	BlockNumber blkno;
	int64		reconciled = 0;

	if (f->gone || fs->ops->read_file == NULL)
		return 0;
	while (tsm_file_take_dirty(fs, f, &blkno))
	{
		Buffer		buf;
		Page		page;
		char	   *best;
		XLogRecPtr	best_lsn;

		if (blkno >= f->copy_cursor)
			continue;			/* beyond a truncation */
		buf = tsm_read_buffer(f->key.node, f->key.fork, blkno,
							  f->key.fork == MAIN_FORKNUM ? RBM_NORMAL : RBM_ZERO_ON_ERROR,
							  NULL, f->permanent);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		best = (char *) page;
		best_lsn = PageIsNew(page) ? InvalidXLogRecPtr : PageGetLSN(page);
		if (fs->ops->read_file(fs, f, blkno, true, old_page.data) &&
			newer_copy(old_page.data, blkno, best_lsn))
		{
			best = old_page.data;
			best_lsn = PageGetLSN((Page) best);
		}
		if (fs->ops->read_file(fs, f, blkno, false, new_page.data) &&
			newer_copy(new_page.data, blkno, best_lsn))
			best = new_page.data;

		START_CRIT_SECTION();
		if (best != (char *) page)
			memcpy(page, best, BLCKSZ);
		MarkBufferDirty(buf);
		if (f->permanent)
			log_newpage_buffer(buf, f->standard_page);
		END_CRIT_SECTION();
		UnlockReleaseBuffer(buf);
		reconciled++;
		if (reconciled % 256 == 0)
			CHECK_FOR_INTERRUPTS();
	}
	return reconciled;
}
