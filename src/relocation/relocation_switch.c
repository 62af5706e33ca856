/*-------------------------------------------------------------------------
 *
 * relocation_switch.c
 *	  The switch of a tablespace relocation, the only moment anyone waits:
 *	  lock every relation of the tablespace, check that nothing is left
 *	  that the locks do not cover, repoint the link, make every process
 *	  let go of the old files, copy what raced the rename.
 *
 * The switch, in this order, which is what keeps a change from being lost
 * (until every process has closed its old file descriptors, a page
 * changed after its last copy could be written through one and evicted):
 *	1. AccessExclusiveLock on every relation stored in the tablespace, in
 *	   every database, each within pg_tsmove.switch_lock_timeout (with the
 *	   experimental pg_tsmove.relocation_switch_admits_readers, ExclusiveLock:
 *	   every writer waits, readers go on); neither is WAL-logged, so hot
 *	   standbys never see them (lock_relation_unlogged); then the
 *	   creation guard without waiting (relocation_guard.c: from here to the
 *	   end of the switch's transaction no statement that can create storage
 *	   runs), all or none (switch_lock); a relation created before by a
 *	   transaction that has not committed, or a temporary file of a
 *	   session, postpones the switch (switch_check);
 *	2. the worker reads the WAL to its end, copies what is dirty and the
 *	   files copied under the locks, writing each page's buffer to the old
 *	   file too (all the others were written before the locks), and fsyncs
 *	   every file (worker.c, reconcile.c); now
 *	   every buffer equals its page in the old and the new files, up to
 *	   what readers change (pruning, hint bits);
 *	2b. where the switch waits only for the processes that hold a file of
 *	   the old location (relocation_holders.c: a primary under
 *	   AccessExclusiveLock, where /proc tells), the worker has written
 *	   every dirty buffer of the tablespace (before the locks, and under
 *	   them each page copied and those dirtied since); the barrier is emitted and
 *	   waited for, at most TSM_HOLDERS_WAIT_MS, until none holds one
 *	   (holders_let_go); else the attempt ends and names the holder;
 *	3. fsync the new directories; create there the old location's empty
 *	   files (segments a truncation left, which the checkpointer will
 *	   fsync through the link); under TablespaceCreateLock (which DROP
 *	   TABLESPACE takes) and DELAY_CHKPT_START, look again for backups and
 *	   temporary files, check the link still points to the old location,
 *	   create the new link under a temporary name, rename() it over
 *	   pg_tblspc/<oid>, fsync pg_tblspc: from here the link is the truth;
 *	4. PROCSIGNAL_BARRIER_SMGRRELEASE: every process, the checkpointer and
 *	   the bgwriter included, closes its old descriptors (after 2b, none
 *	   is left to wait for; else every process is waited for) (and the worker's
 *	   own, absorbed by hand since interrupts are held from 3 to 4, so that
 *	   no error can release the locks before the barrier);
 *	4b. the worker reads the WAL of the window and logs whole each page
 *	   readers changed in it (worker.c, reconcile.c);
 *	   switch_commit has ended at 4, switch_end does 5;
 *	5. files created in the old location after the check are copied (the
 *	   guard leaves none to utility statements; this is for storage made
 *	   by code that bypasses ProcessUtility); copies of dropped files whose pending unlink
 *	   the checkpointer already did are removed; release the locks;
 *	6. wait for backups that began before the switch and for sessions
 *	   whose temporary files are in the old location; remove the old
 *	   files (finish, relocation_finish.c).
 * The switch also waits for a checkpoint when the tablespace's creation is
 * in the WAL that crash recovery would replay (relocation_files.c), and
 * while a base backup runs, of either kind (relocation_backups.c), and
 * looks again at the rename with checkpoints delayed: a backup that read
 * the tablespace across the switch could miss files.  Before any lock, it
 * tries the SMGRRELEASE barrier with a bound (relocation_barrier.c): for
 * the process that kept the last attempt from switching, after 2b.
 *
 * Calls relocation_files.c and the relocation's helpers; the worker calls
 * it, and so does relocation_finish.c (the barrier, in cleanup).
 *
 * Locks: the relation locks above and the guard (AccessExclusiveLock), in
 * a transaction of the worker, taken through tsm_ctl_lock_all_or_none()
 * (job_control.c); switch_end releases the relations' before it writes the
 * job's row, the guard's goes at its commit;
 * TablespaceCreateLock from the last look to the rename.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/transam.h"
#include "access/xlog.h"
#include "access/xact.h"
#include "access/xlogrecovery.h"
#include "commands/tablespace.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/procsignal.h"
#include "storage/reinit.h"
#include "storage/smgr.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "relocation/relocation_backups.h"
#include "relocation/relocation_barrier.h"
#include "relocation/relocation_holders.h"
#include "relocation/relocation_internal.h"
#include "jobs/submit.h"

static int
locktag_cmp(const void *a, const void *b)
{
	const LOCKTAG *ta = (const LOCKTAG *) a;
	const LOCKTAG *tb = (const LOCKTAG *) b;

	if (ta->locktag_field1 != tb->locktag_field1)
		return ta->locktag_field1 < tb->locktag_field1 ? -1 : 1;
	if (ta->locktag_field2 != tb->locktag_field2)
		return ta->locktag_field2 < tb->locktag_field2 ? -1 : 1;
	return 0;
}

/*
 * Put the relations an earlier attempt timed out on first, the latest
 * first.  Holding some locks while waiting for another invites deadlocks
 * with transactions that use the relations in another order (pgbench
 * updates accounts, tellers, branches, then inserts into history; locked
 * in OID order, history comes first and every attempt deadlocks until
 * lock_timeout ends it).  A transaction that waits for the first lock
 * holds none of the others, so taking the contended relation first makes
 * the attempts converge, whatever order the workload uses.
 */
