/*-------------------------------------------------------------------------
 *
 * relmove.c
 *	  The front end that moves one relation: its new relfilenodes, the sink
 *	  that writes them, its locks, and removing them when the move fails.
 *	  The switch itself and warming are in switch.c.
 *
 * Design (DESIGN.md section 2):
 *	- A table moves with its TOAST table and TOAST index ("members"), an
 *	  index or materialized view on its own.  Each member gets a new
 *	  relfilenode in the target tablespace, chosen and committed in the job
 *	  row before any file is created: after a crash the row is the record
 *	  of what to remove.
 *	- A session lock on every member is held from prepare to the switch:
 *	  ShareUpdateExclusiveLock online (as CREATE INDEX CONCURRENTLY: DML goes
 *	  on, anything that would change the relfilenode waits or, with
 *	  pg_tsmove.yield_to_ddl, makes the move give way), ExclusiveLock in
 *	  quiesce mode (writes wait), AccessExclusiveLock in exclusive mode
 *	  (everything waits; the only way to move an unlogged relation, whose
 *	  changes the mirror cannot see).
 *	- The sink writes through smgr with skipFsync, WAL-logs each page as a
 *	  full-page image of the new relfilenode (standbys and crash recovery
 *	  rebuild the file from it; it also sets the page LSN) unless the fork
 *	  is an unlogged relation's, and sets the checksum after that
 *	  (RelationCopyStorage's rules).
 *	- The new storage is created without a pending delete: it must outlive
 *	  the transaction that created it.  It is dropped by RelationDropStorage
 *	  in a transaction with an XID, so the commit record unlinks it on
 *	  standbys too.  Never unlink() by hand.  A relfilenode that pg_class
 *	  maps is never dropped, whoever asks: once the switch has committed,
 *	  the new files are the relation's storage.
 *
 * Locks: the session locks above, taken without queueing (a queued request
 * would block the DDL and DML behind it) after checking that the
 * submitting role still owns the relation.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/xact.h"
#include "access/xloginsert.h"
#include "access/xlogutils.h"
#include "catalog/pg_am.h"
#include "catalog/storage.h"
#include "catalog/storage_xlog.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relfilenodemap.h"
#include "utils/snapmgr.h"

#include "move.h"

/* ---- storage ---- */

/*
 * Schedule the removal of a relfilenode's files (every fork) at commit of
 * the current transaction, which must get an XID before it commits.  Does
 * nothing, with a log message, if a relation of pg_class uses the
 * relfilenode: a switch that committed made it live storage.
 */
void
tsm_drop_storage(TsmRelFileNode node)
{
	Relation	fake;
	Oid			owner_relid;

	owner_relid = RelidByRelfilenode(TSM_SPC(node) == MyDatabaseTableSpace ?
									 InvalidOid : TSM_SPC(node),
									 TSM_REL(node));
	if (OidIsValid(owner_relid))
	{
		ereport(LOG,
				(errmsg("pg_tsmove: relfilenode %u is the storage of relation %u; not dropping it",
						TSM_REL(node), owner_relid)));
		return;
	}
	fake = CreateFakeRelcacheEntry(node);
	RelationDropStorage(fake);
	FreeFakeRelcacheEntry(fake);
}

static TsmRelMember *
member_of(TsmFileSet *fs, TsmFile *f)
{
	return &((TsmRelMove *) fs->arg)->members[f->owner];
}

/* Whether the new relfilenode's fork is WAL-logged (RelationCopyStorage's rule). */
static bool
fork_needs_wal(TsmRelMember *m, ForkNumber fork)
{
	return XLogIsNeeded() &&
		(m->relpersistence == RELPERSISTENCE_PERMANENT || fork == INIT_FORKNUM);
}

/* The main forks are created by prepare; the other forks when first copied. */
static void
relmove_create(TsmFileSet *fs, TsmFile *f)
{
	TsmRelMember *m = member_of(fs, f);

	smgrcreate(tsm_smgropen(m->new_node), f->key.fork, false);
	if (fork_needs_wal(m, f->key.fork))
		log_smgrcreate(&m->new_node, f->key.fork);
}

