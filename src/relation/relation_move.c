/*-------------------------------------------------------------------------
 *
 * relation_move.c
 *	  The front end that moves one relation: its new relfilenodes, the sink
 *	  that writes them, its locks, what follows the switch (warming the
 *	  cache, shrinking and dropping the old files), and removing the new
 *	  files when the move fails.  The switch itself is in
 *	  relation_switch.c; the worker calls both (frontend.h).
 *
 * Design (DESIGN.md section 2):
 *	- A table moves with its TOAST table and TOAST index ("members"), an
 *	  index or materialized view on its own.  Each member gets a new
 *	  relfilenode in the target tablespace, chosen and committed in the job
 *	  row before any file is created: after a crash the row is the record
 *	  of what to remove.
 *	- A session lock on every member is held from prepare to the switch.
 *	  Online, the weakest that keeps the relfilenode from changing:
 *	  AccessShareLock, since everything that gives a relation a new
 *	  relfilenode (TRUNCATE, VACUUM FULL, CLUSTER, REINDEX, SET TABLESPACE,
 *	  rewriting ALTER TABLE, DROP) takes AccessExclusiveLock.  So DML,
 *	  VACUUM and autovacuum (whose changes are WAL-logged and mirrored; the
 *	  truncation at its end needs AccessExclusiveLock, so it is skipped),
 *	  ANALYZE and CREATE INDEX CONCURRENTLY run beside the move; DDL that
 *	  would change the relfilenode waits or, with pg_tsmove.yield_to_ddl,
 *	  makes the move give way.  ExclusiveLock in quiesce mode (writes
 *	  wait), AccessExclusiveLock in exclusive mode (everything waits; the
 *	  only way to move an unlogged relation, whose changes the mirror cannot
 *	  see).
 *	- The sink writes through smgr with skipFsync, WAL-logs each page as a
 *	  full-page image of the new relfilenode (standbys and crash recovery
 *	  rebuild the file from it; it also sets the page LSN) unless the fork
 *	  is an unlogged relation's, and sets the checksum after that
 *	  (RelationCopyStorage's rules).  Under the switch's locks a logged
 *	  page's fsync is registered with the checkpointer instead, and the
 *	  fork is synced there only if a checkpoint began meanwhile
 *	  (engine.h, register_syncs).
 *	- The new storage is created without a pending delete: it must outlive
 *	  the transaction that created it.  It is dropped by RelationDropStorage
 *	  in a transaction with an XID, so the commit record unlinks it on
 *	  standbys too.  Never unlink() by hand.  A relfilenode that pg_class
 *	  maps is never dropped, whoever asks: once the switch has committed,
 *	  the new files are the relation's storage.
 *	- The old storage outlives the switch by a moment: the worker shrinks
 *	  it gently, then drops it as it records the job done (below, "the old
 *	  storage").
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
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogutils.h"
#include "catalog/pg_am.h"
#include "catalog/storage.h"
#include "catalog/storage_xlog.h"
#include "commands/tablespace.h"
#include "miscadmin.h"
#include "storage/bufpage.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/smgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "relation/relation_internal.h"
#include "engine/relation_storage.h"
#include "engine/resume.h"
#include "jobs/submit.h"

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
	tsm_page_set_checksum(page, blkno);
	/* a resumed move overwrites what it wrote after its resume point */
	if (f->key.fork == MAIN_FORKNUM && blkno < m->resumed_length)
		extend = false;
	tsm_smgr_put_block(tsm_smgropen(m->new_node), f->key.fork, blkno, page,
					   extend, !(fs->register_syncs && fork_needs_wal(m, f->key.fork)));
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
	/* under the switch's locks: each page written was logged and registered */
	if (fs->register_syncs && fork_needs_wal(member_of(fs, f), f->key.fork) &&
		GetRedoRecPtr() == fs->sync_redo)
		return;
	smgrimmedsync(tsm_smgropen(member_of(fs, f)->new_node), f->key.fork);
}

