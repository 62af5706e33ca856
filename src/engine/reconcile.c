/*-------------------------------------------------------------------------
 *
 * reconcile.c
 *	  A switch that lets readers on: the buffers written to the old files
 *	  before it, and the pages readers changed in its window reconciled
 *	  after it.
 *
 * Such a switch (a relocation's, under ExclusiveLock: frontend.h) stops
 * every writer, but readers go on reading and, through on-access pruning,
 * (from 19) setting visibility-map bits with it, and (with checksums or
 * wal_log_hints) hint bits, changing pages, with WAL.  Until every process
 * has closed its descriptors of the old files, a process may write a page
 * through one, and read one through one:
 *	- before the rename, every dirty buffer of the set is written to the
 *	  old files: all of them just before the locks are requested
 *	  (tsm_fileset_flush_buffers, one pass over the buffer pool, no lock
 *	  held), then, under the locks, the buffer of each page the switch
 *	  copies (copy.c, fs->flush_source).  Every change a writer made since
 *	  the first is in the WAL, so its page is among those: the old and the
 *	  new files then hold every writer's change, and differ only by what
 *	  readers change afterwards (and hint bits, and the FSM: hints);
 *	- so a page a process reads back, through either, may lack only what
 *	  readers changed in the window, which never alters what a query sees.
 *	  But the WAL has their records: the primary's page and the page that a
 *	  standby or crash recovery rebuilds from the WAL may then differ, and a
 *	  later record for the primary's page would not fit the other;
 *	- after the barrier, with the locks still held, each page the WAL shows
 *	  changed since the last copy (the mirror marks it dirty) is WAL-logged
 *	  whole as the primary has it (tsm_reconcile_file), under its buffer's
 *	  exclusive lock: standbys and crash recovery converge on it.  Its
 *	  contents are never replaced on the primary: a process that holds a pin
 *	  may keep pointers into the page, so only a cleanup lock could allow
 *	  that, and none is needed: the page the primary has is a valid one;
 *	- but a standby may have the other line: a page the primary read back
 *	  unpruned, pruned there.  Its queries hold pins too, so a heap page
 *	  that a pruning changed in the window (the mirror notes those:
 *	  fs->moved, from the drain under the locks on) is logged in a record
 *	  whose replay restores the image under a cleanup lock (compat.h,
 *	  tsm_log_heap_page_for_cleanup_replay: a pruning record that prunes
 *	  nothing).  Only readers' pruning moves bytes within a page, and only
 *	  in heap pages; every other page (a heap page whose records only set
 *	  flags or visibility bits, on 19; an index page, whose readers set only
 *	  hint flags) is the same page byte for byte on both lines but for
 *	  those, and is logged as a plain full-page image;
 *	- with data checksums or wal_log_hints, a reader's hint bit on such a
 *	  read-back page is itself logged whole, in the window, as a plain
 *	  image a standby restores under its queries' pins: nothing can order
 *	  it after the reconciliation, so the switch does not admit readers
 *	  there (worker.c takes AccessExclusiveLock);
 *	- a heap page so logged that is not all-visible has its visibility-map
 *	  bits cleared (and the map page logged whole): the map page and the
 *	  heap page may come from two different lines of reader changes, and a
 *	  set bit on a page not marked all-visible would survive the next write
 *	  of the page (which clears the bit only when the page says so).
 * Interrupts are held while the window is reconciled: a cancel there would
 * leave the primary's pages and the WAL's apart.  What a crash between the
 * rename and the end of the reconciliation leaves: README, Limits.
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/visibilitymapdefs.h"
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

/*
 * Heap block blkno's page is not all-visible: clear its bits in the
 * visibility map, if set, and log the map page whole.
 */
static void
clear_visibility_bits(TsmFileSet *fs, TsmFile *heap, BlockNumber blkno)
{
	TsmFile    *vm = tsm_fileset_find(fs, heap->key.node, VISIBILITYMAP_FORKNUM);
	BlockNumber map_block = blkno / TSM_HEAPBLOCKS_PER_VM_PAGE;
	uint32		map_byte = (blkno % TSM_HEAPBLOCKS_PER_VM_PAGE) / TSM_HEAPBLOCKS_PER_VM_BYTE;
	uint8		map_shift = (blkno % TSM_HEAPBLOCKS_PER_VM_BYTE) * TSM_VM_BITS_PER_HEAPBLOCK;
	Buffer		buf;
	uint8	   *map;

	if (vm == NULL || vm->gone || map_block >= tsm_source_nblocks(vm))
		return;
	buf = tsm_read_buffer(vm->key.node, VISIBILITYMAP_FORKNUM, map_block,
						  RBM_ZERO_ON_ERROR, NULL, vm->permanent);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	map = (uint8 *) PageGetContents(BufferGetPage(buf));
	if (map[map_byte] & (VISIBILITYMAP_VALID_BITS << map_shift))
	{
		START_CRIT_SECTION();
		map[map_byte] &= ~(VISIBILITYMAP_VALID_BITS << map_shift);
		MarkBufferDirty(buf);
		if (vm->permanent)
			log_newpage_buffer(buf, false);
		END_CRIT_SECTION();
	}
	UnlockReleaseBuffer(buf);
}

/*
 * Log whole, as the primary has it, each block of f the mirror marked
 * dirty since the last copy (see above).  Returns how many.
 */
int64
tsm_reconcile_file(TsmFileSet *fs, TsmFile *f)
{
	BlockNumber blkno;
	int64		reconciled = 0;

	if (f->gone)
		return 0;
	while (tsm_file_take_dirty(fs, f, &blkno))
	{
		Buffer		buf;
		Page		page;
		bool		is_heap;
		bool		heap_not_all_visible;

		if (blkno >= f->copy_cursor)
			continue;			/* beyond a truncation */
		buf = tsm_read_buffer(f->key.node, f->key.fork, blkno,
							  f->key.fork == MAIN_FORKNUM ? RBM_NORMAL : RBM_ZERO_ON_ERROR,
							  NULL, f->permanent);
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		page = BufferGetPage(buf);
		/* a heap page: a main fork's page with no special space */
		is_heap = f->key.fork == MAIN_FORKNUM && !PageIsNew(page) &&
			PageGetSpecialSize(page) == 0;
		START_CRIT_SECTION();
		MarkBufferDirty(buf);
		if (f->permanent && is_heap && tsm_file_was_moved(fs, f, blkno))
			tsm_log_heap_page_for_cleanup_replay(buf);
		else if (f->permanent)
		{
			/*
			 * As a non-standard page: the hole between pd_lower and pd_upper
			 * is data on some (a BRIN revmap page), and these are few.
			 */
			log_newpage_buffer(buf, false);
		}
		END_CRIT_SECTION();
		heap_not_all_visible = is_heap && !PageIsAllVisible(page);
		UnlockReleaseBuffer(buf);
		if (heap_not_all_visible)
			clear_visibility_bits(fs, f, blkno);
		reconciled++;
	}
	return reconciled;
}