static void
order_by_contention(TsmRelocation *st)
{
	int			front = 0;

	for (int c = 0; c < st->ncontended; c++)
		for (int i = front; i < st->nlocked; i++)
			if (locktag_cmp(&st->locked[i], &st->contended[c]) == 0)
			{
				LOCKTAG		tag = st->locked[i];

				memmove(&st->locked[front + 1], &st->locked[front],
						sizeof(LOCKTAG) * (i - front));
				st->locked[front++] = tag;
				break;
			}
}

static void
note_contended(TsmJob *job, const LOCKTAG *tag)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	if (st->contended == NULL)
		st->contended = MemoryContextAlloc(job->cxt, sizeof(LOCKTAG) * 8);
	for (int c = 0; c < st->ncontended; c++)
		if (locktag_cmp(&st->contended[c], tag) == 0)
		{
			memmove(&st->contended[1], &st->contended[0], sizeof(LOCKTAG) * c);
			st->contended[0] = *tag;
			return;
		}
	memmove(&st->contended[1], &st->contended[0],
			sizeof(LOCKTAG) * Min(st->ncontended, 7));
	st->contended[0] = *tag;
	st->ncontended = Min(st->ncontended + 1, 8);
}

/*
 * A relation lock of the switch, without the WAL record that makes a hot
 * standby take it too.  LockAcquireExtended() logs every AccessExclusiveLock
 * on a relation while XLogStandbyInfoActive() (wal_level replica or
 * logical), and a standby replays it by taking the lock: it waits for its
 * own queries of the relation and cancels them after
 * max_standby_streaming_delay.  A relocation changes only this server's
 * files: nothing it does reaches a standby, whose files are its own (the
 * relations' contents, relfilenodes and catalog rows stay), so the
 * standby's queries have nothing to wait for.  wal_level is this process's
 * copy of a postmaster setting; it reads as minimal for this call only,
 * which writes no WAL (nor does what it may run while it waits: barriers,
 * timeouts, the deadlock check), and it is restored on error.  With no
 * record the transaction gets no xid, and while it has
 * none its locks are left out of the running-xacts records too
 * (GetRunningTransactionLocks): switch_end releases them before the job's
 * row is written.  The lock itself is the same on this server.
 */
static void
lock_relation_unlogged(const LOCKTAG *tag, LOCKMODE mode)
{
	int			saved_wal_level = wal_level;

	/* (an xid would put the lock in running-xacts records all the same) */
	Assert(!TransactionIdIsValid(GetTopTransactionIdIfAny()));
	wal_level = WAL_LEVEL_MINIMAL;
	PG_TRY();
	{
		(void) LockAcquire(tag, mode, false, false);
	}
	PG_FINALLY();
	{
		wal_level = saved_wal_level;
	}
	PG_END_TRY();
}

/*
 * Lock i of the switch: st->locked[i], then, last (i == st->nlocked), the
 * creation guard (relocation_guard.c), without waiting.  The switch never
 * waits for the guard while it holds relations: a statement that holds
 * the guard may be waiting for one of them (a transaction that wrote to a
 * relation of the tablespace, then runs DDL), and the two would deadlock.
 */
static void
lock_relation_then_guard(void *arg, int i)
{
	TsmJob	   *job = (TsmJob *) arg;
	TsmRelocation *st = (TsmRelocation *) job->state;
	LOCKTAG		guard;

	if (i < st->nlocked)
	{
		lock_relation_unlogged(&st->locked[i], job->switch_lockmode);
		return;
	}
	tsm_guard_locktag(&guard);
	if (LockAcquire(&guard, AccessExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("a statement that may create storage is running")));
}

/*
 * The probe found a process that has not closed its files: say so, and,
 * if the previous probe (at most TSM_BARRIER_NAMING_GAP_MS before) named
 * the same process, pg_tsmove.switch_terminate_client_writers_after has
 * passed since the first of the row, and the submitter is still a
 * superuser, send it SIGTERM when it is a session blocked writing to its
 * client (relocation_barrier.c; a cancel would not reach it).
 */