static void
relmove_write(TsmFileSet *fs, TsmFile *f, BlockNumber blkno, char *page,
			  bool extend)
{
	TsmRelMember *m = member_of(fs, f);

	if (fork_needs_wal(m, f->key.fork))
		log_newpage(&m->new_node, f->key.fork, blkno, page,
					f->key.fork == MAIN_FORKNUM && m->standard_pages);
	PageSetChecksumInplace(page, blkno);
	tsm_smgr_put_block(tsm_smgropen(m->new_node), f->key.fork, blkno, page,
					   extend, true);
}

static void
relmove_writeback(TsmFileSet *fs, TsmFile *f, BlockNumber first, BlockNumber nblocks)
{
	smgrwriteback(tsm_smgropen(member_of(fs, f)->new_node), f->key.fork,
				  first, nblocks);
}

static void
relmove_sync(TsmFileSet *fs, TsmFile *f)
{
	smgrimmedsync(tsm_smgropen(member_of(fs, f)->new_node), f->key.fork);
}

/* A relation move never follows a truncation: its session lock excludes it. */
static void
relmove_truncate(TsmFileSet *fs, TsmFile *f, BlockNumber nblocks)
{
	elog(ERROR, "pg_tsmove: the copy of a moving relation cannot be truncated");
}

static const TsmFileSetOps relmove_sink = {
	.create = relmove_create,
	.write = relmove_write,
	.writeback = relmove_writeback,
	.truncate = relmove_truncate,
	.sync = relmove_sync,
	.remove = NULL,
};

/* ---- locks ---- */

static LOCKMODE
session_lockmode(TsmJob *job)
{
	switch (job->row.mode)
	{
		case TSM_MODE_ONLINE:
			return ShareUpdateExclusiveLock;
		case TSM_MODE_QUIESCE:
			return ExclusiveLock;
		case TSM_MODE_EXCLUSIVE:
			return AccessExclusiveLock;
	}
	return AccessExclusiveLock; /* keep compiler quiet */
}

/*
 * An online move's session lock makes DDL, VACUUM and CREATE INDEX on the
 * relation wait for the whole move, and every query queued behind such a
 * command waits with it.  With pg_tsmove.yield_to_ddl the move gives way:
 * it cancels itself as soon as anyone waits for a lock that conflicts with
 * its own.  Not in the other modes, where others are meant to wait, nor
 * once the switch holds the exclusive lock.
 */
static void
relmove_yield_to_waiting_ddl(TsmJobCtl *ctl, void *arg)
{
	TsmJob	   *job = (TsmJob *) arg;
	TsmRelMove *move = (TsmRelMove *) job->state;

	if (!tsm_yield_to_ddl || job->row.mode != TSM_MODE_ONLINE ||
		!move->session_locked || ctl->progress.state >= TSM_SWITCHING)
		return;
	for (int i = 0; i < move->nmembers; i++)
	{
		LOCKTAG		tag;

		SET_LOCKTAG_RELATION(tag, MyDatabaseId, move->members[i].relid);
		if (LockHasWaiters(&tag, session_lockmode(job), true))
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("move cancelled: another session waits for a lock on \"%s\"",
							job->row.relname),
					 errdetail("With pg_tsmove.yield_to_ddl on, a move gives way to DDL, VACUUM and "
							   "CREATE INDEX, which would otherwise wait for the whole move "
							   "and hold up the queries queued behind them."),
					 errhint("Move it again when that command is done, or set "
							 "pg_tsmove.yield_to_ddl = off to make such commands wait.")));
	}
}

/*
 * Lock relid in mode without queueing: a queued request would block the
 * DDL and DML behind it.  Retries until granted, watching for cancel.
 * Returns the opened relation, or NULL if it no longer exists.
 */
