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

#include "access/xlogreader.h"
#include "catalog/catalog.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/buf_internals.h"
#include "storage/smgr.h"

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

/* A temporary physical slot owned by this process. */
static inline void
tsm_create_temporary_slot(const char *name)
{
#if PG_VERSION_NUM >= 170000
	ReplicationSlotCreate(name, false, RS_TEMPORARY, false, false, false);
#else
	ReplicationSlotCreate(name, false, RS_TEMPORARY, false);
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

/* ---- monitoring (tsio.c, coaccess.c) ---------------------------------- */

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
