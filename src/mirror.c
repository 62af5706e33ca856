/*-------------------------------------------------------------------------
 *
 * mirror.c
 *	  Dual-write, driven by the WAL: every change to a page that was already
 *	  copied makes that page dirty, to be copied again before the switch.
 *
 * PostgreSQL has no storage-manager hook for an extension, but every change
 * of a permanent relation's page is WAL-logged with a block reference.  The
 * worker reads the WAL from start_lsn (taken before the first page is
 * copied) with the local page reader pg_walinspect uses, and for every
 * block reference naming a member's old relfilenode, main fork, marks the
 * block dirty if it is behind that member's copy cursor.  Blocks ahead of
 * the cursor will be copied anyway.  The new relfilenode's own page images
 * never match.  An XLOG_SMGR_TRUNCATE of an old relfilenode fails the move.
 *
 * Why nothing is missed: a page is changed under an exclusive buffer lock,
 * and its WAL record is inserted before that lock is released; the copy
 * holds a share lock.  So a change the copy did not contain has a record
 * starting after the copy finished, and that record is read later.
 *
 * WAL retention: a temporary physical replication slot, created before
 * start_lsn is taken, holds the WAL the reader has yet to read; the reader
 * advances it.  If max_slot_wal_keep_size makes the checkpointer invalidate
 * it, the checkpointer signals this process and the move fails.
 *
 * Only the reader reads the dirty sets; no shared state, no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "catalog/storage_xlog.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "replication/slot.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "move.h"

/* How often the slot's restart_lsn follows the reader. */
#define TSM_SLOT_ADVANCE_MS 1000

/* ---- dirty block sets ---- */

static void
tsm_dirty_add(TsmDirtySet *set, BlockNumber blkno)
{
	uint32		word = blkno / 64;
	uint64		bit = UINT64CONST(1) << (blkno % 64);

	if (word >= set->nwords)
	{
		uint32		nwords = Max(word + 1, set->nwords * 2);

		if (set->words == NULL)
			set->words = MemoryContextAllocZero(TopMemoryContext,
												nwords * sizeof(uint64));
		else
		{
			set->words = repalloc(set->words, nwords * sizeof(uint64));
			memset(set->words + set->nwords, 0,
				   (nwords - set->nwords) * sizeof(uint64));
		}
		set->nwords = nwords;
	}
	if ((set->words[word] & bit) == 0)
	{
		set->words[word] |= bit;
		set->count++;
	}
}

/* Remove the lowest dirty block from the set; false if it is empty. */
bool
tsm_dirty_take_next(TsmDirtySet *set, BlockNumber *blkno)
{
	if (set->count == 0)
		return false;
	for (uint32 word = 0; word < set->nwords; word++)
	{
		if (set->words[word] != 0)
		{
			int			bit = pg_rightmost_one_pos64(set->words[word]);

			set->words[word] &= ~(UINT64CONST(1) << bit);
			set->count--;
			*blkno = word * 64 + bit;
			return true;
		}
	}
	elog(ERROR, "pg_tsmove dirty set count is %lld but no bit is set",
		 (long long) set->count);
	return false;
}

static void
tsm_dirty_free(TsmDirtySet *set)
{
	if (set->words)
		pfree(set->words);
	memset(set, 0, sizeof(*set));
}

/* ---- the WAL reader ---- */

/* Apply one decoded record to the dirty sets. */
static void
tsm_mirror_record(TsmJob *job, XLogReaderState *reader)
{
	if (XLogRecGetRmid(reader) == RM_SMGR_ID &&
		(XLogRecGetInfo(reader) & ~XLR_INFO_MASK) == XLOG_SMGR_TRUNCATE)
	{
		xl_smgr_truncate *xlrec = (xl_smgr_truncate *) XLogRecGetData(reader);

		for (int i = 0; i < job->nmembers; i++)
			if (TsmRelFileNodeEquals(xlrec->rnode, job->members[i].old_node))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("relation \"%s\" was truncated during its move",
								job->relname),
						 errhint("Submit the move again.")));
	}

	for (int block_id = 0; block_id <= XLogRecMaxBlockId(reader); block_id++)
	{
		TsmRelFileNode node;
		ForkNumber	fork;
		BlockNumber blkno;

		if (!tsm_record_block_tag(reader, block_id, &node, &fork, &blkno))
			continue;
		if (fork != MAIN_FORKNUM)
			continue;
		for (int i = 0; i < job->nmembers; i++)
		{
			TsmMember  *m = &job->members[i];

			if (TsmRelFileNodeEquals(node, m->old_node) && blkno < m->copy_cursor)
				tsm_dirty_add(&m->dirty, blkno);
		}
	}
}

