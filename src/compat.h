/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions pg_tsmove
 *	  builds against, as static inline wrappers or macros.
 *
 * The rest of the code is written against PostgreSQL 15 names and calls
 * these wrappers where 16 and 17 renamed or changed something
 * (RelFileNode -> RelFileLocator, buffer tag accessors, the extra
 * arguments of ReplicationSlotCreate, BackendId -> ProcNumber).  No other
 * file may test PG_VERSION_NUM.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_COMPAT_H
#define TSM_COMPAT_H

#include "postgres.h"

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "catalog/catalog.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/sinvaladt.h"
#include "utils/backend_status.h"

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
	XLogRecPtr	upto = GetXLogInsertRecPtr();

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

/* Truncate one fork of reln to nblocks, dropping its buffers. */
static inline void
tsm_smgr_truncate(SMgrRelation reln, ForkNumber fork, BlockNumber nblocks)
{
	smgrtruncate(reln, &fork, 1, &nblocks);
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

#if PG_VERSION_NUM >= 170000
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

/* ---- monitoring (tablespace_io.c, coaccess.c) ------------------------ */

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