static void
note_barrier_laggard(TsmJob *job, int laggard, int waited_ms)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TimestampTz now = GetCurrentTimestamp();
	bool		in_a_row = laggard != 0 && laggard == st->barrier_laggard &&
		!TimestampDifferenceExceeds(st->barrier_laggard_last, now, TSM_BARRIER_NAMING_GAP_MS);

	if (!in_a_row)
	{
		st->barrier_laggard = laggard;
		st->barrier_laggard_since = now;
	}
	st->barrier_laggard_last = now;
	if (in_a_row && st->may_terminate && tsm_switch_terminate_client_writers_after_ms >= 0 &&
		TimestampDifferenceExceeds(st->barrier_laggard_since, now,
								   tsm_switch_terminate_client_writers_after_ms) &&
		tsm_terminate_client_writer(laggard))
	{
		ereport(LOG,
				(errmsg("pg_tsmove: sent SIGTERM to process %d, which was blocked writing to its client "
						"and kept the relocation of tablespace \"%s\" from switching",
						laggard, st->spcname),
				 errdetail("pg_tsmove.switch_terminate_client_writers_after is %d ms.",
						   tsm_switch_terminate_client_writers_after_ms)));
		tsm_ctl_note(&job->ctl, "sent SIGTERM to process %d, which was blocked writing to its client "
					 "(it does not answer procsignal barriers); retrying", laggard);
	}
	else if (laggard != 0)
		tsm_ctl_note(&job->ctl, "process %d has not closed its files within %d ms (it does not "
					 "answer procsignal barriers): the switch takes no lock until it does",
					 laggard, waited_ms);
	else
		tsm_ctl_note(&job->ctl, "a process has not closed its files within %d ms (it does not "
					 "answer procsignal barriers): the switch takes no lock until it does",
					 waited_ms);
}

/*
 * Whether this attempt waits only for the processes that hold a file of
 * the old location (relocation_holders.c): on a primary whose switch
 * freezes the relations, where /proc tells.  Sets st->holders_dir.
 */
static bool
waits_for_holders_only(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	char	   *real = NULL;	/* malloc'd: a buffer would need PATH_MAX */

	if (st->on_standby || job->switch_lockmode != AccessExclusiveLock || st->proc_untold ||
		!tsm_old_file_holders_known() || (real = realpath(st->old_dir, NULL)) == NULL)
	{
		st->holders_dir = NULL;
		return false;
	}
	if (st->holders_dir == NULL || strcmp(st->holders_dir, real) != 0)
		st->holders_dir = MemoryContextStrdup(job->cxt, real);
	free(real);
	job->flush_under_locks = true;	/* see holders_let_go */
	return true;
}

/*
 * Of the holders the last attempt remembered, keep those still in the
 * transaction they were in then: a backend that has begun another has
 * answered barriers since (it reopens a file of the tablespace only
 * under a lock of it, which its transaction then keeps, and the switch's
 * lock waits for that anyway), and an auxiliary process (no transaction:
 * the bgwriter, the checkpointer, which reopen files to write buffers and
 * answer between them) is judged under the locks only.  Returns how many.
 */
static int
holders_still_stuck(TsmRelocation *st)
{
	int			kept = 0;

	for (int i = 0; i < st->nholders_left; i++)
	{
		LocalTransactionId now = tsm_holder_transaction(st->holders_left[i]);

		if (now == InvalidLocalTransactionId || now != st->holders_left_lxid[i])
			continue;
		st->holders_left[kept] = st->holders_left[i];
		st->holders_left_lxid[kept++] = now;
	}
	st->nholders_left = kept;
	return kept;
}

/*
 * Before any lock: the barrier's probe (relocation_barrier.c).  False, with
 * the switch's transaction committed and a note, if a process lags.  When
 * the switch waits only for the processes that hold files of the old
 * location, only those that kept the last attempt from switching, and are
 * still in the same transaction, are waited for here (holders_still_stuck;
 * the others are, under the locks: switch_commit).
 */
static bool
probe_barrier(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	int			laggard;

	/* whether the worker may still signal sessions for the submitter */
	st->may_terminate = superuser_arg(job->row.submitted_by);
	if (waits_for_holders_only(job))
	{
		int			pids[TSM_MAX_HOLDERS_KEPT];
		LocalTransactionId lxids[TSM_MAX_HOLDERS_KEPT];
		int			n = holders_still_stuck(st);
		int			none_held = 1;

		if (n > 0)
		{
			memcpy(pids, st->holders_left, sizeof(int) * n);
			memcpy(lxids, st->holders_left_lxid, sizeof(LocalTransactionId) * n);
			none_held = tsm_barrier_wait_for_holders(st->holders_dir, st->holders_left,
													 &st->nholders_left, TSM_MAX_HOLDERS_KEPT,
													 TSM_BARRIER_PROBE_MS);
		}
		/* those that held on: still in the same transaction? */
		if (none_held == 0)
		{
			for (int i = 0; i < st->nholders_left; i++)
				for (int j = 0; j < n; j++)
					if (pids[j] == st->holders_left[i])
						st->holders_left_lxid[i] = lxids[j];
			if (holders_still_stuck(st) == 0)
				none_held = 1;
		}
		if (none_held == 0)
		{
			CommitTransactionCommand();
			note_barrier_laggard(job, st->holders_left[0], TSM_BARRIER_PROBE_MS);
			return false;
		}
		if (none_held > 0)
		{
			st->barrier_laggard = 0;
			return true;
		}
		st->nholders_left = 0;
		st->holders_dir = NULL; /* /proc does not tell: the whole barrier */
		job->flush_under_locks = false;
	}
	if (!tsm_barrier_probe(TSM_BARRIER_PROBE_MS, &laggard))
	{
		CommitTransactionCommand();
		note_barrier_laggard(job, laggard, TSM_BARRIER_PROBE_MS);
		return false;
	}
	st->barrier_laggard = 0;
	return true;
}

