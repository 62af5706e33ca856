/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions pg_tsmove
 *	  builds against, as static inline wrappers or macros.
 *
 * The rest of the code is written against PostgreSQL 15 names and calls
 * these wrappers where 16, 17, 18 or 19 renamed or changed something:
 *	16: RelFileNode -> RelFileLocator (and relfilenumber), buffer tag
 *		accessors, object_ownercheck/object_aclcheck, the table statistics'
 *		field names, the barrier's wait message;
 *	17: BackendId -> ProcNumber, pinned smgr handles, ReplicationSlotCreate's and
 *		ReplicationSlotCleanup's arguments, parse_filename_for_nontemp_relation,
 *		PG_TEMP_FILES_DIR's header;
 *	18: smgrtruncate takes the old sizes, ReplicationSlotAcquire's
 *		arguments, ExecutorRun_hook without execute_once, PGPROC without
 *		isBackgroundWorker, the statistics hash key's objid;
 *	19: PGPROC.backendType, PageSetChecksum, 64-bit buffer header states, ShmemInitHash's,
 *		post_parse_analyze_hook's const JumbleState,
 *		XLogFindNextRecord's, GetOldestActiveTransactionId's and
 *		CheckSlotRequirements' arguments, the statistics entry a caller may
 *		have to free, a slot's active process as a ProcNumber;
 *	16, 17, 19: the heap pruning record (reconcile.c's cleanup-lock image).
 * Minor releases matter once: 15.11, 16.7 and 17.3 added smgrtruncate2,
 * which takes the old sizes (smgrtruncate then calls smgrnblocks, which
 * must not run in a critical section).  No other file may test
 * PG_VERSION_NUM.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_COMPAT_H
#define TSM_COMPAT_H

#include "postgres.h"

#include "access/heapam_xlog.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xloginsert.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "catalog/storage.h"
#include "catalog/catalog.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/reinit.h"
#include "storage/shmem.h"
#include "storage/sinvaladt.h"
#include "pgstat.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/relcache.h"
#include "utils/relmapper.h"
#if PG_VERSION_NUM >= 160000
#include "utils/relfilenumbermap.h"
#else
#include "utils/relfilenodemap.h"
#endif
#include "storage/procarray.h"
#if PG_VERSION_NUM >= 170000
#include "common/file_utils.h"
#else
#include "storage/fd.h"
#endif
#include "catalog/pg_class_d.h"
#include "catalog/pg_tablespace_d.h"

#if PG_VERSION_NUM < 150000
#error "pg_tsmove needs PostgreSQL 15 or later"
#endif

#if PG_VERSION_NUM >= 160000
#include "storage/relfilelocator.h"
typedef RelFileLocator TsmRelFileNode;
typedef RelFileNumber TsmRelFileNumber;
#define TSM_SPC(n)		((n).spcOid)
#define TSM_DB(n)		((n).dbOid)
#define TSM_REL(n)		((n).relNumber)
#define TsmRelationNode(rel) ((rel)->rd_locator)
#define TsmRelFileNodeEquals(a, b) RelFileLocatorEquals(a, b)
#else
#include "storage/relfilenode.h"
typedef RelFileNode TsmRelFileNode;
typedef Oid TsmRelFileNumber;
#define TSM_SPC(n)		((n).spcNode)
#define TSM_DB(n)		((n).dbNode)
#define TSM_REL(n)		((n).relNode)
#define TsmRelationNode(rel) ((rel)->rd_node)
#define TsmRelFileNodeEquals(a, b) RelFileNodeEquals(a, b)
#endif

/* The relation named by smgr WAL records and by parsed commit/abort records. */
#if PG_VERSION_NUM >= 160000
#define TSM_SMGR_XLREC_NODE(xlrec) ((xlrec)->rlocator)
#define TSM_PARSED_XACT_NODES(parsed) ((parsed).xlocators)
#else
#define TSM_SMGR_XLREC_NODE(xlrec) ((xlrec)->rnode)
#define TSM_PARSED_XACT_NODES(parsed) ((parsed).xnodes)
#endif

#if PG_VERSION_NUM >= 170000
#define TSM_INVALID_BACKEND INVALID_PROC_NUMBER
#else
#define TSM_INVALID_BACKEND InvalidBackendId
#endif

/* A fresh relfilenode number for a relation's new storage in a tablespace. */
static inline TsmRelFileNumber
tsm_new_relfilenumber(Oid tablespace, char relpersistence)
{
#if PG_VERSION_NUM >= 160000
	return GetNewRelFileNumber(tablespace, NULL, relpersistence);
#else
	return GetNewRelFileNode(tablespace, NULL, relpersistence);
#endif
}

/* Open the storage manager of a permanent relation's file set. */
static inline SMgrRelation
tsm_smgropen(TsmRelFileNode node)
{
	return smgropen(node, TSM_INVALID_BACKEND);
}

/* A block of any relation file, through shared buffers, without a relcache entry. */
static inline Buffer
tsm_read_buffer(TsmRelFileNode node, ForkNumber fork, BlockNumber blkno,
				ReadBufferMode mode, BufferAccessStrategy strategy, bool permanent)
{
	return ReadBufferWithoutRelcache(node, fork, blkno, mode, strategy, permanent);
}

/*
 * A page buffer for smgrextend/smgrwrite: from 16 on they require the
 * alignment of direct I/O (md.c asserts it), PG_IO_ALIGN_SIZE.
 */
#if PG_VERSION_NUM >= 160000
typedef PGIOAlignedBlock TsmIOBlock;
#else
typedef PGAlignedBlock TsmIOBlock;
#endif

/* smgrextend/smgrwrite take a const buffer from 16 on; same arguments. */
static inline void
tsm_smgr_put_block(SMgrRelation reln, ForkNumber fork, BlockNumber blkno,
				   char *page, bool extend, bool skip_fsync)
{
	if (extend)
		smgrextend(reln, fork, blkno, page, skip_fsync);
	else
		smgrwrite(reln, fork, blkno, page, skip_fsync);
}

/* The local id of the transaction a backend runs, or InvalidLocalTransactionId. */
#if PG_VERSION_NUM >= 170000
#define TSM_PROC_LXID(proc) ((proc)->vxid.lxid)
#else
#define TSM_PROC_LXID(proc) ((proc)->lxid)
#endif

/*
 * Flush every WAL record inserted so far.  GetXLogInsertRecPtr() names
 * where the next record would start: just past the page header when the
 * last record ended at a page boundary, a position nothing was written to,
 * which XLogFlush() refuses ("not satisfied").  Flush to the page's start
 * then.
 */
static inline void
tsm_flush_all_wal(void)
{
	XLogRecPtr	upto;

	if (RecoveryInProgress())
		return;					/* a standby writes none */
	upto = GetXLogInsertRecPtr();

	if (XLogSegmentOffset(upto, wal_segment_size) == SizeOfXLogLongPHD)
		upto -= SizeOfXLogLongPHD;
	else if (upto % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		upto -= SizeOfXLogShortPHD;
	XLogFlush(upto);
}

/*
 * Write out, then forget, every shared buffer of the given relation file
 * sets (all forks), as DROP does; nobody may use them meanwhile.
 */
static inline void
tsm_flush_and_drop_buffers(SMgrRelation *rels, int n)
{
	FlushRelationsAllBuffers(rels, n);
#if PG_VERSION_NUM >= 160000
	DropRelationsAllBuffers(rels, n);
#else
	DropRelFileNodesAllBuffers(rels, n);
#endif
}

/*
 * Truncate one fork of reln from old_nblocks (its size, taken by the
 * caller before its critical section) to nblocks, dropping its buffers.
 */
#if PG_VERSION_NUM >= 170003 || \
	(PG_VERSION_NUM >= 160007 && PG_VERSION_NUM < 170000) || \
	(PG_VERSION_NUM >= 150011 && PG_VERSION_NUM < 160000)
#define TSM_SMGRTRUNCATE_TAKES_OLD_SIZE 1
#endif

static inline void
tsm_smgr_truncate(SMgrRelation reln, ForkNumber fork, BlockNumber old_nblocks,
				  BlockNumber nblocks)
{
#if PG_VERSION_NUM >= 180000
	smgrtruncate(reln, &fork, 1, &old_nblocks, &nblocks);
#elif defined(TSM_SMGRTRUNCATE_TAKES_OLD_SIZE)
	smgrtruncate2(reln, &fork, 1, &old_nblocks, &nblocks);
#else
	(void) old_nblocks;
	smgrtruncate(reln, &fork, 1, &nblocks);
#endif
}

/*
 * The relation, fork and block a valid buffer descriptor holds.  The caller
 * holds the buffer header lock.
 */
static inline void
tsm_buffer_tag(BufferDesc *desc, TsmRelFileNode *node, ForkNumber *fork,
			   BlockNumber *blkno)
{
#if PG_VERSION_NUM >= 160000
	*node = BufTagGetRelFileLocator(&desc->tag);
	*fork = BufTagGetForkNum(&desc->tag);
#else
	*node = desc->tag.rnode;
	*fork = desc->tag.forkNum;
#endif
	*blkno = desc->tag.blockNum;
}

/* Block reference of a decoded WAL record, as a relation file node. */
static inline bool
tsm_record_block_tag(XLogReaderState *record, uint8 block_id,
					 TsmRelFileNode *node, ForkNumber *fork, BlockNumber *blkno)
{
	return XLogRecGetBlockTagExtended(record, block_id, node, fork, blkno, NULL);
}

/* A physical slot, temporary or persistent, acquired by this process. */
static inline void
tsm_create_physical_slot(const char *name, bool persistent)
{
	ReplicationSlotPersistency persistency = persistent ? RS_PERSISTENT : RS_TEMPORARY;

#if PG_VERSION_NUM >= 190000
	ReplicationSlotCreate(name, false, persistency, false, false, false, false);
#elif PG_VERSION_NUM >= 170000
	ReplicationSlotCreate(name, false, persistency, false, false, false);
#else
	ReplicationSlotCreate(name, false, persistency, false);
#endif
}

/* Acquire an existing slot, waiting for nobody. */
static inline void
tsm_acquire_slot(const char *name)
{
#if PG_VERSION_NUM >= 180000
	ReplicationSlotAcquire(name, true, true);
#else
	ReplicationSlotAcquire(name, true);
#endif
}

/* Whether a process has acquired the slot; the caller holds its mutex. */
static inline bool
tsm_slot_active(ReplicationSlot *slot)
{
#if PG_VERSION_NUM >= 190000
	return slot->active_proc != INVALID_PROC_NUMBER;
#else
	return slot->active_pid != 0;
#endif
}

/* Refuse, with core's error, when the server cannot have replication slots. */
static inline void
tsm_check_slot_requirements(void)
{
#if PG_VERSION_NUM >= 190000
	CheckSlotRequirements(false);
#else
	CheckSlotRequirements();
#endif
}

/* The first valid record at or after lsn, or InvalidXLogRecPtr. */
static inline XLogRecPtr
tsm_find_next_record(XLogReaderState *reader, XLogRecPtr lsn)
{
#if PG_VERSION_NUM >= 190000
	char	   *errormsg = NULL;

	return XLogFindNextRecord(reader, lsn, &errormsg);
#else
	return XLogFindNextRecord(reader, lsn);
#endif
}

/* The oldest transaction still running, in any database. */
static inline TransactionId
tsm_oldest_active_xid(void)
{
#if PG_VERSION_NUM >= 190000
	return GetOldestActiveTransactionId(false, true);
#else
	return GetOldestActiveTransactionId();
#endif
}

/* A buffer header's state word: 64 bits from 19 on. */
#if PG_VERSION_NUM >= 190000
typedef uint64 TsmBufState;
#define tsm_unlock_buf_hdr(desc, state) UnlockBufHdr(desc)
#else
typedef uint32 TsmBufState;
#define tsm_unlock_buf_hdr(desc, state) UnlockBufHdr(desc, state)
#endif

/* Set a page's checksum in place, before it is written (19 renamed the call). */
static inline void
tsm_page_set_checksum(Page page, BlockNumber blkno)
{
#if PG_VERSION_NUM >= 190000
	PageSetChecksum(page, blkno);
#else
	PageSetChecksumInplace(page, blkno);
#endif
}

/* A fixed-size shared hash table of max_size entries. */
static inline HTAB *
tsm_shmem_init_hash(const char *name, long max_size, HASHCTL *info, int flags)
{
#if PG_VERSION_NUM >= 190000
	return ShmemInitHash(name, max_size, info, flags);
#else
	return ShmemInitHash(name, max_size, max_size, info, flags);
#endif
}

/*
 * The LOG line of WaitForProcSignalBarrier() that names the process it
 * waits for, untranslated (an ErrorData's message_id): 16 prints the PID
 * with %d.
 */
#if PG_VERSION_NUM >= 160000
#define TSM_BARRIER_WAIT_MESSAGE "still waiting for backend with PID %d to accept ProcSignalBarrier"
#else
#define TSM_BARRIER_WAIT_MESSAGE "still waiting for backend with PID %lu to accept ProcSignalBarrier"
#endif

/* Drop this process's temporary slots. */
static inline void
tsm_cleanup_temporary_slots(void)
{
#if PG_VERSION_NUM >= 170000
	ReplicationSlotCleanup(false);
#else
	ReplicationSlotCleanup();
#endif
}

/* Drop a slot nobody has acquired. */
static inline void
tsm_drop_slot(const char *name)
{
	ReplicationSlotDrop(name, true);
}

/* The PGPROC of a virtual transaction's backend, or NULL. */
static inline PGPROC *
tsm_vxid_proc(VirtualTransactionId vxid)
{
#if PG_VERSION_NUM >= 170000
	return ProcNumberGetProc(vxid.procNumber);
#else
	return BackendIdGetProc(vxid.backendId);
#endif
}

/* Whether max_slot_wal_keep_size made a slot give up its WAL. */
static inline bool
tsm_slot_invalidated(ReplicationSlot *slot)
{
#if PG_VERSION_NUM >= 160000
	return slot->data.invalidated != RS_INVAL_NONE;
#else
	return !XLogRecPtrIsInvalid(slot->data.invalidated_at) ||
		XLogRecPtrIsInvalid(slot->data.restart_lsn);
#endif
}

/* The i-th (from 1) entry of this backend's snapshot of the backends' status. */
static inline LocalPgBackendStatus *
tsm_local_backend_status(int i)
{
#if PG_VERSION_NUM >= 160000
	return pgstat_get_local_beentry_by_index(i);
#else
	return pgstat_fetch_stat_local_beentry(i);
#endif
}

/* Whether a PGPROC is a client's session (not a background worker, walsender, ...). */
static inline bool
tsm_proc_is_client_session(PGPROC *proc)
{
#if PG_VERSION_NUM >= 190000
	return proc->backendType == B_BACKEND;
#elif PG_VERSION_NUM >= 180000
	return proc->isRegularBackend;
#else
	return !proc->isBackgroundWorker;
#endif
}

/* Privileges, as ALTER TABLE ... SET TABLESPACE checks them. */
static inline bool
tsm_owns_relation(Oid relid, Oid role)
{
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(RelationRelationId, relid, role);
#else
	return pg_class_ownercheck(relid, role);
#endif
}

static inline AclResult
tsm_tablespace_aclcheck(Oid spc, Oid role, AclMode mode)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(TableSpaceRelationId, spc, role, mode);
#else
	return pg_tablespace_aclcheck(spc, role, mode);
#endif
}

/* The relation of this database whose storage is (tablespace, relfilenode), or InvalidOid. */
static inline Oid
tsm_relid_by_relfilenumber(Oid tablespace, TsmRelFileNumber number)
{
#if PG_VERSION_NUM >= 160000
	return RelidByRelfilenumber(tablespace, number);
#else
	return RelidByRelfilenode(tablespace, number);
#endif
}

/*
 * Schedule a relfilenode's storage for removal at commit, as DROP does
 * (RelationDropStorage, through a fake relcache entry).  From 17 on, the
 * fake entry's smgr handle is opened unpinned, while RelationDropStorage
 * unpins the handle it closes: pin it first, or an assert-enabled server
 * fails its assertion.
 */
static inline void
tsm_drop_relation_storage(TsmRelFileNode node)
{
	Relation	fake = CreateFakeRelcacheEntry(node);

#if PG_VERSION_NUM >= 170000
	if (fake->rd_smgr != NULL)
		smgrpin(fake->rd_smgr);
#endif
	RelationDropStorage(fake);
	FreeFakeRelcacheEntry(fake);
}

/* A relation got new storage in this transaction (as SET TABLESPACE does). */
static inline void
tsm_relation_assume_new_storage(Relation rel)
{
#if PG_VERSION_NUM >= 160000
	RelationAssumeNewRelfilelocator(rel);
#else
	RelationAssumeNewRelfilenode(rel);
#endif
}

/* The relfilenode of a mapped catalog of another database, read from its map file. */
static inline TsmRelFileNumber
tsm_mapped_relfilenumber(const char *dbpath, Oid relid)
{
#if PG_VERSION_NUM >= 160000
	return RelationMapOidToFilenumberForDatabase((char *) dbpath, relid);
#else
	return RelationMapOidToFilenodeForDatabase((char *) dbpath, relid);
#endif
}

/*
 * Whether name is a file of a permanent relation ("<relfilenode>[_fork][.segno]");
 * if so, its relfilenode, fork and segment number.
 */
static inline bool
tsm_parse_relation_file_name(const char *name, TsmRelFileNumber *number,
							 ForkNumber *fork, unsigned *segno)
{
#if PG_VERSION_NUM >= 170000
	return parse_filename_for_nontemp_relation(name, number, fork, segno);
#else
	int			chars;
	const char *dot;

	if (!parse_filename_for_nontemp_relation(name, &chars, fork))
		return false;
	*number = (TsmRelFileNumber) strtoul(name, NULL, 10);
	dot = strchr(name, '.');
	*segno = dot != NULL ? (unsigned) strtoul(dot + 1, NULL, 10) : 0;
	return true;
#endif
}

/* ---- the reconciliation of a switch that admits readers (reconcile.c) -- */

/*
 * Whether the record may move tuples within its heap page (block 0): a
 * pruning that redirects, kills or frees line pointers (and compacts the
 * page), or a 15/16 VACUUM.  A 19 reader's record that only sets the
 * visibility-map bits and the page's flag does not; freezing rewrites
 * tuple headers in place.
 */
static inline bool
tsm_record_moves_heap_tuples(XLogReaderState *record)
{
	uint8		info = XLogRecGetInfo(record) & XLOG_HEAP_OPMASK;

	if (XLogRecGetRmid(record) != RM_HEAP2_ID)
		return false;
#if PG_VERSION_NUM >= 170000
	if (info == XLOG_HEAP2_PRUNE_ON_ACCESS || info == XLOG_HEAP2_PRUNE_VACUUM_SCAN ||
		info == XLOG_HEAP2_PRUNE_VACUUM_CLEANUP)
	{
		xl_heap_prune xlrec;

		memcpy(&xlrec, XLogRecGetData(record), SizeOfHeapPrune);
		return (xlrec.flags & (XLHP_HAS_REDIRECTIONS | XLHP_HAS_DEAD_ITEMS |
							   XLHP_HAS_NOW_UNUSED_ITEMS)) != 0;
	}
	return false;
#else
	return info == XLOG_HEAP2_PRUNE || info == XLOG_HEAP2_VACUUM;
#endif
}

/*
 * WAL-log buf's heap page whole in a record whose replay restores the image
 * under a cleanup lock: a heap pruning record that prunes nothing (no item,
 * no conflict horizon, so no query conflicts on it) and carries a forced
 * image.  A standby replays it only when no query there holds a pin on the
 * page, as it replays any pruning; a plain full-page image (log_newpage)
 * would replace the bytes under such a query.  The caller holds the buffer
 * exclusively locked, has marked it dirty, and is in a critical section.
 */
static inline void
tsm_log_heap_page_for_cleanup_replay(Buffer buf)
{
	xl_heap_prune xlrec;
	uint8		info;
	XLogRecPtr	lsn;

	memset(&xlrec, 0, sizeof(xlrec));
#if PG_VERSION_NUM >= 170000
	xlrec.flags = XLHP_CLEANUP_LOCK;
	info = XLOG_HEAP2_PRUNE_ON_ACCESS;
#elif PG_VERSION_NUM >= 160000
	xlrec.snapshotConflictHorizon = InvalidTransactionId;
	info = XLOG_HEAP2_PRUNE;
#else
	xlrec.latestRemovedXid = InvalidTransactionId;
	info = XLOG_HEAP2_PRUNE;
#endif
	XLogBeginInsert();
	XLogRegisterData((char *) &xlrec, SizeOfHeapPrune);
	XLogRegisterBuffer(0, buf, REGBUF_FORCE_IMAGE | REGBUF_STANDARD);
	lsn = XLogInsert(RM_HEAP2_ID, info);
	PageSetLSN(BufferGetPage(buf), lsn);
}

/* ---- monitoring (tablespace_io.c, coaccess.c) ------------------------ */

/* A table's block counters in this backend's pending statistics. */
#if PG_VERSION_NUM >= 160000
#define TSM_TABSTAT_BLOCKS_FETCHED(s) ((s)->counts.blocks_fetched)
#define TSM_TABSTAT_BLOCKS_HIT(s) ((s)->counts.blocks_hit)
#else
#define TSM_TABSTAT_BLOCKS_FETCHED(s) ((s)->t_counts.t_blocks_fetched)
#define TSM_TABSTAT_BLOCKS_HIT(s) ((s)->t_counts.t_blocks_hit)
#endif

/* Blocks of a relation of this database (or shared) ever fetched, as the shared statistics say. */
static inline int64
tsm_relation_blocks_fetched(bool shared, Oid relid)
{
	PgStat_StatTabEntry *stats;
	int64		fetched;
#if PG_VERSION_NUM >= 190000
	bool		may_free = false;

	stats = pgstat_fetch_stat_tabentry_ext(shared, relid, &may_free);
#else
	stats = pgstat_fetch_stat_tabentry_ext(shared, relid);
#endif
	fetched = stats != NULL ? stats->blocks_fetched : 0;
#if PG_VERSION_NUM >= 190000
	if (stats != NULL && may_free)
		pfree(stats);
#endif
	return fetched;
}

/* The object of a shared statistics entry's key (a relation's OID). */
#if PG_VERSION_NUM >= 180000
#define TSM_PGSTAT_KEY_OBJECT(key) ((Oid) (key).objid)
#else
#define TSM_PGSTAT_KEY_OBJECT(key) ((key).objoid)
#endif

/* post_parse_analyze_hook's JumbleState: const from 19. */
#if PG_VERSION_NUM >= 190000
#define TSM_JUMBLE_STATE const JumbleState
#else
#define TSM_JUMBLE_STATE JumbleState
#endif

/* ExecutorRun_hook's parameters: 18 dropped execute_once. */
#if PG_VERSION_NUM >= 180000
#define TSM_EXECUTOR_RUN_PARAMS QueryDesc *queryDesc, ScanDirection direction, uint64 count
#define TSM_EXECUTOR_RUN_ARGS queryDesc, direction, count
#else
#define TSM_EXECUTOR_RUN_PARAMS \
	QueryDesc *queryDesc, ScanDirection direction, uint64 count, bool execute_once
#define TSM_EXECUTOR_RUN_ARGS queryDesc, direction, count, execute_once
#endif

#if PG_VERSION_NUM >= 170000
#include "storage/proc.h"
#else
#include "storage/backendid.h"
#endif

/*
 * This backend's index in per-backend arrays of tsm_backend_slots()
 * entries, or -1 for a process without one.
 */
static inline int
tsm_backend_slot(void)
{
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyBackendId == InvalidBackendId ? -1 : MyBackendId - 1;
#endif
}

static inline int
tsm_backend_slots(void)
{
#if PG_VERSION_NUM >= 170000
	return MaxBackends + NUM_AUXILIARY_PROCS;
#else
	return MaxBackends;
#endif
}

#endif							/* TSM_COMPAT_H */
