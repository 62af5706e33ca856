/*-------------------------------------------------------------------------
 *
 * relocation_dbcatalog.c
 *	  Which relation of another database owns a relfilenode: the relations
 *	  of any database stored in a tablespace, read from that database's
 *	  pg_class through shared buffers.
 *
 * A tablespace relocation runs in one database but must lock, in every
 * database, the relations whose files it moves, and locks name relation
 * OIDs, while files are named by relfilenode.  The relcache and the
 * syscaches know only the database a backend is connected to, so this
 * reads the other database's pg_class as CREATE DATABASE ... STRATEGY
 * WAL_LOG reads its template's (ScanSourceDatabasePgClass in
 * dbcommands.c): its relfilenode from the relation map, its pages through
 * ReadBufferWithoutRelcache(), each tuple's visibility by a fresh MVCC
 * snapshot.  Unlike a template, that database is in use, so:
 *	- pg_class of that database is locked (AccessShareLock, by tag) before
 *	  its relation map is read, so VACUUM FULL cannot give it a new
 *	  relfilenode meanwhile, and until the scan ends;
 *	- nothing is pruned or changed but hint bits, under the buffer's share
 *	  lock, as any reader does;
 *	- vacuum in that database does not honour this process's snapshot, so
 *	  a row updated after the snapshot may be missed.  Callers must treat a
 *	  relfilenode they cannot resolve as "not known yet", never as "free":
 *	  relocation_switch.c does not switch while a file it moves is
 *	  unresolved.
 *
 * Locks: AccessShareLock on the other database's pg_class for the scan.
 * The caller is in a transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/relmapper.h"
#include "utils/snapmgr.h"

#include "relocation/relocation_dbcatalog.h"

/* Collect the visible rows of one pg_class page that are stored in spc. */
static void
scan_pg_class_page(Page page, Buffer buf, Snapshot snapshot, Oid spc,
				   TsmDbRelation **rels, int *nrels, int *capacity)
{
	BlockNumber blkno = BufferGetBlockNumber(buf);
	OffsetNumber maxoff = PageGetMaxOffsetNumber(page);

	for (OffsetNumber offnum = FirstOffsetNumber; offnum <= maxoff;
		 offnum = OffsetNumberNext(offnum))
	{
		ItemId		itemid = PageGetItemId(page, offnum);
		HeapTupleData tuple;
		Form_pg_class form;

		if (!ItemIdIsNormal(itemid))
			continue;
		ItemPointerSet(&tuple.t_self, blkno, offnum);
		tuple.t_data = (HeapTupleHeader) PageGetItem(page, itemid);
		tuple.t_len = ItemIdGetLength(itemid);
		tuple.t_tableOid = RelationRelationId;
		if (!HeapTupleSatisfiesVisibility(&tuple, snapshot, buf))
			continue;
		form = (Form_pg_class) GETSTRUCT(&tuple);
		if (form->reltablespace != spc || !OidIsValid(form->relfilenode))
			continue;
		if (*nrels == *capacity)
		{
			*capacity = Max(64, *capacity * 2);
			*rels = *rels ? repalloc(*rels, sizeof(TsmDbRelation) * *capacity) :
				palloc(sizeof(TsmDbRelation) * *capacity);
		}
		(*rels)[*nrels].relid = form->oid;
		(*rels)[*nrels].relfilenode = form->relfilenode;
		(*rels)[*nrels].relpersistence = form->relpersistence;
		(*rels)[*nrels].relkind = form->relkind;
		(*nrels)++;
	}
}

/*
 * The relations of database dbid (whose default tablespace is db_spc)
 * stored in tablespace spc, as of now: *rels gets a palloc'd array of
 * *nrels entries.  spc must not be the database's default tablespace
 * (there reltablespace is 0 and mapped catalogs live).
 */
void
tsm_db_relations_in_tablespace(Oid dbid, Oid db_spc, Oid spc,
							   TsmDbRelation **rels, int *nrels)
{
	LockRelId	pg_class_lock;
	char	   *dbpath;
	TsmRelFileNode node;
	SMgrRelation smgr;
	BlockNumber nblocks;
	Snapshot	snapshot;
	BufferAccessStrategy strategy;
	int			capacity = 0;

	Assert(spc != db_spc);
	*rels = NULL;
	*nrels = 0;

	pg_class_lock.dbId = dbid;
	pg_class_lock.relId = RelationRelationId;
	LockRelationId(&pg_class_lock, AccessShareLock);

	dbpath = GetDatabasePath(dbid, db_spc);
	TSM_SPC(node) = db_spc;
	TSM_DB(node) = dbid;
	TSM_REL(node) = tsm_mapped_relfilenumber(dbpath, RelationRelationId);
	smgr = tsm_smgropen(node);
	nblocks = smgrnblocks(smgr, MAIN_FORKNUM);
	smgrclose(smgr);

	snapshot = RegisterSnapshot(GetLatestSnapshot());
	strategy = GetAccessStrategy(BAS_BULKREAD);
	for (BlockNumber blkno = 0; blkno < nblocks; blkno++)
	{
		Buffer		buf;

		CHECK_FOR_INTERRUPTS();
		buf = tsm_read_buffer(node, MAIN_FORKNUM, blkno, RBM_NORMAL, strategy, true);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		scan_pg_class_page(BufferGetPage(buf), buf, snapshot, spc, rels, nrels,
						   &capacity);
		UnlockReleaseBuffer(buf);
	}
	FreeAccessStrategy(strategy);
	UnregisterSnapshot(snapshot);
	UnlockRelationId(&pg_class_lock, AccessShareLock);
	pfree(dbpath);
}