/*
 * Truncate a relfilenode's fork to nblocks as RelationTruncate() does:
 * WAL-logged first and flushed (if the fork is WAL-logged), so that crash
 * recovery and standbys truncate it too and forget references to the
 * blocks cut off; then the buffers past the end dropped and the file cut,
 * in a critical section, with checkpoints held back meanwhile
 * (DELAY_CHKPT_START: the sync request the truncation registers is not
 * left behind a checkpoint whose redo pointer precedes the record;
 * DELAY_CHKPT_COMPLETE: no checkpoint completes between dropping the
 * buffers and cutting the file).  Only a main fork is WAL-logged here.
 */
static void
truncate_storage(TsmRelFileNode node, ForkNumber fork, BlockNumber nblocks,
				 bool wal_logged)
{
	SMgrRelation reln = tsm_smgropen(node);	/* not in the critical section */
	BlockNumber old_nblocks = smgrnblocks(reln, fork);	/* nor this */

	/*
	 * SMGR_TRUNCATE_HEAP cuts the main fork on replay, and the FSM and VM
	 * flags take a heap length, not the fork's: a logged FSM or VM fork's
	 * truncation has no record that says it.  A relation move never needs
	 * one (its FSM and VM join the copy only under the switch's locks,
	 * where nothing truncates them, and a resume refuses a copy that has
	 * them), so a call for one is a bug: fail the job, which drops the new
	 * storage, rather than log a record whose replay would cut the copy.
	 */
	if (wal_logged && fork != MAIN_FORKNUM)
		elog(ERROR, "pg_tsmove: the copy's fork %d of %u cannot be truncated with WAL",
			 fork, TSM_REL(node));
	Assert((MyProc->delayChkptFlags & (DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE)) == 0);
	MyProc->delayChkptFlags |= DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE;
	START_CRIT_SECTION();
	if (wal_logged)
	{
		xl_smgr_truncate xlrec;
		XLogRecPtr	lsn;

		xlrec.blkno = nblocks;
		TSM_SMGR_XLREC_NODE(&xlrec) = node;
		xlrec.flags = SMGR_TRUNCATE_HEAP;
		XLogBeginInsert();
		XLogRegisterData((char *) &xlrec, sizeof(xlrec));
		lsn = XLogInsert(RM_SMGR_ID, XLOG_SMGR_TRUNCATE | XLR_SPECIAL_REL_UPDATE);
		XLogFlush(lsn);
	}
	tsm_smgr_truncate(reln, fork, old_nblocks, nblocks);
	END_CRIT_SECTION();
	MyProc->delayChkptFlags &= ~(DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE);
}

/*
 * The source was truncated (VACUUM, while a resumed move held no lock):
 * truncate the copy too.
 */
static void
relmove_truncate(TsmFileSet *fs, TsmFile *f, BlockNumber nblocks)
{
	TsmRelMember *m = member_of(fs, f);
	SMgrRelation dest = tsm_smgropen(m->new_node);

	if (!smgrexists(dest, f->key.fork) || smgrnblocks(dest, f->key.fork) <= nblocks)
		return;
	truncate_storage(m->new_node, f->key.fork, nblocks, fork_needs_wal(m, f->key.fork));
	m->resumed_length = Min(m->resumed_length, nblocks);
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
			return AccessShareLock;
		case TSM_MODE_QUIESCE:
			return ExclusiveLock;
		case TSM_MODE_EXCLUSIVE:
			return AccessExclusiveLock;
	}
	return AccessExclusiveLock; /* keep compiler quiet */
}

/*
 * Whether a backend waits for AccessExclusiveLock on relid, the only mode
 * that conflicts with an online move's AccessShareLock.  Not
 * LockHasWaiters(): a lock this weak is usually held through the fast
 * path, where it has no shared entry to look at.  Instead the waiters'
 * PGPROCs, under the lock partition's LWLock, which is what guards their
 * waitLock.
 */