/*
 * switch_lock on a hot standby (relocation_standby.c): no relation lock
 * (readers never wait, and only replay writes), the barrier's probe as on
 * a primary, then replay paused.  In the transaction switch_lock began.
 */
static bool
standby_switch_lock(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	char		what[MAXPGPATH + 64];

	st->nlocked = 0;
	if (!probe_barrier(job))
		return false;
	/* no pause of replay for an attempt switch_check would refuse anyway */
	if (tsm_backup_running(NULL, what, sizeof(what)))
	{
		CommitTransactionCommand();
		tsm_ctl_note(&job->ctl, "waiting for %s to end: a backup must not read the tablespace "
					 "across the switch", what);
		return false;
	}
	if (tsm_standby_pause_replay(job))
		return true;
	CommitTransactionCommand();
	return false;
}

/*
 * switch_lock: look up every relation once more, then take
 * the switch's lock (job->switch_lockmode) on each, those contended before first, then in
 * (database, OID) order, each within pg_tsmove.switch_lock_timeout; all or
 * none.  As for a relation move, autovacuum that blocks it is cancelled,
 * and so are blocking queries once pg_tsmove.switch_cancel_blockers_after
 * has passed (switch_blockers.c).
 */
bool
tsm_relocation_switch_lock(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;
	int			timeout_ms = tsm_switch_lock_timeout_ms;
	bool		timed = false;
	int			failed_at;
	int			n = 0;

	tsm_job_start_transaction();
	tsm_reloc_resolve(job, true);
	if (st->on_standby)
		return standby_switch_lock(job);
	if (st->locked)
		pfree(st->locked);
	st->locked = MemoryContextAlloc(job->cxt, sizeof(LOCKTAG) * Max(1, fs->nfiles));
	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];

		if (!f->gone && OidIsValid(f->relid))
		{
			LOCKTAG		tag;	/* the macro evaluates its target many times */

			SET_LOCKTAG_RELATION(tag, TSM_DB(f->key.node), f->relid);
			st->locked[n++] = tag;
		}
	}
	qsort(st->locked, n, sizeof(LOCKTAG), locktag_cmp);
	st->nlocked = 0;
	for (int i = 0; i < n; i++)
		if (st->nlocked == 0 || locktag_cmp(&st->locked[st->nlocked - 1], &st->locked[i]) != 0)
			st->locked[st->nlocked++] = st->locked[i];

	order_by_contention(st);

	if (tsm_cancel_blocking_queries(&job->block, st->locked, st->nlocked) > 0)
		timeout_ms = Max(timeout_ms, TSM_CANCEL_GRACE_MS);
	else if (job->block.timed_wait_ms > 0)
		timed = true;			/* looked at again just before the locks */
	else if (tsm_last_blockers_remain(&job->block, st->locked, st->nlocked))
	{
		/* it would fail as the last did, and log its locks for standbys */
		CommitTransactionCommand();
		tsm_note_blockers_remain(&job->ctl, &job->block);
		return false;
	}
	if (!probe_barrier(job))
		return false;
	if (timed)
	{
		if (!tsm_switch_block_still_due(&job->block))
		{
			CommitTransactionCommand();
			tsm_ctl_note(&job->ctl, "%s", "a switch attempt timed to the end of the transactions "
						 "that block it was put off: they are no longer due to end together");
			return false;
		}
		timeout_ms = Max(timeout_ms, job->block.timed_wait_ms);
	}
	/*
	 * Who holds the relations' locks now: those granted theirs after the
	 * requests did not block them.  The guard is not looked at: an attempt
	 * that fails at it names its holders itself.
	 */
	tsm_switch_attempt_starting(&job->block, st->locked, st->nlocked);
	if (tsm_ctl_lock_all_or_none(lock_relation_then_guard, job, st->nlocked + 1, timeout_ms,
								 &failed_at))
		return true;
	CommitTransactionCommand();		/* not an abort: it keeps the session lock */
	if (failed_at == st->nlocked)
	{
		char		holders[128];

		/* it held the relations' locks for its wait: none timed for a while */
		tsm_switch_timed_attempt_failed(&job->block);

		tsm_guard_holders(holders, sizeof(holders));
		tsm_ctl_note(&job->ctl, "waiting for a statement that may create storage to end "
					 "(process %s: CREATE, ALTER, REINDEX, VACUUM FULL, ... anywhere in the "
					 "cluster): none may run across the switch", holders);
		return false;
	}
	note_contended(job, &st->locked[failed_at]);
	tsm_switch_attempt_failed(&job->block, st->locked, st->nlocked);
	return false;
}

