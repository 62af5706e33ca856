/*-------------------------------------------------------------------------
 *
 * copy.c
 *	  The engine's copier: pages of the files of a job, read through shared
 *	  buffers and handed to the front end's sink.
 *
 * Design (DESIGN.md section 2; models: RelationCopyStorageUsingBuffer and
 * CreateAndCopyRelationData in bufmgr.c):
 *	- Pages are read through shared buffers, never from the file, which
 *	  lacks the dirty pages: pin, share content lock, memcpy into a private
 *	  page, unlock.  A share lock excludes every WAL-logged change, so the
 *	  copy holds either all or none of a change, and any change it missed
 *	  has an LSN after the copy, which the mirror (mirror.c) will see.
 *	- The sink (relation_move.c, relocation_files.c) WAL-logs the private
 *	  copy or not, sets its checksum and writes it.  Writes never go through
 *	  the checkpointer's fsync queue: the worker syncs the files itself
 *	  (tsm_fileset_sync), after the bulk copy, before each switch attempt and
 *	  under the switch's locks.
 *	- Each batch of a bulk or catch-up copy starts the kernel's writeback
 *	  of what it wrote, as checkpoint_flush_after does for checkpoints;
 *	  otherwise the page cache collects the whole copy and flushes it in
 *	  one burst, which stalls every commit's WAL fsync.
 *
 * Locks: the caller holds a lock on each file's relation (engine.h's
 * locking rule) and is in a transaction (buffer pins need a resource owner).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/instrument.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "storage/smgr.h"

#include "engine/engine.h"

/* Blocks this backend has read from the kernel into a buffer so far. */
static inline int64
blocks_read_in(void)
{
	return pgBufferUsage.shared_blks_read + pgBufferUsage.local_blks_read;
}

/*
 * Copy one page out of its shared buffer.  Pages of the main fork are read
 * with the job's bulk-read ring, so the copy does not flush the cache;
 * the FSM and VM are zeroed on read errors, as their own readers do.
 * Returns whether the page had to be read in: it was not in shared buffers.
 */
bool
tsm_read_page(TsmFileSet *fs, TsmFile *f, BlockNumber blkno, char *page)
{
	bool		main_fork = (f->key.fork == MAIN_FORKNUM);
	int64		read_before = blocks_read_in();
	Buffer		buf;

	buf = tsm_read_buffer(f->key.node, f->key.fork, blkno,
						  main_fork ? RBM_NORMAL : RBM_ZERO_ON_ERROR,
						  main_fork ? fs->strategy : NULL, f->permanent);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(page, BufferGetPage(buf), BLCKSZ);
	if (fs->flush_source)
		FlushOneBuffer(buf);	/* only if dirty */
	UnlockReleaseBuffer(buf);
	return blocks_read_in() > read_before;
}

/* Copy one block; returns whether it had to be read in (tsm_read_page). */
static bool
copy_block(TsmFileSet *fs, TsmFile *f, BlockNumber blkno, bool extend)
{
	TsmIOBlock	page;			/* the sink may hand it to smgrextend() */
	bool		read_in;

	read_in = tsm_read_page(fs, f, blkno, page.data);
	fs->ops->write(fs, f, blkno, page.data, extend);
	return read_in;
}

static void
ensure_created(TsmFileSet *fs, TsmFile *f)
{
	if (!f->created)
	{
		fs->ops->create(fs, f);
		f->created = true;
	}
}

/*
 * Copy up to max_blocks pending blocks of one file: first the blocks the
 * source grew by since the last look (appended in order), then, with
 * include_dirty, blocks the mirror found changed after their copy.  The
 * dirty bit is cleared before the copy, so a change racing with it marks
 * the block again.  Returns the number of blocks copied.
 *
 * A changed block that has left shared buffers is charged as a scattered
 * read too (job_control.c): the kernel's readahead serves the copy in
 * order, but not these, which cost the device a request each.
 */
int64
tsm_copy_file(TsmFileSet *fs, TsmFile *f, int64 max_blocks, bool include_dirty,
			  bool throttled)
{
	int64		copied = 0;
	BlockNumber blkno;
	BlockNumber lowest = InvalidBlockNumber;
	BlockNumber highest = 0;
	BlockNumber nblocks;

	if (f->gone)
		return 0;
	nblocks = tsm_source_nblocks(f);
	if (nblocks != f->nblocks)
		tsm_file_set_extent(fs, f, nblocks, Min(f->copy_cursor, nblocks));
	ensure_created(fs, f);

	while (copied < max_blocks && f->copy_cursor < f->nblocks)
	{
		blkno = f->copy_cursor;
		copy_block(fs, f, blkno, true);
		tsm_file_set_extent(fs, f, f->nblocks, blkno + 1);
		copied++;
		lowest = Min(lowest, blkno);
		highest = Max(highest, blkno);
		tsm_ctl_charge_page(fs->ctl, throttled, false);
	}
	while (include_dirty && copied < max_blocks &&
		   tsm_file_take_dirty(fs, f, &blkno))
	{
		bool		scattered;

		if (blkno >= f->copy_cursor)
			continue;			/* beyond a truncation since */
		scattered = copy_block(fs, f, blkno, false);
		fs->ctl->progress.blocks_recopied++;
		copied++;
		lowest = Min(lowest, blkno);
		highest = Max(highest, blkno);
		tsm_ctl_charge_page(fs->ctl, throttled, scattered);
	}

	/* Not under the switch's locks, where it would only add latency. */
	if (throttled && copied > 0 && fs->ops->writeback)
		fs->ops->writeback(fs, f, lowest, highest - lowest + 1);
	return copied;
}

/*
 * Copy a file whole, under the switch's locks: nothing changes it
 * meanwhile, and its changes could not have been followed.  The copy ends
 * as long as the source, even where the source shrank.
 */
void
tsm_copy_file_whole(TsmFileSet *fs, TsmFile *f)
{
	BlockNumber nblocks;
	BlockNumber written = f->copy_cursor;

	if (f->gone)
		return;
	nblocks = tsm_source_nblocks(f);
	ensure_created(fs, f);
	for (BlockNumber blkno = 0; blkno < nblocks; blkno++)
	{
		copy_block(fs, f, blkno, blkno >= written);
		fs->ctl->progress.blocks_under_lock++;
		tsm_ctl_charge_page(fs->ctl, false, false);
		if (blkno % 256 == 255)
			CHECK_FOR_INTERRUPTS();
	}
	if (written > nblocks)
		fs->ops->truncate(fs, f, nblocks);
	tsm_file_set_extent(fs, f, nblocks, nblocks);
}

/*
 * fsync the destination of every live file, creating those that do not
 * exist yet: a file with no block (an unlogged heap's init fork, an empty
 * table) must exist at the destination too.
 */
void
tsm_fileset_sync(TsmFileSet *fs)
{
	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];

		if (f->gone)
			continue;
		ensure_created(fs, f);
		fs->ops->sync(fs, f);
	}
}