static bool
relation_has_exclusive_waiter(Oid relid)
{
	LOCKTAG		tag;
	LWLock	   *partition;
	bool		found = false;

	SET_LOCKTAG_RELATION(tag, MyDatabaseId, relid);
	partition = LockHashPartitionLock(LockTagHashCode(&tag));
	LWLockAcquire(partition, LW_SHARED);
	for (int i = 0; i < ProcGlobal->allProcCount && !found; i++)
	{
		PGPROC	   *proc = GetPGProcByNumber(i);
		LOCK	   *waiting_for = proc->waitLock;

		found = (waiting_for != NULL && proc->waitLockMode == AccessExclusiveLock &&
				 memcmp(&waiting_for->tag, &tag, sizeof(LOCKTAG)) == 0);
	}
	LWLockRelease(partition);
	return found;
}

/*
 * An online move's session lock makes DDL that needs AccessExclusiveLock
 * on the relation wait for the whole move, and every query queued behind
 * such a command waits with it.  With pg_tsmove.yield_to_ddl the move
 * gives way: it cancels itself as soon as anyone waits for a lock that
 * conflicts with its own.  Not in the other modes, where others are meant
 * to wait, nor once the switch holds the exclusive lock.
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
		if (relation_has_exclusive_waiter(move->members[i].relid))
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("move cancelled: another session waits for a lock on \"%s\"",
							job->row.relname),
					 errdetail("With pg_tsmove.yield_to_ddl on, a move gives way to DDL that needs "
							   "AccessExclusiveLock, which would otherwise wait for the whole move "
							   "and hold up the queries queued behind it."),
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

/*
 * Take the session lock of a member and choose its new relfilenode, or,
 * resuming, take the one the row recorded, after checking that the member
 * is the one recorded.
 */
static void
add_member(TsmJob *job, Relation rel)
{
	TsmRelMove *move = (TsmRelMove *) job->state;
	int			i = move->nmembers++;
	TsmRelMember *m = &move->members[i];
	TsmClaimedJob *row = &job->row;

	Assert(move->nmembers <= TSM_MAX_MEMBERS);
	memset(m, 0, sizeof(*m));
	m->relid = RelationGetRelid(rel);
	m->relpersistence = rel->rd_rel->relpersistence;
	m->standard_pages = (rel->rd_rel->relam == HEAP_TABLE_AM_OID ||
						 rel->rd_rel->relam == BTREE_AM_OID);
	m->old_node = TsmRelationNode(rel);
	TSM_SPC(m->new_node) = row->target_spc;
	TSM_DB(m->new_node) = MyDatabaseId;
	if (row->resuming)
	{
		if (i >= row->nmembers || row->members[i] != m->relid ||
			row->old_nodes[i] != TSM_REL(m->old_node))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("relation \"%s\" changed while its move was interrupted",
							row->relname),
					 errhint("Submit the move again.")));
		TSM_REL(m->new_node) = row->new_nodes[i];
	}
	else
		TSM_REL(m->new_node) = tsm_new_relfilenumber(row->target_spc,
													 m->relpersistence);
	LockRelationIdForSession(&rel->rd_lockInfo.lockRelId, session_lockmode(job));
	move->session_locked = true;
}

/*
 * Resuming: the new main forks must be there, and neither FSM nor VM fork
 * (they appear only under the switch's locks: a move interrupted there
 * starts over).  Load the resume point into the file set; every cursor
 * must be within what is on disk.
 *
 * Then forget every shared buffer of the new relfilenodes.  The copy
 * writes the new files with smgrwrite(), under the buffer pool, which is
 * right only while no buffer of them exists, as for a move that started
 * afresh.  After a crash that is not so: crash recovery replayed the page
 * images the copy had logged, into buffers, and they stay there after the
 * end-of-recovery checkpoint wrote them out.  The resumed copy would write
 * newer pages underneath, and after the switch every reader would see the
 * buffers' older images: row versions updated since came back to life.
 * Written out first, so the files hold at least what the WAL said.
 */
