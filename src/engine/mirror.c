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
 * block reference naming a file of the job's set marks the block dirty if
 * it is behind that file's copy cursor.  Blocks ahead of the cursor will be
 * copied anyway.  Pages the worker writes itself (a relation move logs them
 * for the new relfilenode) name no file of the set.
 *
 * Why nothing is missed: a page is changed under an exclusive buffer lock,
 * and its WAL record is inserted before that lock is released; the copy
 * holds a share lock.  So a change the copy did not contain has a record
 * starting after the copy finished, and that record is read later.
 *
 * A relation move follows its own files only: a truncation truncates the
 * copy (its session lock keeps VACUUM's truncation away while it runs, but
 * a move resumed after a restart may find one in the WAL it reads again),
 * and a commit that drops one of them fails the job (no command drops
 * a relation without AccessExclusiveLock, which the job's lock excludes;
 * this is the check that it stays so).  A relocation follows
 * the whole tablespace (follow_tablespace):
 *	- a file it has not seen (XLOG_SMGR_CREATE, or a block reference) is
 *	  offered to the front end, which adds it;
 *	- XLOG_SMGR_TRUNCATE truncates the copies (the FSM and VM are copied
 *	  again whole: their new length is computed, not logged);
 *	- commit and abort records that drop relfilenodes drop the copies;
 *	- the visibility map bits a heap record clears carry no block reference
 *	  of the VM page, so any heap record on block b dirties VM block
 *	  b / TSM_HEAPBLOCKS_PER_VM_PAGE;
 *	- CREATE/DROP DATABASE and DROP TABLESPACE records that name the
 *	  tablespace end the job (foreign_change).
 *
 * WAL retention: a physical replication slot, created before start_lsn is
 * taken, holds the WAL the reader has yet to read.  A temporary slot (a
 * relocation) follows the reader.  A persistent slot (a relation move,
 * which can resume after a restart: resume.c) stays at the last resume
 * point, where the job would read the WAL again from, and is dropped when
 * the job ends.  If the slot keeps more than pg_tsmove.max_retained_wal, or
 * max_slot_wal_keep_size makes the checkpointer invalidate it, the move
 * fails.

 * Only the worker reads the dirty sets; no shared state, no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlogrecovery.h"

#include "access/rmgr.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "catalog/storage_xlog.h"
#include "commands/dbcommands_xlog.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "engine/engine.h"

/* How often the slot's restart_lsn follows the reader. */
#define TSM_SLOT_ADVANCE_MS 1000

static bool
in_followed_tablespace(TsmFileSet *fs, TsmRelFileNode node)
{
	return OidIsValid(fs->follow_tablespace) &&
		TSM_SPC(node) == fs->follow_tablespace;
}

/* Every file of the set that belongs to node, whatever its fork. */
static void
drop_node(TsmFileSet *fs, TsmRelFileNode node)
{
	for (ForkNumber fork = 0; fork <= MAX_FORKNUM; fork++)
	{
		TsmFile    *f = tsm_fileset_find(fs, node, fork);

		if (f)
			tsm_file_drop(fs, f);
	}
}

static void
mirror_truncate(TsmFileSet *fs, xl_smgr_truncate *xlrec)
{
	TsmRelFileNode node = TSM_SMGR_XLREC_NODE(xlrec);
	TsmFile    *f;

	if ((xlrec->flags & SMGR_TRUNCATE_HEAP) &&
		(f = tsm_fileset_find(fs, node, MAIN_FORKNUM)) != NULL)
		tsm_file_truncate(fs, f, xlrec->blkno);
	if ((xlrec->flags & SMGR_TRUNCATE_FSM) &&
		(f = tsm_fileset_find(fs, node, FSM_FORKNUM)) != NULL)
		tsm_file_truncate(fs, f, 0);
	if ((xlrec->flags & SMGR_TRUNCATE_VM) &&
		(f = tsm_fileset_find(fs, node, VISIBILITYMAP_FORKNUM)) != NULL)
		tsm_file_truncate(fs, f, 0);
}