static Relation
open_locked(TsmJob *job, Oid relid, LOCKMODE mode)
{
	Relation	rel;

	while (!ConditionalLockRelationOid(relid, mode))
		tsm_ctl_sleep(&job->ctl, 50);
	rel = try_relation_open(relid, NoLock);
	if (rel == NULL)
		UnlockRelationOid(relid, mode);
	return rel;
}

/* Take the session lock of a member and choose its new relfilenode. */
static void
add_member(TsmJob *job, Relation rel)
{
	TsmRelMove *move = (TsmRelMove *) job->state;
	TsmRelMember *m = &move->members[move->nmembers++];

	Assert(move->nmembers <= TSM_MAX_MEMBERS);
	memset(m, 0, sizeof(*m));
	m->relid = RelationGetRelid(rel);
	m->relpersistence = rel->rd_rel->relpersistence;
	m->standard_pages = (rel->rd_rel->relam == HEAP_TABLE_AM_OID ||
						 rel->rd_rel->relam == BTREE_AM_OID);
	m->old_node = TsmRelationNode(rel);
	TSM_SPC(m->new_node) = job->row.target_spc;
	TSM_DB(m->new_node) = MyDatabaseId;
	TSM_REL(m->new_node) = tsm_new_relfilenumber(job->row.target_spc,
												 m->relpersistence);
	LockRelationIdForSession(&rel->rd_lockInfo.lockRelId, session_lockmode(job));
	move->session_locked = true;
}

/* ---- the front end ---- */

/*
 * prepare: check again that the submitting role may move the relation,
 * take the session locks, check the relation is what move() saw, choose
 * the new relfilenodes and commit them in the job row, then create the new
 * main forks in a second transaction and list the files to copy.
 */
static void
relmove_prepare(TsmJob *job)
{
	TsmRelMove *move = palloc0(sizeof(TsmRelMove));
	LOCKMODE	mode = session_lockmode(job);
	Relation	rel;
	Oid			current_spc;
	char	   *relname;
	Oid			members[TSM_MAX_MEMBERS];
	TsmRelFileNumber old_nodes[TSM_MAX_MEMBERS];
	TsmRelFileNumber new_nodes[TSM_MAX_MEMBERS];

	job->state = move;
	job->ctl.check_conflicts = relmove_yield_to_waiting_ddl;
	job->ctl.check_conflicts_arg = job;
	tsm_fileset_init(&job->files, &job->ctl, &relmove_sink, move);

	StartTransactionCommand();
	move->target_name = MemoryContextStrdup(job->cxt, get_tablespace_name(job->row.target_spc));
	relname = get_rel_name(job->row.relid);
	if (relname == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s\" was dropped before its move started",
						job->row.relname)));
	tsm_check_move_privileges(job->row.relid, relname, job->row.target_spc,
							  job->row.submitted_by);
	tsm_check_no_relocation_of(job->row.source_spc, "out of");
	tsm_check_no_relocation_of(job->row.target_spc, "into");
	rel = open_locked(job, job->row.relid, mode);
	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s\" was dropped before its move started",
						job->row.relname)));
	tsm_check_move_privileges(job->row.relid, relname, job->row.target_spc,
							  job->row.submitted_by);
	tsm_check_movable(rel, job->row.target_spc, job->row.mode);
	current_spc = OidIsValid(rel->rd_rel->reltablespace) ?
		rel->rd_rel->reltablespace : MyDatabaseTableSpace;
	if (TSM_REL(TsmRelationNode(rel)) != job->row.submitted_relfilenode ||
		current_spc != job->row.source_spc)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("relation \"%s\" was rewritten or moved after its move was submitted",
						job->row.relname),
				 errhint("Submit the move again.")));

	add_member(job, rel);
	if (rel->rd_rel->relkind != RELKIND_INDEX &&
		OidIsValid(rel->rd_rel->reltoastrelid))
	{
		Relation	toast = open_locked(job, rel->rd_rel->reltoastrelid, mode);
		List	   *toast_indexes;

		if (toast == NULL)
			elog(ERROR, "TOAST table of \"%s\" disappeared", job->row.relname);
		add_member(job, toast);
		toast_indexes = RelationGetIndexList(toast);
		if (list_length(toast_indexes) != 1)
			elog(ERROR, "TOAST table of \"%s\" has %d indexes",
				 job->row.relname, list_length(toast_indexes));
		relation_close(toast, NoLock);
		toast = open_locked(job, linitial_oid(toast_indexes), mode);
		if (toast == NULL)
			elog(ERROR, "TOAST index of \"%s\" disappeared", job->row.relname);
		add_member(job, toast);
		relation_close(toast, NoLock);
	}
	relation_close(rel, NoLock);

	for (int i = 0; i < move->nmembers; i++)
	{
		members[i] = move->members[i].relid;
		old_nodes[i] = TSM_REL(move->members[i].old_node);
		new_nodes[i] = TSM_REL(move->members[i].new_node);
	}
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_record_storage(job->row.job_id, move->nmembers, members, old_nodes,
							  new_nodes);
	PopActiveSnapshot();
	CommitTransactionCommand();

	/*
	 * The files: every member's main fork, and an unlogged relation's init
	 * fork; the FSM and VM are copied under the switch's lock
	 * (tsm_relation_switch_check).  Nothing changes a relation under an
	 * exclusive session lock, so that mode has no mirror (worker.c).
	 */
	StartTransactionCommand();
	move->storage_created = true;	/* cleanup drops what exists */
	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		TsmFile    *f;

		smgrclose(RelationCreateStorage(m->new_node, m->relpersistence, false));
		f = tsm_fileset_add(&job->files, m->old_node, MAIN_FORKNUM, TSM_COPY_TRACKED,
							m->relpersistence == RELPERSISTENCE_PERMANENT);
		f->owner = i;
		f->created = true;
		f->relid = m->relid;
		f->standard_page = m->standard_pages;
		if (m->relpersistence == RELPERSISTENCE_UNLOGGED)
		{
			f = tsm_fileset_add(&job->files, m->old_node, INIT_FORKNUM,
								TSM_COPY_TRACKED, false);
			f->owner = i;
			f->relid = m->relid;
			f->standard_page = false;
		}
	}
	CommitTransactionCommand();
}