static bool
holds_lock_on(TsmRelocation *st, TsmFile *f)
{
	LOCKTAG		tag;

	SET_LOCKTAG_RELATION(tag, TSM_DB(f->key.node), f->relid);
	for (int i = 0; i < st->nlocked; i++)
		if (locktag_cmp(&st->locked[i], &tag) == 0)
			return true;
	return false;
}

/* Whether a temporary file of a session is in the tablespace now. */
static bool
temporary_files_present(TsmRelocation *st, char *what, Size len)
{
	char		path[MAXPGPATH];
	DIR		   *dir;
	struct dirent *de;
	bool		found = false;

	snprintf(path, sizeof(path), "%s/%s", st->old_dir, PG_TEMP_FILES_DIR);
	if (access(path, F_OK) == 0 && !directory_is_empty(path))
	{
		snprintf(what, len, "temporary files in \"%s\"", path);
		return true;
	}
	dir = AllocateDir(st->old_dir);
	while (!found && (de = ReadDir(dir, st->old_dir)) != NULL)
	{
		DIR		   *dbdir;
		struct dirent *fe;

		if (strspn(de->d_name, "0123456789") != strlen(de->d_name) || de->d_name[0] == '\0')
			continue;
		snprintf(path, sizeof(path), "%s/%s", st->old_dir, de->d_name);
		dbdir = AllocateDir(path);
		while (!found && (fe = ReadDir(dbdir, path)) != NULL)
			if (looks_like_temp_rel_name(fe->d_name))
			{
				snprintf(what, len, "temporary relation file \"%s/%s\"", path, fe->d_name);
				found = true;
			}
		FreeDir(dbdir);
	}
	FreeDir(dir);
	return found;
}

/*
 * Relation files in the old location that are not in the set: forks made
 * without WAL (an FSM or VM extended, an unlogged relation's main fork).
 * Under the locks they join the files copied whole.  Returns false, with a
 * note, if one belongs to no relation this job has locked.
 */