static void
mirror_xact(TsmFileSet *fs, XLogReaderState *reader)
{
	uint8		info = XLogRecGetInfo(reader) & XLOG_XACT_OPMASK;
	int			nrels = 0;
	TsmRelFileNode *nodes = NULL;

	if (info == XLOG_XACT_COMMIT || info == XLOG_XACT_COMMIT_PREPARED)
	{
		xl_xact_parsed_commit parsed;

		ParseCommitRecord(XLogRecGetInfo(reader),
						  (xl_xact_commit *) XLogRecGetData(reader), &parsed);
		nrels = parsed.nrels;
		nodes = TSM_PARSED_XACT_NODES(parsed);
	}
	else if (info == XLOG_XACT_ABORT || info == XLOG_XACT_ABORT_PREPARED)
	{
		xl_xact_parsed_abort parsed;

		ParseAbortRecord(XLogRecGetInfo(reader),
						 (xl_xact_abort *) XLogRecGetData(reader), &parsed);
		nrels = parsed.nrels;
		nodes = TSM_PARSED_XACT_NODES(parsed);
	}
	for (int i = 0; i < nrels; i++)
	{
		if (in_followed_tablespace(fs, nodes[i]))
			drop_node(fs, nodes[i]);
		else if (!OidIsValid(fs->follow_tablespace) && info == XLOG_XACT_COMMIT &&
				 tsm_fileset_find(fs, nodes[i], MAIN_FORKNUM) != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("\"%s\" was dropped during its move", fs->ctl->label),
					 errhint("Nothing is left to move.")));
	}
}

static void
mirror_dbase_or_tblspc(TsmFileSet *fs, XLogReaderState *reader)
{
	Oid			spc = fs->follow_tablespace;
	uint8		info = XLogRecGetInfo(reader) & ~XLR_INFO_MASK;
	char	   *data = XLogRecGetData(reader);

	if (XLogRecGetRmid(reader) == RM_TBLSPC_ID)
	{
		if (info == XLOG_TBLSPC_DROP && ((xl_tblspc_drop_rec *) data)->ts_id == spc)
			fs->ops->foreign_change(fs, "the tablespace was dropped");
		return;
	}
	if (info == XLOG_DBASE_CREATE_FILE_COPY &&
		((xl_dbase_create_file_copy_rec *) data)->tablespace_id == spc)
		fs->ops->foreign_change(fs, "a database was created with files in the tablespace");
	else if (info == XLOG_DBASE_CREATE_WAL_LOG &&
			 ((xl_dbase_create_wal_log_rec *) data)->tablespace_id == spc)
		fs->ops->foreign_change(fs, "a database was created in the tablespace");
	else if (info == XLOG_DBASE_DROP)
	{
		xl_dbase_drop_rec *xlrec = (xl_dbase_drop_rec *) data;

		for (int i = 0; i < xlrec->ntablespaces; i++)
			if (xlrec->tablespace_ids[i] == spc)
				fs->ops->foreign_change(fs, "a database with files in the tablespace was dropped");
	}
}

/* Apply one decoded record to the file set. */
static void
mirror_record(TsmFileSet *fs, XLogReaderState *reader)
{
	RmgrId		rmid = XLogRecGetRmid(reader);
	bool		follow = OidIsValid(fs->follow_tablespace);
	bool		heap_record = (rmid == RM_HEAP_ID || rmid == RM_HEAP2_ID);
	bool		moves_tuples = fs->moved != NULL && tsm_record_moves_heap_tuples(reader);

	if (rmid == RM_SMGR_ID)
	{
		uint8		info = XLogRecGetInfo(reader) & ~XLR_INFO_MASK;

		if (info == XLOG_SMGR_TRUNCATE)
			mirror_truncate(fs, (xl_smgr_truncate *) XLogRecGetData(reader));
		else if (info == XLOG_SMGR_CREATE && follow)
		{
			xl_smgr_create *xlrec = (xl_smgr_create *) XLogRecGetData(reader);

			if (in_followed_tablespace(fs, TSM_SMGR_XLREC_NODE(xlrec)))
				fs->ops->new_file(fs, TSM_SMGR_XLREC_NODE(xlrec), xlrec->forkNum);
		}
	}
	else if (rmid == RM_XACT_ID)
		mirror_xact(fs, reader);
	else if (follow && (rmid == RM_DBASE_ID || rmid == RM_TBLSPC_ID))
		mirror_dbase_or_tblspc(fs, reader);

	for (int block_id = 0; block_id <= XLogRecMaxBlockId(reader); block_id++)
	{
		TsmRelFileNode node;
		ForkNumber	fork;
		BlockNumber blkno;
		TsmFile    *f;

		if (!tsm_record_block_tag(reader, block_id, &node, &fork, &blkno))
			continue;
		f = tsm_fileset_find(fs, node, fork);
		if (f == NULL && in_followed_tablespace(fs, node))
		{
			fs->ops->new_file(fs, node, fork);
			f = tsm_fileset_find(fs, node, fork);
		}
		if (f == NULL || f->gone)
			continue;
		/*
		 * For the pacing floor (pacing.c): the changes the copy must
		 * outpace, a copied page made dirty (once until it is copied again,
		 * however hot); and apart, the changes ahead of the cursor, which
		 * the copy reads later whatever its pace.  Not the growth.
		 */
		if (f->when == TSM_COPY_TRACKED && blkno < f->copy_cursor)
		{
			if (tsm_file_mark_dirty(fs, f, blkno))
				fs->ctl->pages_changed++;
			if (moves_tuples && block_id == 0)
				tsm_file_mark_moved(fs, f, blkno);
		}
		else if (blkno >= f->nblocks)
			tsm_file_set_extent(fs, f, blkno + 1, f->copy_cursor);	/* it grew */
		else if (f->when == TSM_COPY_TRACKED)
			fs->ctl->pages_changed_ahead++;
		if (follow && heap_record && fork == MAIN_FORKNUM)
		{
			TsmFile    *vm = tsm_fileset_find(fs, node, VISIBILITYMAP_FORKNUM);
			BlockNumber vm_blkno = blkno / TSM_HEAPBLOCKS_PER_VM_PAGE;

			if (vm && !vm->gone && vm->when == TSM_COPY_TRACKED &&
				vm_blkno < vm->copy_cursor &&
				tsm_file_mark_dirty(fs, vm, vm_blkno))
				fs->ctl->pages_changed++;
		}
	}
}