static void
release_session_locks(TsmRelMove *move)
{
	if (move->session_locked)
	{
		LockReleaseSession(DEFAULT_LOCKMETHOD);
		move->session_locked = false;
	}
}

/* finish: release the session locks, then warm the cache. */
static void
relmove_finish(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	release_session_locks(move);
	tsm_ctl_debug_pause(&job->ctl, "warming");
	tsm_relation_warm(job);
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld moved \"%s\" to tablespace \"%s\": "
					"%lld blocks, %lld re-copied, exclusive lock held %.1f ms",
					(long long) job->row.job_id, job->row.relname, move->target_name,
					(long long) job->ctl.progress.blocks_total,
					(long long) job->ctl.progress.blocks_recopied,
					job->ctl.progress.switch_ms)));
}

/*
 * cleanup: drop the new storage unless the switch committed, in a
 * transaction of its own, then release the session locks.
 */
static void
relmove_cleanup(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	if (move == NULL)
		return;
	if (move->storage_created && !job->switch_committed)
	{
		StartTransactionCommand();
		for (int i = 0; i < move->nmembers; i++)
			tsm_drop_storage(move->members[i].new_node);
		(void) GetCurrentTransactionId();	/* the commit record drops them */
		CommitTransactionCommand();
		move->storage_created = false;
	}
	release_session_locks(move);
}

const TsmFrontEnd tsm_relation_move = {
	.prepare = relmove_prepare,
	.guard = NULL,
	.switch_lock = tsm_relation_switch_lock,
	.switch_check = tsm_relation_switch_check,
	.switch_release = tsm_relation_switch_release,
	.switch_commit = tsm_relation_switch_commit,
	.finish = relmove_finish,
	.cleanup = relmove_cleanup,
};