static bool
adopt_unlisted_files(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	ListCell   *lc;

	foreach(lc, st->dbs)
	{
		RelocDb    *db = (RelocDb *) lfirst(lc);
		char		dbpath[MAXPGPATH];
		DIR		   *dbdir;
		struct dirent *fe;
		bool		ok = true;

		snprintf(dbpath, sizeof(dbpath), "%s/%u", st->old_dir, db->dbid);
		if (!db->exists || access(dbpath, F_OK) != 0)
			continue;
		dbdir = AllocateDir(dbpath);
		while (ok && (fe = ReadDir(dbdir, dbpath)) != NULL)
		{
			TsmRelFileNumber number;
			unsigned	segno;
			ForkNumber	fork;
			TsmRelFileNode node;
			TsmFile    *f;
			RelocRelKey key;
			RelocRel   *rel;

			if (!tsm_parse_relation_file_name(fe->d_name, &number, &fork, &segno) ||
				segno != 0)
				continue;
			TSM_SPC(node) = st->spc;
			TSM_DB(node) = db->dbid;
			TSM_REL(node) = number;
			f = tsm_fileset_find(&job->files, node, fork);
			if (f != NULL && !f->gone)
				continue;
			memset(&key, 0, sizeof(key));
			key.dbid = db->dbid;
			key.relfilenode = TSM_REL(node);
			rel = hash_search(st->rels, &key, HASH_FIND, NULL);
			if (f != NULL && f->gone && rel == NULL)
				continue;		/* a dropped file's tombstone: known */
			f = tsm_reloc_add_file(&job->files, node, fork, false);
			if (st->on_standby)
			{
				/* replay is paused: whoever's it is, it is complete now */
				tsm_reloc_classify(&job->files, f, rel ? rel->relid : InvalidOid,
								   rel ? rel->relpersistence : RELPERSISTENCE_PERMANENT);
				tsm_file_set_when(&job->files, f, TSM_COPY_LOCKED, f->permanent);
			}
			else if (rel == NULL)
				ok = false;
			else
			{
				tsm_reloc_classify(&job->files, f, rel->relid, rel->relpersistence);
				tsm_file_set_when(&job->files, f, TSM_COPY_LOCKED, f->permanent);
				ok = holds_lock_on(st, f);
			}
			if (!ok)
				tsm_ctl_note(&job->ctl,
							 "waiting for the transaction that created file \"%s/%s\" to end",
							 dbpath, fe->d_name);
		}
		FreeDir(dbdir);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * switch_check, with the locks held and the WAL read to its end: every
 * file must belong to a relation this job locked (or be a tombstone or an
 * orphan no running transaction can own), no session may have temporary
 * files in the tablespace, and the link must still point where it did.
 */
bool
tsm_relocation_switch_check(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;
	char		what[MAXPGPATH + 64];
	bool		old_ones_done;
	char	   *link;

	/*
	 * On a standby, with replay paused, no file changes or appears: every
	 * one is copied as it is, whoever's it is (a transaction of the
	 * primary's that has not ended may own it).
	 */
	if (st->on_standby)
		tsm_standby_check_not_promoted(st);
	old_ones_done = st->on_standby ||
		TransactionIdPrecedesOrEquals(st->xid_horizon, tsm_oldest_active_xid());

	link = tsm_read_tablespace_link(st->spc, st->spcname);
	if (strcmp(link, st->old_location) != 0 ||
		!SearchSysCacheExists1(TABLESPACEOID, ObjectIdGetDatum(st->spc)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tablespace \"%s\" was dropped or its link changed during the relocation",
						st->spcname)));

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		RelocFile  *rf = tsm_reloc_file(fs, f);

		if (f->gone || rf->orphan)
			continue;
		if (!smgrexists(tsm_smgropen(f->key.node), f->key.fork))
		{
			/* gone at the source without a drop we saw: unlinked tombstone */
			tsm_file_drop(fs, f);
			continue;
		}
		if (st->on_standby)
			continue;
		if (OidIsValid(f->relid))
		{
			if (!holds_lock_on(st, f))
			{
				tsm_ctl_note(&job->ctl, "relation %u of database %u appeared after the locks were taken; retrying",
							 f->relid, TSM_DB(f->key.node));
				return false;
			}
			continue;
		}
		if (rf->listed_at_start && old_ones_done)
		{
			/*
			 * Nothing that runs now can own it: the transaction that made it
			 * ended, committed or not, before any file was listed.  An empty
			 * main fork is a dropped relation's tombstone, copied as such;
			 * anything else is an orphan, which stays behind.
			 */
			if (f->key.fork == MAIN_FORKNUM && f->nblocks == 0 && rf->tombstone)
				continue;
			rf->orphan = true;
			tsm_file_drop(fs, f);	/* never copied: nothing to remove */
			ereport(LOG,
					(errmsg("pg_tsmove: file %u (fork %d) of database %u in tablespace \"%s\" belongs to no relation; it is not relocated",
							TSM_REL(f->key.node), f->key.fork, TSM_DB(f->key.node), st->spcname)));
			continue;
		}
		tsm_ctl_note(&job->ctl,
					 "waiting for the transaction that created relfilenode %u in database %u to end",
					 TSM_REL(f->key.node), TSM_DB(f->key.node));
		return false;
	}
	if (st->needs_checkpoint && tsm_last_checkpoint_redo() < st->start_lsn)
	{
		tsm_ctl_note(&job->ctl, "waiting for a checkpoint: the tablespace was created after the last one, "
					 "and crash recovery would replay its creation with the old location");
		return false;
	}
	st->needs_checkpoint = false;
	if (tsm_backup_running(NULL, what, sizeof(what)))
	{
		tsm_ctl_note(&job->ctl, "waiting for %s to end: a backup must not read the tablespace across the switch",
					 what);
		return false;
	}
	if (temporary_files_present(st, what, sizeof(what)))
	{
		tsm_ctl_note(&job->ctl, "waiting for %s to go away (sessions using the tablespace for temporary objects)",
					 what);
		return false;
	}
	return adopt_unlisted_files(job);
}

/*
 * A commit, not an abort: that would release the session lock too.  On a
 * standby, replay resumes first (the commit releases the replay-control
 * lock).
 */
void
tsm_relocation_switch_release(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	tsm_standby_end_pause(st);
	CommitTransactionCommand();
}

/*
 * Tombstones of files dropped during the job whose pending unlink the
 * checkpointer did before the rename: the old one is gone, so the copy
 * goes too (otherwise it would hold the relfilenode forever).
 */
static void
remove_unlinked_tombstones(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		RelocFile  *rf = tsm_reloc_file(fs, f);
		char		old_path[MAXPGPATH];
		char		new_path[MAXPGPATH];

		if (f->key.fork != MAIN_FORKNUM || !rf->tombstone ||
			!(f->gone || !OidIsValid(f->relid)))
			continue;
		tsm_reloc_segment_path(old_path, st->old_dir, f, 0);
		tsm_reloc_segment_path(new_path, st->new_dir, f, 0);
		if (access(old_path, F_OK) != 0 && errno == ENOENT)
			(void) unlink(new_path);
	}
}

/*
 * Every process closes the descriptors it has of the old files
 * (relocation_barrier.c).  Called with interrupts held, or in cleanup.
 */
void
tsm_reloc_release_old_descriptors(TsmRelocation *st)
{
	tsm_barrier_release(st->may_terminate, st->on_standby, st->holders_dir);
	st->barrier_done = true;
}