/*
 * The end of the WAL the mirror may read: all that is inserted, or on a
 * standby all that is replayed (a record is applied to the pages before
 * the mirror sees it, so a page copied before its record's replay is
 * marked dirty again).
 */
static XLogRecPtr
wal_end(void)
{
	return RecoveryInProgress() ? GetXLogReplayRecPtr(NULL) : GetXLogInsertRecPtr();
}

/*
 * Fail if the slot gave up its WAL (max_slot_wal_keep_size), or keeps more
 * than pg_tsmove.max_retained_wal.
 */
static void
mirror_check_retention(TsmFileSet *fs)
{
	ReplicationSlot *slot = MyReplicationSlot;
	XLogRecPtr	restart_lsn;
	bool		invalidated;

	SpinLockAcquire(&slot->mutex);
	invalidated = tsm_slot_invalidated(slot);
	restart_lsn = slot->data.restart_lsn;
	SpinLockRelease(&slot->mutex);
	if (invalidated)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the WAL needed to mirror the move of \"%s\" was removed",
						fs->ctl->label),
				 errhint("Raise max_slot_wal_keep_size, or give the move a higher rate.")));
	if (wal_end() - restart_lsn > (uint64) tsm_max_retained_wal_mb * 1024 * 1024)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("the move of \"%s\" kept more than pg_tsmove.max_retained_wal of WAL",
						fs->ctl->label),
				 errhint("Raise pg_tsmove.max_retained_wal, or move it when there are fewer writes.")));
}

/* Move the slot's restart_lsn forward to keep_from, durably if persistent. */
static void
mirror_move_slot(TsmMirror *mirror, XLogRecPtr keep_from)
{
	ReplicationSlot *slot = MyReplicationSlot;
	bool		moved = false;

	SpinLockAcquire(&slot->mutex);
	if (!tsm_slot_invalidated(slot) && slot->data.restart_lsn < keep_from)
	{
		slot->data.restart_lsn = keep_from;
		moved = true;
	}
	SpinLockRelease(&slot->mutex);
	if (!moved)
		return;
	if (mirror->persistent)
	{
		ReplicationSlotMarkDirty();
		ReplicationSlotSave();
	}
	ReplicationSlotsComputeRequiredLSN();
}

/*
 * At most every TSM_SLOT_ADVANCE_MS: a temporary slot follows the reader
 * (a persistent one moves only at resume points, tsm_mirror_keep_from),
 * and the retention is checked.
 */
static void
mirror_advance_slot(TsmMirror *mirror, TsmFileSet *fs)
{
	TimestampTz now = GetCurrentTimestamp();

	if (MyReplicationSlot == NULL ||
		!TimestampDifferenceExceeds(mirror->last_slot_advance, now,
									TSM_SLOT_ADVANCE_MS))
		return;
	mirror->last_slot_advance = now;
	if (!mirror->persistent && !XLogRecPtrIsInvalid(mirror->next_lsn))
		mirror_move_slot(mirror, mirror->next_lsn);
	mirror_check_retention(fs);
}

/*
 * The WAL position before which every record has been applied to the file
 * set: a resume point's resume_lsn.
 */
XLogRecPtr
tsm_mirror_position(TsmMirror *mirror)
{
	return XLogRecPtrIsInvalid(mirror->next_lsn) ? mirror->start_lsn : mirror->next_lsn;
}

/* Keep the WAL from lsn on; let the slot release what is before it. */
void
tsm_mirror_keep_from(TsmMirror *mirror, XLogRecPtr lsn)
{
	if (mirror->started && MyReplicationSlot != NULL)
		mirror_move_slot(mirror, lsn);
}