static void
relmove_load_resume_point(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;
	SMgrRelation dests[TSM_MAX_MEMBERS];

	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		SMgrRelation dest = tsm_smgropen(m->new_node);

		dests[i] = dest;

		if (!smgrexists(dest, MAIN_FORKNUM))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FILE),
					 errmsg("the new files of the move of \"%s\" are missing",
							job->row.relname),
					 errhint("Submit the move again.")));
		if (smgrexists(dest, FSM_FORKNUM) || smgrexists(dest, VISIBILITYMAP_FORKNUM))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the move of \"%s\" was interrupted during its switch and cannot resume",
							job->row.relname),
					 errhint("Submit the move again.")));
		m->resumed_length = smgrnblocks(dest, MAIN_FORKNUM);
	}
	tsm_flush_and_drop_buffers(dests, move->nmembers);
	job->resume_lsn = tsm_resume_read(MyDatabaseId, job->row.job_id, &job->files);
	if (XLogRecPtrIsInvalid(job->resume_lsn))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the resume point of the move of \"%s\" is missing or damaged",
						job->row.relname),
				 errhint("Submit the move again.")));
	for (int i = 0; i < job->files.nfiles; i++)
	{
		TsmFile    *f = job->files.order[i];

		if (f->copy_cursor > move->members[f->owner].resumed_length)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("the new files of the move of \"%s\" are shorter than its resume point says",
							job->row.relname),
					 errhint("Submit the move again.")));
	}
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld resumes the move of \"%s\" at %lld of %lld blocks, reading the WAL from %X/%X",
					(long long) job->row.job_id, job->row.relname,
					(long long) job->ctl.progress.blocks_copied,
					(long long) job->ctl.progress.blocks_total,
					LSN_FORMAT_ARGS(job->resume_lsn))));
}

/* ---- the front end ---- */

/*
 * prepare: check again that the submitting role may move the relation,
 * take the session locks, check the relation is what move() saw, choose
 * the new relfilenodes and commit them in the job row, then create the new
 * main forks in a second transaction and list the files to copy.
 * Resuming, the new relfilenodes are the row's, their main forks exist,
 * and the resume point sets the cursors and dirty blocks (job->resume_lsn
 * says where the mirror reads the WAL from).
 */
void
tsm_relation_prepare(TsmJob *job)
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

	tsm_job_start_transaction();
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
	if (!job->row.resuming)
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		tsm_jobrec_record_storage(job->row.job_id, move->nmembers, members, old_nodes,
								  new_nodes);
		PopActiveSnapshot();
	}
	CommitTransactionCommand();
	/* what the row says now */
	job->row.nmembers = move->nmembers;
	memcpy(job->row.members, members, sizeof(members));
	memcpy(job->row.old_nodes, old_nodes, sizeof(old_nodes));
	memcpy(job->row.new_nodes, new_nodes, sizeof(new_nodes));

	/*
	 * The files: every member's main fork, and an unlogged relation's init
	 * fork; the FSM and VM are copied under the switch's lock
	 * (tsm_relation_switch_check).  Nothing changes a relation under an
	 * exclusive session lock, so that mode has no mirror (worker.c).
	 */
	tsm_job_start_transaction();
	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		TsmFile    *f;

		if (!job->row.resuming)
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
	if (job->row.resuming)
		relmove_load_resume_point(job);
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

/* ---- the old storage ---- */

/*
 * The switch leaves the old files in place: dropped in its own commit,
 * they would be freed all at once right after the locks go, and TPC-B's
 * worst transaction of a whole move fell there (engine.h, "shrink").  So
 * after warming the worker shrinks each old main fork from its end, a
 * step at a time (at once when nobody else works), each step WAL-logged
 * (standbys and crash recovery shrink it the same way), and then drops
 * the old storage in the transaction that records the job as done, whose
 * commit record removes what is left, here and on standbys.  Nobody uses
 * the old files after the switch: every backend that locks the relation
 * sees the new relfilenode.  A job stopped in between drops them at once:
 * in cleanup, or, after a crash, in the recovery pass, which finds the job
 * 'warming' and its old relfilenodes in the row.  Until then no new
 * relation can take their relfilenodes: the files still exist.
 */