/*
 * Under the locks, before the rename: the empty segments past the end of
 * each relation this job holds locked, which a truncation (VACUUM) of a
 * relation of more than one segment leaves behind, are created in the new
 * location too: the checkpointer may still hold fsync requests for them,
 * which it carries out through the link, and a missing one PANICs it.
 * Only segments of relations the job has locked: anyone may be writing to
 * another file, and a copy made now would hide its writes until the
 * barrier (tsm_copy_stragglers copies those after it).
 */
static void
create_inactive_segments(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];

		/* on a standby replay is paused: no file changes now */
		if (f->gone ||
			(!st->on_standby && (!OidIsValid(f->relid) || !holds_lock_on(st, f))))
			continue;
		for (int segno = 1;; segno++)
		{
			char		old_path[MAXPGPATH];
			char		new_path[MAXPGPATH];
			struct stat sb;

			tsm_reloc_segment_path(old_path, st->old_dir, f, segno);
			if (stat(old_path, &sb) < 0)
				break;
			tsm_reloc_segment_path(new_path, st->new_dir, f, segno);
			if (sb.st_size == 0 && access(new_path, F_OK) < 0)
				tsm_copy_plain_file(old_path, new_path);
		}
	}
}

/*
 * Under the locks, before the rename, when the switch waits only for the
 * processes that hold files of the old location (relocation_holders.c):
 * the worker has written every dirty buffer of the tablespace
 * (job->flush_under_locks: hint bits set before the locks; writes in
 * progress are waited for), so no process has a page of it to write, and
 * none can read one under the locks: from here no process opens an old
 * file to keep it.  Wait, bounded, until none holds one
 * (relocation_barrier.c); after the rename there is nobody left to wait
 * for.  False, with the locks released and a note, if one does not let go
 * in time.
 */
static bool
holders_let_go(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	int			none_held;

	Assert(job->flush_under_locks);
	st->nholders_left = 0;
	none_held = tsm_barrier_wait_for_holders(st->holders_dir, st->holders_left, &st->nholders_left,
											 TSM_MAX_HOLDERS_KEPT, TSM_HOLDERS_WAIT_MS);
	if (none_held > 0)
		return true;
	tsm_relocation_switch_release(job);
	if (none_held < 0)
	{
		/*
		 * /proc stopped telling: the next attempts probe the whole barrier
		 * before their locks, as where it never told (not here, under the
		 * locks, with no probe made)
		 */
		st->proc_untold = true;
		st->nholders_left = 0;
		tsm_ctl_note(&job->ctl, "/proc did not show a process's open files; from now on every "
					 "process must answer the switch's barrier; retrying");
		return false;
	}
	for (int i = 0; i < st->nholders_left; i++)
		st->holders_left_lxid[i] = tsm_holder_transaction(st->holders_left[i]);
	note_barrier_laggard(job, st->holders_left[0], TSM_HOLDERS_WAIT_MS);
	return false;
}

/*
 * switch_commit: with the locks held and the copy complete and synced,
 * repoint the link and make every process let go of the old files; the
 * locks stay for the worker's reconciliation and switch_end.  False, with
 * the locks released, if a backup or a temporary file appeared since
 * switch_check.
 */