/*
 * Start reading the WAL, with a slot called slot_name keeping it.
 *
 * From now (resume_lsn invalid): create the slot, temporary or persistent,
 * reserve WAL, and take start_lsn: every change from here on is seen.
 * Must run before the job lists its files and copies the first page.
 *
 * From a resume point (resume_lsn valid): acquire the persistent slot the
 * job left, which must still keep resume_lsn, and read from there.
 *
 * The reader lives in cxt.
 */
void
tsm_mirror_start(TsmMirror *mirror, MemoryContext cxt, const char *slot_name,
				 bool persistent, XLogRecPtr resume_lsn)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);

	tsm_check_slot_requirements();
	mirror->persistent = persistent;
	strlcpy(mirror->slot_name, slot_name, NAMEDATALEN);
	if (XLogRecPtrIsInvalid(resume_lsn))
	{
		tsm_create_physical_slot(slot_name, persistent);
		mirror->slot_created = true;
		ReplicationSlotReserveWal();
		if (persistent)
		{
			ReplicationSlotMarkDirty();
			ReplicationSlotSave();
		}
		ReplicationSlotsComputeRequiredLSN();
		mirror->start_lsn = wal_end();
	}
	else
	{
		XLogRecPtr	restart_lsn;
		bool		invalidated;

		Assert(persistent);
		tsm_acquire_slot(slot_name);
		mirror->slot_created = true;
		SpinLockAcquire(&MyReplicationSlot->mutex);
		restart_lsn = MyReplicationSlot->data.restart_lsn;
		invalidated = tsm_slot_invalidated(MyReplicationSlot);
		SpinLockRelease(&MyReplicationSlot->mutex);
		if (invalidated || XLogRecPtrIsInvalid(restart_lsn) || restart_lsn > resume_lsn)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the WAL from the resume point of this move is gone"),
					 errhint("Submit the move again.")));
		mirror->start_lsn = resume_lsn;
	}
	mirror->next_lsn = InvalidXLogRecPtr;
	mirror->last_slot_advance = GetCurrentTimestamp();
	mirror->reader =
		XLogReaderAllocate(wal_segment_size, NULL,
						   XL_ROUTINE(.page_read = &read_local_xlog_page_no_wait,
									  .segment_open = &wal_segment_open,
									  .segment_close = &wal_segment_close),
						   palloc0(sizeof(ReadLocalXLogPageNoWaitPrivate)));
	if (mirror->reader == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while allocating a WAL reading processor.")));
	mirror->started = true;
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Read all WAL flushed so far and apply it to the file set.  A record not
 * yet completely flushed is read on the next call.  Does nothing if the
 * mirror was not started (a job that needs none).
 */
void
tsm_mirror_drain(TsmMirror *mirror, TsmFileSet *fs)
{
	XLogReaderState *reader = mirror->reader;
	ReadLocalXLogPageNoWaitPrivate *private;
	long		nrecords = 0;
	MemoryContext oldcxt;

	if (!mirror->started)
		return;
	private = reader->private_data;
	/* the reader grows its buffers lazily: keep them out of transactions */
	oldcxt = MemoryContextSwitchTo(fs->cxt);

	private->end_of_wal = false;
	if (XLogRecPtrIsInvalid(mirror->next_lsn))
	{
		/* start_lsn need not be a record boundary: find the first record */
		XLogRecPtr	first = tsm_find_next_record(reader, mirror->start_lsn);

		if (XLogRecPtrIsInvalid(first))
		{
			/* no complete record after start_lsn yet */
			MemoryContextSwitchTo(oldcxt);
			return;
		}
		mirror->next_lsn = first;
	}
	XLogBeginRead(reader, mirror->next_lsn);
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
		mirror_record(fs, reader);
		mirror->next_lsn = reader->EndRecPtr;
		if (++nrecords % 4096 == 0)
			CHECK_FOR_INTERRUPTS();
	}
	MemoryContextSwitchTo(oldcxt);
	mirror_advance_slot(mirror, fs);
}

/*
 * Free the reader and drop the slot, or with keep_slot release a
 * persistent slot for the job to resume from.  Safe to call twice and
 * after errors.
 */
void
tsm_mirror_stop(TsmMirror *mirror, bool keep_slot)
{
	if (mirror->reader)
	{
		XLogReaderFree(mirror->reader);
		mirror->reader = NULL;
	}
	if (mirror->slot_created)
	{
		if (MyReplicationSlot != NULL)
			ReplicationSlotRelease();
		tsm_cleanup_temporary_slots();
		if (mirror->persistent && !keep_slot &&
			SearchNamedReplicationSlot(mirror->slot_name, true) != NULL)
			tsm_drop_slot(mirror->slot_name);
		mirror->slot_created = false;
	}
	mirror->started = false;
}