/*
 * warming: read into shared buffers the blocks of the new files that were
 * cached from the old ones, so the relation stays as hot as it was.  Best
 * effort: an error here does not undo a committed switch.
 */
static void
warm_cache(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	tsm_job_start_transaction();
	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		Relation	rel = try_relation_open(m->relid, AccessShareLock);
		BlockNumber nblocks;

		if (rel == NULL)
			continue;
		nblocks = RelationGetNumberOfBlocks(rel);
		for (int b = 0; b < m->nwarm; b++)
		{
			if (m->warm_blocks[b] < nblocks)
				ReleaseBuffer(ReadBufferExtended(rel, MAIN_FORKNUM, m->warm_blocks[b],
												 RBM_NORMAL, NULL));
			if (b % 256 == 0)
				tsm_ctl_check(&job->ctl);
		}
		relation_close(rel, AccessShareLock);
	}
	CommitTransactionCommand();
}

/* Shrink the old main forks a step at a time, outside any transaction. */
static void
shrink_old_storage(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;
	bool		first_step = true;

	tsm_ctl_note(&job->ctl, "%s", "removing the old files");
	for (int i = 0; i < move->nmembers; i++)
	{
		TsmRelMember *m = &move->members[i];
		SMgrRelation old = tsm_smgropen(m->old_node);
		BlockNumber nblocks;
		BlockNumber step;

		if (!smgrexists(old, MAIN_FORKNUM))
			continue;
		nblocks = smgrnblocks(old, MAIN_FORKNUM);
		step = tsm_shrink_step_bytes((uint64) nblocks * BLCKSZ,
									 tsm_ctl_others_idle(&job->ctl)) / BLCKSZ;
		while (nblocks > 0)
		{
			nblocks = nblocks > step ? nblocks - step : 0;
			truncate_storage(m->old_node, MAIN_FORKNUM, nblocks,
							 fork_needs_wal(m, MAIN_FORKNUM));
			if (first_step)
				tsm_ctl_debug_pause(&job->ctl, "shrinking");
			first_step = false;
			tsm_ctl_sleep(&job->ctl, TSM_SHRINK_PAUSE_MS);
		}
	}
}

/*
 * Schedule the removal of the old storage at the commit of the current
 * transaction, and give it an XID so that its commit record says so.
 */
void
tsm_relation_drop_old(TsmJob *job)
{
	tsm_drop_storage_set(job->row.source_spc, job->row.old_nodes, job->row.nmembers);
	(void) GetCurrentTransactionId();
}

/* finish: release the session locks, warm the cache, shrink the old files. */
void
tsm_relation_finish(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	release_session_locks(move);
	tsm_ctl_debug_pause(&job->ctl, "warming");
	warm_cache(job);
	shrink_old_storage(job);
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld moved \"%s\" to tablespace \"%s\": "
					"%lld blocks, %lld re-copied, exclusive lock held %.1f ms",
					(long long) job->row.job_id, job->row.relname, move->target_name,
					(long long) job->ctl.progress.blocks_total,
					(long long) job->ctl.progress.blocks_recopied,
					job->ctl.progress.switch_ms)));
}

/*
 * cleanup: drop the new storage unless the switch committed, the old
 * storage if it did, in a transaction of its own, then release the session
 * locks.  What to drop is what the row recorded (a resumed job: whether or
 * not prepare got that far).
 */
void
tsm_relation_cleanup(TsmJob *job)
{
	TsmRelMove *move = (TsmRelMove *) job->state;

	if (move == NULL)
		return;
	if (job->row.nmembers > 0)
	{
		tsm_job_start_transaction();
		if (job->switch_committed)
			tsm_relation_drop_old(job);
		else
		{
			tsm_drop_storage_set(job->row.target_spc, job->row.new_nodes,
								 job->row.nmembers);
			(void) GetCurrentTransactionId();	/* the commit record drops them */
		}
		CommitTransactionCommand();
		job->row.nmembers = 0;
	}
	release_session_locks(move);
}