/* Let the slot release WAL the reader has consumed. */
static void
tsm_mirror_advance_slot(TsmJob *job)
{
	ReplicationSlot *slot = MyReplicationSlot;
	XLogRecPtr	keep_from = job->mirror.next_lsn;
	TimestampTz now = GetCurrentTimestamp();
	bool		invalidated;

	if (slot == NULL || XLogRecPtrIsInvalid(keep_from) ||
		!TimestampDifferenceExceeds(job->mirror.last_slot_advance, now,
									TSM_SLOT_ADVANCE_MS))
		return;
	job->mirror.last_slot_advance = now;

	SpinLockAcquire(&slot->mutex);
	invalidated = tsm_slot_invalidated(slot);
	if (!invalidated && slot->data.restart_lsn < keep_from)
		slot->data.restart_lsn = keep_from;
	SpinLockRelease(&slot->mutex);
	if (invalidated)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the WAL needed to mirror the move of \"%s\" was removed",
						job->relname),
				 errhint("Raise max_slot_wal_keep_size, or give the move a higher rate.")));
	ReplicationSlotsComputeRequiredLSN();
}

/*
 * Create the slot, reserve WAL, and take start_lsn: every change from here
 * on is seen.  Must run before the first page is copied.
 */
void
tsm_mirror_start(TsmJob *job)
{
	char		slot_name[NAMEDATALEN];
	MemoryContext oldcxt = MemoryContextSwitchTo(job->cxt);

	CheckSlotRequirements();
	snprintf(slot_name, sizeof(slot_name), "pg_tsmove_%u_%lld",
			 MyDatabaseId, (long long) job->job_id);
	tsm_create_temporary_slot(slot_name);
	job->mirror.slot_created = true;
	ReplicationSlotReserveWal();
	ReplicationSlotsComputeRequiredLSN();

	job->mirror.start_lsn = GetXLogInsertRecPtr();
	job->mirror.next_lsn = InvalidXLogRecPtr;
	job->mirror.last_slot_advance = GetCurrentTimestamp();
	job->mirror.reader =
		XLogReaderAllocate(wal_segment_size, NULL,
						   XL_ROUTINE(.page_read = &read_local_xlog_page_no_wait,
									  .segment_open = &wal_segment_open,
									  .segment_close = &wal_segment_close),
						   palloc0(sizeof(ReadLocalXLogPageNoWaitPrivate)));
	if (job->mirror.reader == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while allocating a WAL reading processor.")));
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Read all WAL flushed so far and mark the blocks it changed.  A record
 * not yet completely flushed is read on the next call.
 */
void
tsm_mirror_drain(TsmJob *job)
{
	XLogReaderState *reader = job->mirror.reader;
	ReadLocalXLogPageNoWaitPrivate *private = reader->private_data;
	long		nrecords = 0;

	/* the reader grows its buffers lazily: keep them out of transactions */
	MemoryContext oldcxt = MemoryContextSwitchTo(job->cxt);

	private->end_of_wal = false;
	if (XLogRecPtrIsInvalid(job->mirror.next_lsn))
	{
		/* start_lsn need not be a record boundary: find the first record */
		XLogRecPtr	first = XLogFindNextRecord(reader, job->mirror.start_lsn);

		if (XLogRecPtrIsInvalid(first))
		{
			/* no complete record after start_lsn yet */
			MemoryContextSwitchTo(oldcxt);
			return;
		}
		job->mirror.next_lsn = first;
	}
	XLogBeginRead(reader, job->mirror.next_lsn);
	private->end_of_wal = false;

	for (;;)
	{
		char	   *errormsg = NULL;
		XLogRecord *record = XLogReadRecord(reader, &errormsg);

		if (record == NULL)
		{
			if (private->end_of_wal)
				break;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("pg_tsmove could not read WAL at %X/%X: %s",
							LSN_FORMAT_ARGS(reader->EndRecPtr),
							errormsg ? errormsg : "unknown error")));
		}
		tsm_mirror_record(job, reader);
		job->mirror.next_lsn = reader->EndRecPtr;
		if (++nrecords % 4096 == 0)
			CHECK_FOR_INTERRUPTS();
	}
	MemoryContextSwitchTo(oldcxt);
	tsm_mirror_advance_slot(job);
}

/* Drop the slot and the reader; safe to call twice and after errors. */
void
tsm_mirror_stop(TsmJob *job)
{
	if (job->mirror.reader)
	{
		XLogReaderFree(job->mirror.reader);
		job->mirror.reader = NULL;
	}
	if (job->mirror.slot_created)
	{
		if (MyReplicationSlot != NULL)
			ReplicationSlotRelease();
		ReplicationSlotCleanup();
		job->mirror.slot_created = false;
	}
	for (int i = 0; i < job->nmembers; i++)
		tsm_dirty_free(&job->members[i].dirty);
}
