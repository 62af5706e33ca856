/*-------------------------------------------------------------------------
 *
 * relation_storage.c
 *	  Dropping the files of a relation move: the one way pg_tsmove removes
 *	  relfilenodes of this database, new ones (a move that failed, was
 *	  cancelled, or that the recovery pass cannot resume) or old ones (a
 *	  move whose switch committed).
 *
 * The storage is dropped as core drops a relation's: RelationDropStorage()
 * on a fake relcache entry, so that the commit record unlinks the files,
 * here and on standbys, and the checkpointer forgets its sync requests for
 * them.  Never unlink() by hand.  A relfilenode that pg_class maps is never
 * dropped, whoever asks: once a switch has committed, the new files are
 * the relation's storage (relation_move.c says more).
 *
 * Calls nothing of move/; used by the relation move, by tsmove.cancel()
 * (job_api.c), by the recovery pass (recovery.c) and by the removal of
 * orphaned resume points (resume.c).
 *
 * Locks: none; the caller is in a transaction that will get an XID.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlogutils.h"
#include "catalog/storage.h"
#include "miscadmin.h"

#include "engine/relation_storage.h"

/*
 * Schedule the removal of a relfilenode's files (every fork) at commit of
 * the current transaction, which must get an XID before it commits.  Does
 * nothing, with a log message, if a relation of pg_class uses the
 * relfilenode: a switch that committed made it live storage.
 */
void
tsm_drop_storage(TsmRelFileNode node)
{
	Oid			owner_relid;

	owner_relid = tsm_relid_by_relfilenumber(TSM_SPC(node) == MyDatabaseTableSpace ?
									 InvalidOid : TSM_SPC(node),
									 TSM_REL(node));
	if (OidIsValid(owner_relid))
	{
		ereport(LOG,
				(errmsg("pg_tsmove: relfilenode %u is the storage of relation %u; not dropping it",
						TSM_REL(node), owner_relid)));
		return;
	}
	tsm_drop_relation_storage(node);
}

/* tsm_drop_storage() of each of n relfilenodes of this database in a tablespace. */
void
tsm_drop_storage_set(Oid spc, const TsmRelFileNumber *relfilenumbers, int n)
{
	for (int i = 0; i < n; i++)
	{
		TsmRelFileNode node;

		TSM_SPC(node) = spc;
		TSM_DB(node) = MyDatabaseId;
		TSM_REL(node) = relfilenumbers[i];
		tsm_drop_storage(node);
	}
}