bool
tsm_relocation_switch_commit(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	char		tmp_link[MAXPGPATH];
	char		what[MAXPGPATH + 64];
	ListCell   *lc;
	char	   *link;

	foreach(lc, st->dbs)
	{
		RelocDb    *db = (RelocDb *) lfirst(lc);
		char		path[MAXPGPATH];

		tsm_reloc_make_db_dir(st, db->dbid);
		snprintf(path, sizeof(path), "%s/%u", st->new_dir, db->dbid);
		fsync_fname(path, true);
	}
	fsync_fname(st->new_dir, true);
	fsync_fname(st->new_location, true);
	create_inactive_segments(job);
	tsm_ctl_debug_pause(&job->ctl, "switching");
	/* as late as it can be: the holders' wait (a look after it may find one) */
	if (st->holders_dir != NULL && !holders_let_go(job))
		return false;

	/*
	 * TablespaceCreateLock keeps DROP TABLESPACE (which takes it) from
	 * removing the link under us.  From the rename to the barrier no error
	 * may release the locks (a page changed meanwhile could be written
	 * through an old descriptor): interrupts are held, and what can fail
	 * there is the fsync of pg_tblspc, which PANICs as core's fsyncs do.
	 */
	LWLockAcquire(TablespaceCreateLock, LW_EXCLUSIVE);

	/*
	 * The last look for backups, seconds after switch_check's.  From here
	 * to the rename checkpoints wait (DELAY_CHKPT_START; no abort clears
	 * it: each way out below does, and cleanup after an error): a backup
	 * that starts now lists pg_tblspc only after its start checkpoint, so
	 * it reads the new link; one that started before is seen here
	 * (relocation_backups.c), and the switch waits for it to end.  (On a
	 * standby a backup starts at a restartpoint, which does not wait: one
	 * that starts now may read the old link, and finish waits for it.)
	 */
	Assert((MyProc->delayChkptFlags & DELAY_CHKPT_START) == 0);
	MyProc->delayChkptFlags |= DELAY_CHKPT_START;
	/*
	 * On a standby, no checkpoint may complete from here until the window
	 * is checked (tsm_standby_check_window): one that a promotion allowed
	 * would put the promoted server's writes through old descriptors before
	 * its redo point, out of crash recovery's reach.
	 */
	if (st->on_standby)
		MyProc->delayChkptFlags |= DELAY_CHKPT_COMPLETE;
	pg_memory_barrier();		/* the flag is seen before we read who backs up */
	if (st->on_standby && (!RecoveryInProgress() || PromoteIsTriggered()))
	{
		MyProc->delayChkptFlags &= ~(DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE);
		LWLockRelease(TablespaceCreateLock);
		tsm_standby_end_pause(st);
		tsm_standby_check_not_promoted(st);
	}
	if (tsm_backup_running(NULL, what, sizeof(what)) ||
		temporary_files_present(st, what, sizeof(what)))
	{
		MyProc->delayChkptFlags &= ~(DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE);
		LWLockRelease(TablespaceCreateLock);
		tsm_ctl_note(&job->ctl, "%s appeared just before the switch; retrying", what);
		tsm_relocation_switch_release(job);
		return false;
	}
	st->switched_at = GetCurrentTimestamp();
	tsm_ctl_debug_pause(&job->ctl, "renaming");
	link = tsm_read_tablespace_link(st->spc, st->spcname);
	snprintf(tmp_link, sizeof(tmp_link), "%s.tsmove", st->link_path);
	(void) unlink(tmp_link);
	if (strcmp(link, st->old_location) != 0 || symlink(st->new_location, tmp_link) < 0)
	{
		int			save_errno = errno;

		MyProc->delayChkptFlags &= ~(DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE);
		LWLockRelease(TablespaceCreateLock);
		errno = save_errno;
		if (strcmp(link, st->old_location) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the link of tablespace \"%s\" changed during the relocation",
							st->spcname)));
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create symbolic link \"%s\": %m", tmp_link)));
	}
	HOLD_INTERRUPTS();
	if (rename(tmp_link, st->link_path) < 0)
	{
		int			save_errno = errno;

		RESUME_INTERRUPTS();
		(void) unlink(tmp_link);
		MyProc->delayChkptFlags &= ~(DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE);
		LWLockRelease(TablespaceCreateLock);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rename \"%s\" to \"%s\": %m", tmp_link, st->link_path)));
	}
	job->switch_committed = true;
	job->ctl.stops_held = true; /* until the window is logged (worker.c) */
	(void) fsync_fname_ext("pg_tblspc", true, false, PANIC);
	MyProc->delayChkptFlags &= ~DELAY_CHKPT_START;
	LWLockRelease(TablespaceCreateLock);
	tsm_reloc_release_old_descriptors(st);

	/*
	 * Interrupts stay held, and tsm_ctl_check() throws no cancel or
	 * shutdown (stops_held), until the worker has logged the window's pages
	 * (reconcile.c): it resumes them.
	 */
	tsm_ctl_debug_pause(&job->ctl, "warming");
	if (st->on_standby)
	{
		tsm_standby_check_window(st);
		MyProc->delayChkptFlags &= ~DELAY_CHKPT_COMPLETE;
	}
	return true;
}

/*
 * switch_end: after the barrier and the window's reconciliation (worker.c),
 * with the locks still held: copy what raced the rename, and release them.
 */
void
tsm_relocation_switch_end(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	st->short_copies = tsm_copy_stragglers(st->old_dir, st->new_dir);
	remove_unlinked_tombstones(job);
	st->stragglers_done = true;

	/*
	 * The relations' locks go before the job's row gives the transaction
	 * an xid, which would put them in a running-xacts record for standbys
	 * (lock_relation_unlogged); they protected nothing transactional.  The
	 * guard stays to the commit.
	 */
	Assert(!TransactionIdIsValid(GetTopTransactionIdIfAny()));
	for (int i = 0; i < st->nlocked; i++)
		if (!LockRelease(&st->locked[i], job->switch_lockmode, false))
			elog(LOG, "pg_tsmove job %lld: a switch lock was not held at its release",
				 (long long) job->row.job_id);
	if (st->nlocked > 0)
		job->ctl.progress.switch_ms = tsm_ms_between(job->lock_granted,
													 GetCurrentTimestamp());
	st->nlocked = 0;
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_set_state(job->row.job_id, TSM_WARMING, NULL);
	PopActiveSnapshot();
	tsm_standby_end_pause(st);	/* before the commit frees the lock */
	CommitTransactionCommand();
	if (job->ctl.progress.switch_ms < 0)	/* a standby's: replay paused */
		job->ctl.progress.switch_ms = tsm_ms_between(job->lock_granted,
													 GetCurrentTimestamp());
	tsm_ctl_set_state(&job->ctl, TSM_WARMING);
}
