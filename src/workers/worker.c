/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The move worker: a dynamic background worker the launcher starts in a
 *	  database with queued jobs.  It claims them one at a time, oldest first
 *	  (a table's index jobs right behind it), drives each through
 *
 *	  queued -> preparing -> copying -> catching_up -> switching -> warming
 *	  -> done, or on any error or cancel: cleanup -> failed | cancelled,
 *
 *	  and exits when nothing is left that it can run.  tsmove.pause() holds
 *	  a copying or catching-up job still ('paused') until tsmove.resume().
 *
 * This is the only module that drives a job, the top of the engine: it calls
 * the job's front end (relation_move.c and relation_switch.c for a relation,
 * the relocation_*.c files for a tablespace; the interface is in frontend.h,
 * the two TsmFrontEnds below), the engine (copy.c, mirror.c, fileset.c),
 * resume.c, job_control.c and what is below them, and nothing calls back up
 * into it: the launcher starts it by name.  Every phase is the same for
 * both:
 *	- prepare (front end);
 *	- the mirror starts reading the WAL (a temporary replication slot),
 *	  before the first page is copied;
 *	- copying: every file once, in short transactions of TSM_BATCH_BLOCKS
 *	  blocks, reading the WAL between batches, within the byte budget;
 *	  then fsync, with no lock held;
 *	- catching_up: copy again what changed until the backlog is small
 *	  (pg_tsmove.switch_backlog_blocks), then attempt the switch; when the
 *	  front end cannot take its locks in time, back off while mirroring;
 *	- switching: with the locks held, flush the WAL, read it to its end,
 *	  copy the last dirty blocks and the files that must be copied under
 *	  the locks, fsync, and let the front end commit the switch;
 *	- finish (front end), then the old files' drop (front end) in the
 *	  transaction that records the job as done.
 *
 * The worker connects as the bootstrap superuser and overrides what the
 * database owner could have set for it (ALTER DATABASE ... SET
 * search_path, default_transaction_isolation, ...).  It runs each job as
 * the role that submitted it, in a security-restricted operation.  Every
 * transaction is short; none holds a snapshot or an XID while it sleeps.
 *
 * VACUUM: while one reads the file system the job reads from and adaptive
 * pacing finds the others below its target with the copy at its floor,
 * the bulk copy holds still at the same pause points, for up to
 * TSM_VACUUM_HOLD_MS at a time and at most TSM_VACUUM_HELD_PER_COPIED
 * times as long in all as its batches ran (hold_while_vacuum_reads_source).
 *
 * Pause: the job stops copying at its next pause point (between two
 * batches, outside any transaction) and keeps what it holds: its worker,
 * its session lock, its files, and its reading of the WAL, so the dirty
 * sets stay exact and its slot keeps little WAL; resume needs no catch-up
 * of the WAL.  It gives back what it costs others: no page is copied.
 *
 * Resume points (a relation move that mirrors, resume.c): right after
 * prepare and then every pg_tsmove.resume_interval, the worker reads the
 * WAL, fsyncs the new files, writes the resume point and moves its
 * persistent slot there.  A job interrupted by SIGTERM (shutdown,
 * pg_terminate_backend) or a crash keeps its files, slot and resume point
 * when pg_tsmove.resume_after_restart is on; the recovery pass queues it
 * again and the next worker resumes it (job->row.resuming).
 *
 * Errors and cancel (tsmove.cancel, pg_cancel_backend) end in abort_job():
 * the front end removes what the job created unless the switch committed,
 * and the row says why; a failed or cancelled table job ends its chain.
 * A worker that dies inside a job leaves it to the recovery pass
 * (recovery.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_authid.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "engine/resume.h"
#include "jobs/local_jobs.h"
#include "relation/relation.h"
#include "relocation/relocation.h"
#include "workers/workers.h"

/* Blocks copied between two looks at the WAL, the cancel flag and progress. */
#define TSM_BATCH_BLOCKS 64
/* Rounds whose backlog does not shrink before the view says so. */
#define TSM_STALLED_ROUNDS 3
/* Pause of a catch-up round in which no file could be copied. */
#define TSM_IDLE_ROUND_MS 100
/* Failed switch attempts after which the view suggests a longer lock timeout. */
#define TSM_SWITCH_ATTEMPTS_BEFORE_HINT 20
/* Longest look at a blocked switch's blockers before an attempt as usual. */
#define TSM_WATCH_ROUND_MS 10000
/* How often a paused job reads the WAL and looks for tsmove.resume(). */
#define TSM_PAUSED_POLL_MS 200

/*
 * The two front ends (frontend.h): which function does each phase of a
 * relation move (relation_move.c, its switch in relation_switch.c) and of a
 * tablespace relocation (relocation_files.c, its switch in
 * relocation_switch.c, its end in relocation_finish.c).  Gathered here, so
 * that the worker is the only caller of a switch, as it is of the copy and
 * the mirror.
 */
static const TsmFrontEnd relation_move = {
	.settle = NULL,
	.prepare = tsm_relation_prepare,
	.guard = NULL,
	.switch_lock = tsm_relation_switch_lock,
	.switch_check = tsm_relation_switch_check,
	.switch_release = tsm_relation_switch_release,
	.switch_commit = tsm_relation_switch_commit,
	.switch_end = NULL,
	.finish = tsm_relation_finish,
	.drop_old = tsm_relation_drop_old,
	.cleanup = tsm_relation_cleanup,
};

static const TsmFrontEnd tablespace_relocation = {
	.settle = tsm_relocation_settle,
	.prepare = tsm_relocation_prepare,
	.guard = tsm_relocation_guard,
	.switch_lock = tsm_relocation_switch_lock,
	.switch_check = tsm_relocation_switch_check,
	.switch_release = tsm_relocation_switch_release,
	.switch_commit = tsm_relocation_switch_commit,
	.switch_end = tsm_relocation_switch_end,
	.finish = tsm_relocation_finish,
	.drop_old = NULL,
	.cleanup = tsm_relocation_cleanup,
};

/* The file the next copy batch starts with (files are visited in turn). */
static int	next_file = 0;

/*
 * before_shmem_exit: free the slot and tell the launcher how the worker
 * ended.  Not finding anything to claim is the normal end; any other (a
 * failed connection, SIGTERM) leaves queued jobs that need another worker,
 * and a worker that dies inside a job leaves it to the recovery pass.
 */
static void
release_slot(int code, Datum arg)
{
	Oid			dbid;
	bool		queue_empty;
	bool		died_in_job;

	if (tsm_my_slot == NULL)
		return;
	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	dbid = tsm_my_slot->dbid;
	queue_empty = tsm_my_slot->queue_empty;
	died_in_job = tsm_my_slot->job_id != 0 &&
		!tsm_state_is_final(tsm_my_slot->progress.state);
	tsm_my_slot->in_use = false;
	tsm_my_slot->latch = NULL;
	tsm_my_slot->pid = 0;
	tsm_my_slot->job_id = 0;
	LWLockRelease(tsm_shared->lock);
	tsm_worker_exited(dbid, queue_empty, died_in_job);
}

/* Whether f has blocks to copy now: never a file copied under the locks. */
static bool
file_has_work(TsmFile *f, bool include_dirty)
{
	if (f->gone || f->when == TSM_COPY_LOCKED)
		return false;
	return f->copy_cursor < f->nblocks || (include_dirty && f->dirty.count > 0);
}

/*
 * Make a resume point if the job is resumable and pg_tsmove.resume_interval
 * has passed since the last one (or force): read the WAL, fsync the new
 * files, write the point, then let the slot go of the WAL before it.  The
 * row gets the counters too.  Outside any transaction.
 */
static void
make_resume_point(TsmJob *job, bool force)
{
	TimestampTz now = GetCurrentTimestamp();
	XLogRecPtr	lsn;

	if (!job->resumable ||
		(!force && !TimestampDifferenceExceeds(job->last_resume_point, now,
											   tsm_resume_interval_s * 1000)))
		return;
	tsm_mirror_drain(&job->mirror, &job->files);
	lsn = tsm_mirror_position(&job->mirror);
	tsm_job_start_transaction();
	tsm_fileset_sync(&job->files);
	CommitTransactionCommand();
	tsm_resume_write(MyDatabaseId, job->row.job_id, lsn, &job->files,
					 job->row.target_spc, job->row.nmembers, job->row.new_nodes);
	tsm_mirror_keep_from(&job->mirror, lsn);
	if (job->ctl.progress.state != TSM_PAUSED)
		tsm_ctl_save(&job->ctl, NULL);
	job->last_resume_point = now;
}

/*
 * A pause point: if tsmove.pause() asked, hold still until tsmove.resume(),
 * reading the WAL and making resume points meanwhile.  Outside any
 * transaction.
 */
static void
hold_while_paused(TsmJob *job)
{
	TsmJobCtl  *ctl = &job->ctl;
	TsmJobState was = ctl->progress.state;

	if (!ctl->pause_requested)
		return;
	tsm_ctl_note(ctl, "paused: tsmove.resume(%lld) lets it go on",
				 (long long) job->row.job_id);
	tsm_ctl_set_state(ctl, TSM_PAUSED);
	ereport(LOG, (errmsg("pg_tsmove: job %lld paused", (long long) job->row.job_id)));
	while (ctl->pause_requested)
	{
		tsm_mirror_drain(&job->mirror, &job->files);
		make_resume_point(job, false);
		tsm_ctl_publish(ctl, false);
		tsm_ctl_sleep(ctl, TSM_PAUSED_POLL_MS);
	}
	ereport(LOG, (errmsg("pg_tsmove: job %lld resumed", (long long) job->row.job_id)));
	tsm_ctl_note(ctl, "%s", "");
	ctl->budget_rate = -1;		/* a new budget, with no credit from the pause */
	tsm_ctl_set_state(ctl, was);
}

/*
 * Whether the bulk copy may go on holding still, holding_ms into a hold:
 * it has held still for less than TSM_VACUUM_HELD_PER_COPIED times as long
 * as its batches have run (pauses, resume points and the mirror's reading
 * not counted), so that a move takes at most that many times longer (plus
 * one); adaptive pacing (a reload may change it) with no one waiting on the
 * job's lock; and no pause asked for.
 */
static bool
bulk_copy_may_hold(TsmJob *job, double holding_ms)
{
	TsmJobCtl  *ctl = &job->ctl;
	TsmVacuumYield *y = &job->vacuum_yield;

	return tsm_pacing == TSM_PACING_ADAPTIVE && !ctl->others_wait &&
		!ctl->pause_requested &&
		y->held_ms + holding_ms < TSM_VACUUM_HELD_PER_COPIED * y->copied_ms;
}

/*
 * A pause point of the bulk copy: while a VACUUM or ANALYZE reads the file
 * system the job reads from, and adaptive pacing's last decision would
 * have cut the pace below its floor (the others are below
 * pg_tsmove.pacing_target with the copy as slow as the floor lets it be),
 * hold still, reading the WAL and making resume points meanwhile; for at
 * most TSM_VACUUM_HOLD_MS at a time, and within bulk_copy_may_hold()'s
 * bound.  The others already lose throughput to the VACUUM: in the
 * evaluation the update streams fell to 55-63 % of their warm-up rate
 * beside autovacuum alone, to 44-47 % with the copy at its floor beside
 * it.  Not in the catch-up: a catch-up that holds still has more to
 * re-copy after, at a floor that grows with its backlog (in the
 * evaluation the worst 5 s moved there, 46 %), and while a long VACUUM
 * lasts it might not converge.  Outside any transaction.
 */
static void
hold_while_vacuum_reads_source(TsmJob *job)
{
	TsmJobCtl  *ctl = &job->ctl;
	TsmVacuumYield *y = &job->vacuum_yield;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz start = now;
	char		was[sizeof(ctl->progress.note)];
	const char *command = "VACUUM";
	Oid			relid;

	if (now < y->next_look || !ctl->pacer.held_at_floor || !bulk_copy_may_hold(job, 0))
		return;
	y->next_look = TimestampTzPlusMilliseconds(now, TSM_VACUUM_LOOK_MS);
	relid = tsm_vacuum_reading(job->row.source_spc, &command);
	if (!OidIsValid(relid))
		return;

	memcpy(was, ctl->progress.note, sizeof(was));
	while (OidIsValid(relid) &&
		   !TimestampDifferenceExceeds(start, now, TSM_VACUUM_HOLD_MS) &&
		   bulk_copy_may_hold(job, tsm_ms_between(start, now)))
	{
		tsm_ctl_note(ctl, "the copy holds still while %s of relation %u reads the source's "
					 "file system (for up to %d s at a time)", command, relid,
					 TSM_VACUUM_HOLD_MS / 1000);
		tsm_ctl_publish(ctl, now == start);
		tsm_mirror_drain(&job->mirror, &job->files);
		make_resume_point(job, false);
		tsm_ctl_sleep(ctl, TSM_VACUUM_LOOK_MS);
		relid = tsm_vacuum_reading(job->row.source_spc, &command);
		now = GetCurrentTimestamp();
	}
	y->held_ms += tsm_ms_between(start, now);
	y->next_look = TimestampTzPlusMilliseconds(now, TSM_VACUUM_LOOK_MS);
	elog(DEBUG1, "pg_tsmove: job %lld: the copy held still for %.0f ms for a VACUUM "
		 "(%.0f ms in all, after %.0f ms of copying)", (long long) job->row.job_id,
		 tsm_ms_between(start, now), y->held_ms, y->copied_ms);
	tsm_ctl_note(ctl, "%s", was);
	tsm_ctl_publish(ctl, true);
	ctl->budget_rate = -1;		/* a new budget, with no credit from the hold */
	tsm_pacer_restart(&ctl->pacer);
}

/*
 * Copy up to max_blocks pending blocks, visiting the files in turn, in
 * short transactions of TSM_BATCH_BLOCKS and reading the WAL between them.
 * The front end's guard locks each file's relation first where the job
 * does not hold it.  Returns the number of blocks copied; fewer than asked
 * when every file that has work is out of reach (guard said not now) or
 * done.
 */
static int64
copy_round(TsmJob *job, int64 max_blocks, bool include_dirty)
{
	TsmFileSet *fs = &job->files;
	int64		copied = 0;

	while (copied < max_blocks && fs->nfiles > 0)
	{
		int64		batch = 0;
		int			visited = 0;
		TimestampTz batch_start = GetCurrentTimestamp();

		tsm_job_start_transaction();
		while (batch < TSM_BATCH_BLOCKS && visited < fs->nfiles &&
			   copied + batch < max_blocks)
		{
			TsmFile    *f = fs->order[next_file % fs->nfiles];
			int64		want = Min(TSM_BATCH_BLOCKS - batch, max_blocks - copied - batch);
			int64		n = 0;
			TsmGuard	guard = TSM_GUARD_OK;

			if (file_has_work(f, include_dirty) && job->front->guard)
				guard = job->front->guard(job, f);
			if (guard == TSM_GUARD_LOCKED)
				tsm_mirror_drain(&job->mirror, fs);
			if (guard != TSM_GUARD_SKIP && file_has_work(f, include_dirty))
				n = tsm_copy_file(fs, f, want, include_dirty, true);
			batch += n;
			if (n < want)
			{
				next_file = (next_file + 1) % fs->nfiles;
				visited++;
			}
		}
		CommitTransactionCommand();
		copied += batch;
		if (!include_dirty)
			job->vacuum_yield.copied_ms += tsm_ms_between(batch_start, GetCurrentTimestamp());

		tsm_mirror_drain(&job->mirror, fs);
		tsm_ctl_publish(&job->ctl, false);
		tsm_ctl_check(&job->ctl);
		make_resume_point(job, false);
		if (batch > 0 && !include_dirty)
			hold_while_vacuum_reads_source(job);
		hold_while_paused(job);
		if (batch == 0)
			break;
	}
	return copied;
}

/*
 * After a switch that let readers on (frontend.h): every old descriptor is
 * closed and writers still wait.  Read the WAL of the window, from the
 * drain before the last copy to now, and log whole every page it changed
 * (reconcile.c).
 */
static void
reconcile_window(TsmJob *job)
{
	TsmFileSet *fs = &job->files;
	int64		reconciled = 0;

	tsm_flush_all_wal();
	tsm_mirror_drain(&job->mirror, fs);
	tsm_ctl_debug_pause(&job->ctl, "reconciling");
	for (int i = 0; i < fs->nfiles; i++)
		reconciled += tsm_reconcile_file(fs, fs->order[i]);
	if (reconciled > 0)
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld logged whole %lld pages that readers changed during its switch",
						(long long) job->row.job_id, (long long) reconciled)));
}

/* Where a switch's time under its locks went, for the server log. */
typedef struct SwitchTiming
{
	TimestampTz drained;		/* the WAL read to its end */
	TimestampTz dirty_copied;	/* the last changed blocks copied */
	TimestampTz whole_copied;	/* the files copied under the locks */
	TimestampTz synced;			/* the new files fsynced */
	int64		recopied;		/* blocks_recopied when the locks came */
	int64		recopied_here;	/* of them, by this worker */
	int64		read_in;		/* of those, read in (scattered reads) */
	int64		whole;			/* blocks_under_lock when the locks came */
} SwitchTiming;

/*
 * One LOG line per committed switch: what its locks were held for, so that
 * a DBA (and the evaluation) can tell a slow device from a big backlog.
 */
static void
log_switch_timing(TsmJob *job, const SwitchTiming *t)
{
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld switched: WAL read in %.1f ms, %lld changed blocks "
					"copied in %.1f ms, %lld blocks of whole files in %.1f ms, fsync %.1f ms, "
					"then %.1f ms to the commit; before the locks this worker re-copied "
					"%lld blocks, %lld of them read in",
					(long long) job->row.job_id,
					tsm_ms_between(job->lock_granted, t->drained),
					(long long) (job->ctl.progress.blocks_recopied - t->recopied),
					tsm_ms_between(t->drained, t->dirty_copied),
					(long long) (job->ctl.progress.blocks_under_lock - t->whole),
					tsm_ms_between(t->dirty_copied, t->whole_copied),
					tsm_ms_between(t->whole_copied, t->synced),
					tsm_ms_between(t->synced, GetCurrentTimestamp()),
					(long long) t->recopied_here, (long long) t->read_in)));
}

/*
 * One switch attempt.  Returns true if the switch committed, false if the
 * front end could not take its locks in time or found it must wait.
 */
static bool
try_switch(TsmJob *job)
{
	TsmFileSet *fs = &job->files;
	TimestampTz requested = GetCurrentTimestamp();
	SwitchTiming timing;
	int			timed_wait_ms;
	bool		locked;
	char		who[160];

	job->ctl.progress.switch_attempts++;
	elog(DEBUG1, "pg_tsmove: job %lld: switch attempt %d, this worker re-copied %lld blocks "
		 "before, %lld of them read in",
		 (long long) job->row.job_id, job->ctl.progress.switch_attempts,
		 (long long) tsm_ctl_recopied_here(&job->ctl),
		 (long long) job->ctl.scattered_reads);
	job->ctl.progress.note[0] = '\0';
	job->flush_under_locks = false;
	fs->register_syncs = false;
	timed_wait_ms = job->block.timed_wait_ms;
	locked = job->front->switch_lock(job);
	job->block.timed_wait_ms = 0;	/* the next attempt is timed anew */
	if (!locked)
	{
		job->ctl.progress.lock_wait_ms +=
			tsm_ms_between(requested, GetCurrentTimestamp());
		if (job->ctl.progress.note[0] != '\0')
			return false;		/* the front end said why */
		tsm_switch_blockers_named(&job->block, who, sizeof(who));
		if (timed_wait_ms > 0)
			tsm_ctl_note(&job->ctl,
						 "switch attempt %d, timed to the predicted end of the transactions that "
						 "block it, could not get its locks within %d ms%s%s; retrying",
						 job->ctl.progress.switch_attempts, timed_wait_ms,
						 who[0] ? ", held by " : "", who);
		else if (job->ctl.progress.switch_attempts < TSM_SWITCH_ATTEMPTS_BEFORE_HINT)
			tsm_ctl_note(&job->ctl,
						 "switch attempt %d could not get its locks within %d ms%s%s; retrying",
						 job->ctl.progress.switch_attempts, tsm_switch_lock_timeout_ms,
						 who[0] ? ", held by " : "", who);
		else
			tsm_ctl_note(&job->ctl,
						 "switch attempt %d could not get its locks within %d ms: %s hold%s them "
						 "longer; raising pg_tsmove.switch_lock_timeout lets the switch wait for them "
						 "(later queries wait as long), pg_tsmove.switch_cancel_blockers_after cancels "
						 "their queries",
						 job->ctl.progress.switch_attempts, tsm_switch_lock_timeout_ms,
						 who[0] ? who : "sessions", who[0] && job->block.nblockers == 1 ? "s" : "");
		return false;
	}
	job->lock_granted = GetCurrentTimestamp();
	job->ctl.progress.lock_wait_ms += tsm_ms_between(requested, job->lock_granted);
	/* every page written before the request was synced (catch_up_and_switch) */
	fs->sync_redo = GetRedoRecPtr();
	fs->register_syncs = true;

	/* Nothing changes the files now; make sure the reader sees everything. */
	tsm_flush_all_wal();
	tsm_mirror_drain(&job->mirror, fs);
	timing.drained = GetCurrentTimestamp();
	timing.recopied = job->ctl.progress.blocks_recopied;
	timing.recopied_here = tsm_ctl_recopied_here(&job->ctl);
	timing.read_in = job->ctl.scattered_reads;
	timing.whole = job->ctl.progress.blocks_under_lock;
	/* what readers prune from here on is logged for a cleanup lock's replay */
	if (job->switch_lockmode != AccessExclusiveLock)
		tsm_fileset_track_moved(fs);
	if (!job->front->switch_check(job))
	{
		fs->register_syncs = false;
		job->front->switch_release(job);
		return false;
	}
	tsm_ctl_set_state(&job->ctl, TSM_SWITCHING);
	/*
	 * A file copied once (a relocated FSM: its changes are not WAL-logged)
	 * that grew since: its new blocks too, or buffers past the copy's end
	 * would meet "unexpected data beyond EOF" after the switch.
	 */
	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		BlockNumber source_blocks;

		if (f->gone || f->when != TSM_COPY_ONCE)
			continue;
		source_blocks = tsm_source_nblocks(f);
		if (source_blocks > Max(f->nblocks, f->copy_cursor))
			tsm_file_set_extent(fs, f, source_blocks, f->copy_cursor);
	}
	/*
	 * readers of old files must see the copy, and (flush_under_locks) no
	 * process may have a page of them to write: every page copied is
	 * written
	 */
	fs->flush_source = job->switch_lockmode != AccessExclusiveLock || job->flush_under_locks;
	for (int i = 0; i < fs->nfiles; i++)
		if (file_has_work(fs->order[i], true))
			tsm_copy_file(fs, fs->order[i], PG_INT64_MAX, true, false);
	timing.dirty_copied = GetCurrentTimestamp();
	for (int i = 0; i < fs->nfiles; i++)
		if (fs->order[i]->when == TSM_COPY_LOCKED)
			tsm_copy_file_whole(fs, fs->order[i]);
	timing.whole_copied = GetCurrentTimestamp();
	fs->flush_source = false;
	tsm_fileset_sync(fs);
	fs->register_syncs = false;
	if (job->flush_under_locks)
		tsm_fileset_flush_buffers(fs);
	timing.synced = GetCurrentTimestamp();
	if (!job->front->switch_commit(job))
		return false;
	log_switch_timing(job, &timing);
	if (job->front->switch_end)
	{
		/*
		 * No cancel or shutdown from the rename to the last page logged: the
		 * primary's pages and the WAL would stay apart.  switch_commit
		 * returned with interrupts held and stops_held set.
		 */
		if (job->switch_lockmode != AccessExclusiveLock)
			reconcile_window(job);
		job->ctl.stops_held = false;
		RESUME_INTERRUPTS();
		job->front->switch_end(job);
	}
	return true;
}

/*
 * The mode of the switch's relation locks: AccessExclusiveLock, or for a
 * relocation with pg_tsmove.relocation_switch_admits_readers,
 * ExclusiveLock, which lets readers on (frontend.h).  Not where hint bits
 * are WAL-logged (data checksums, wal_log_hints): a reader's hint bit on a
 * page read back in the window is logged as a plain image, which a standby
 * restores under its queries' pins (reconcile.c).  Fixed for the job: on
 * 15 to 19 neither setting changes while the server runs.
 */
static LOCKMODE
switch_lockmode_for(TsmJob *job)
{
	/* a standby's relocation takes no lock: it pauses replay (relocation_standby.c) */
	if (job->row.kind != TSM_KIND_RELOCATE || !tsm_relocation_switch_admits_readers ||
		tsm_job_is_local(job->row.job_id))
		return AccessExclusiveLock;
	if (XLogHintBitIsNeeded())
	{
		ereport(LOG,
				(errmsg("pg_tsmove job %lld: the switch takes AccessExclusiveLock although "
						"pg_tsmove.relocation_switch_admits_readers is on",
						(long long) job->row.job_id),
				 errdetail("With data checksums or wal_log_hints, a page image that a "
						   "reader's hint bit logs during the switch could reach a standby "
						   "query that holds the page.")));
		return AccessExclusiveLock;
	}
	return ExclusiveLock;
}

/*
 * After a failed attempt, with pg_tsmove.switch_timed_wait on, instead of
 * the back-off's sleep (backoff_ms): look at the sessions that block the
 * switch every TSM_WATCH_INTERVAL_MS, learning how long their transactions
 * last, until an attempt timed to their ends is due (switch_blockers.c);
 * while one of them is not timed, only for backoff_ms; at most until the
 * backlog has grown past switch_backlog_blocks, a pause is asked for or
 * TSM_WATCH_ROUND_MS have passed.  Reads the WAL meanwhile.  Returns false, having done nothing,
 * when timed attempts are off or nothing blocked the last attempt.
 */
static bool
watch_blockers_for_a_timed_attempt(TsmJob *job, long backoff_ms)
{
	TimestampTz started = GetCurrentTimestamp();
	TimestampTz until = TimestampTzPlusMilliseconds(started, TSM_WATCH_ROUND_MS);
	TimestampTz backoff_until = TimestampTzPlusMilliseconds(started, backoff_ms);
	int			looks = 0;
	bool		held_off_noted = false;

	if (tsm_switch_timed_wait_ms <= 0 || job->block.ntags == 0 ||
		job->block.blocked_since == 0)
		return false;
	for (;;)
	{
		TimestampTz now;
		TsmTimedAttempt timed;

		tsm_switch_block_watch(&job->block);
		looks++;
		if (looks % (TSM_VACUUM_LOOK_MS / TSM_WATCH_INTERVAL_MS) == 1)
			tsm_switch_block_look_at_vacuums(&job->block);
		timed = tsm_switch_block_timed(&job->block, false);
		if (job->block.line_up_held_off && !held_off_noted)
		{
			/* for the round: the next attempt's note replaces it */
			tsm_ctl_note(&job->ctl, "the readers that block the switch are not lined up while %s "
						 "(for up to %d s at a time)", job->block.vacuum_what,
						 TSM_VACUUM_HOLD_MS / 1000);
			tsm_ctl_publish(&job->ctl, true);
			held_off_noted = true;
		}
		now = GetCurrentTimestamp();
		if (timed == TSM_TIMED_NOW || now >= until || job->ctl.pause_requested ||
			(timed == TSM_TIMED_NEVER && now >= backoff_until))
			break;
		if (looks % 10 == 0)
		{
			tsm_mirror_drain(&job->mirror, &job->files);
			if (tsm_fileset_backlog(&job->files) > tsm_switch_backlog_blocks)
				break;
		}
		tsm_ctl_sleep(&job->ctl, TSM_WATCH_INTERVAL_MS);
	}
	if (message_level_is_interesting(DEBUG1))
	{
		char		what[512];

		tsm_switch_block_describe(&job->block, what, sizeof(what));
		elog(DEBUG1, "pg_tsmove: job %lld: watched %d looks, %s; %s",
			 (long long) job->row.job_id, looks,
			 job->block.timed_wait_ms > 0 ? "an attempt is timed now" : "no attempt timed",
			 what);
	}
	return true;
}

/*
 * catching_up: copy again what changed until the backlog is small enough
 * for a short switch, then try the switch; when it cannot happen now, back
 * off while mirroring and try again.
 */
static void
catch_up_and_switch(TsmJob *job)
{
	TsmJobCtl  *ctl = &job->ctl;
	int64		previous_backlog = -1;
	int			stalled_rounds = 0;
	long		backoff_ms = 0;

	tsm_ctl_set_state(ctl, TSM_CATCHING_UP);
	for (;;)
	{
		int64		backlog;

		tsm_ctl_check(ctl);
		hold_while_paused(job);
		tsm_mirror_drain(&job->mirror, &job->files);
		backlog = tsm_fileset_backlog(&job->files);

		if (backlog <= tsm_switch_backlog_blocks)
		{
			/*
			 * The backlog is copied unlocked, so that the locks cover only
			 * what changes from here to their grant: copied under them, its
			 * blocks could be read from a device other readers keep busy
			 * (milliseconds each).  What was copied since the last sync is
			 * synced unlocked; so are the buffers the switch writes to the
			 * old files.
			 */
			if (backlog > 0)
				(void) copy_round(job, backlog, true);
			tsm_job_start_transaction();
			tsm_fileset_sync(&job->files);
			if (job->switch_lockmode != AccessExclusiveLock || job->flushes_before_switch)
				tsm_fileset_flush_buffers(&job->files);
			CommitTransactionCommand();
			if (try_switch(job))
				return;
			tsm_ctl_set_state(ctl, TSM_CATCHING_UP);
			backoff_ms = Min(Max(backoff_ms * 2, 50), 1000);
			tsm_ctl_publish(ctl, true);
			if (!watch_blockers_for_a_timed_attempt(job, backoff_ms + random() % (backoff_ms + 1)))
				tsm_ctl_sleep(ctl, backoff_ms + random() % (backoff_ms + 1));
			continue;
		}

		job->block.timed_wait_ms = 0;	/* copying first: no attempt timed now */
		if (previous_backlog >= 0 && backlog >= previous_backlog)
			stalled_rounds++;
		else
			stalled_rounds = 0;
		if (stalled_rounds >= TSM_STALLED_ROUNDS)
			tsm_ctl_note(ctl, "writes outpace the copy: %lld blocks still dirty at %.1f MB/s; "
						 "raise the rate with tsmove.set_rate()",
						 (long long) backlog, ctl->max_rate_mb);
		else if (ctl->progress.switch_attempts == 0)
			tsm_ctl_note(ctl, "%s", "");
		previous_backlog = backlog;

		if (copy_round(job, backlog, true) == 0)
			tsm_ctl_sleep(ctl, TSM_IDLE_ROUND_MS);
	}
}

/*
 * Run a claimed job to its end.  Throws on error; abort_job() cleans up.
 * settle runs before the mirror starts, so that what it waits for is not
 * in the WAL the mirror reads.  The mirror starts before prepare lists the
 * files: a change made after
 * the listing is then always in the WAL it reads.  Only a relation moved
 * under AccessExclusiveLock needs none: nothing can change it.
 */
static void
run_job(TsmJob *job)
{
	char		slot_name[NAMEDATALEN];

	job->needs_mirror = !(job->row.kind == TSM_KIND_MOVE &&
						  job->row.mode == TSM_MODE_EXCLUSIVE);
	job->resumable = job->needs_mirror && job->row.kind == TSM_KIND_MOVE;
	tsm_resume_slot_name(slot_name, MyDatabaseId, job->row.job_id);
	if (job->front->settle)
		job->front->settle(job);
	if (job->needs_mirror && !job->row.resuming)
		tsm_mirror_start(&job->mirror, job->cxt, slot_name, job->resumable,
						 InvalidXLogRecPtr);
	job->front->prepare(job);
	if (job->row.resuming)
		tsm_mirror_start(&job->mirror, job->cxt, slot_name, true, job->resume_lsn);
	make_resume_point(job, true);

	tsm_ctl_set_state(&job->ctl, TSM_COPYING);
	tsm_ctl_debug_pause(&job->ctl, "copying");
	copy_round(job, PG_INT64_MAX, false);
	/* sync the bulk copy now, with no lock held: the switch syncs little */
	tsm_job_start_transaction();
	tsm_fileset_sync(&job->files);
	CommitTransactionCommand();

	catch_up_and_switch(job);
	tsm_mirror_stop(&job->mirror, false);
	tsm_resume_forget(MyDatabaseId, job->row.job_id);
	job->front->finish(job);

	/*
	 * The old files go with the commit that records the end: after a crash
	 * the row says 'warming' while they are still there.
	 */
	job->ctl.progress.state = TSM_DONE;
	tsm_ctl_note(&job->ctl, "%s", "");
	tsm_job_start_transaction();
	if (job->front->drop_old)
		job->front->drop_old(job);
	tsm_ctl_save_in_transaction(&job->ctl, NULL);

	/*
	 * Shared memory says 'done' before the row does: tsmove.jobs shows the
	 * live state while the worker holds the job, and a session that saw the
	 * committed row (tsmove.wait()) must not then see 'warming' there.
	 */
	tsm_ctl_publish(&job->ctl, true);
	CommitTransactionCommand();
}

/*
 * Turn an error into the job's end: the front end removes what the job
 * created unless the switch committed; the row records the state and the
 * message.
 */
static void
abort_job(TsmJob *job, ErrorData *edata)
{
	bool		cancelled = (edata->sqlerrcode == ERRCODE_QUERY_CANCELED);
	const char *volatile message = edata->message;

	/*
	 * Runs with interrupts held.  An ERROR caught below resets
	 * InterruptHoldoffCount to zero (errfinish does, before its longjmp):
	 * each catch restores it, or the caller's RESUME_INTERRUPTS() would
	 * wrap the count around and hold every interrupt of this worker for
	 * good.
	 */
	const uint32 holdoff = InterruptHoldoffCount;

	job->ctl.stops_held = false;
	job->files.register_syncs = false;	/* an error under the switch's locks */
	AbortOutOfAnyTransaction();

	/*
	 * Interrupted, not failed: leave the files, the slot and the resume
	 * point for the recovery pass to queue the job again.  The worker exits
	 * (and its session locks go with it).
	 */
	if (edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN && job->resumable &&
		tsm_resume_after_restart && !job->switch_committed &&
		tsm_resume_exists(MyDatabaseId, job->row.job_id))
	{
		tsm_mirror_stop(&job->mirror, true);
		tsm_mark_database_pending(MyDatabaseId, true);
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted; it will resume from its last resume point",
						(long long) job->row.job_id)));
		return;
	}

	tsm_mirror_stop(&job->mirror, false);
	tsm_resume_forget(MyDatabaseId, job->row.job_id);

	/*
	 * Cleanup first, in transactions of its own, so that nothing is orphaned
	 * even if the row cannot be written (DROP EXTENSION, say).
	 */
	PG_TRY();
	{
		job->front->cleanup(job);
	}
	PG_CATCH();
	{
		/* the error zeroed the count our caller's HOLD_INTERRUPTS() raised */
		InterruptHoldoffCount = holdoff;
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		ereport(WARNING,
				(errmsg("pg_tsmove could not clean up after job %lld; "
						"the recovery pass will finish it",
						(long long) job->row.job_id)));
		tsm_mark_database_pending(MyDatabaseId, true);
	}
	PG_END_TRY();

	if (job->switch_committed)
	{
		job->ctl.progress.state = TSM_DONE;
		message = psprintf("moved; then stopped while finishing: %s", edata->message);
	}
	else
		job->ctl.progress.state = cancelled ? TSM_CANCELLED : TSM_FAILED;

	tsm_ctl_publish(&job->ctl, true);	/* before the row: see run_job() */
	PG_TRY();
	{
		tsm_ctl_save(&job->ctl, message);
	}
	PG_CATCH();
	{
		InterruptHoldoffCount = holdoff;
		EmitErrorReport();
		FlushErrorState();
		AbortOutOfAnyTransaction();
		ereport(WARNING,
				(errmsg("pg_tsmove could not record the end of job %lld (%s)",
						(long long) job->row.job_id,
						tsm_state_name(job->ctl.progress.state))));
	}
	PG_END_TRY();
}

/*
 * Claim the next job this worker can run, and publish it in the slot
 * before the claim commits.  Returns false if none can run now.  If more
 * could, wakes the launcher, which may start a second worker.  (Not
 * inlined into run_next_job(), whose PG_TRY would make its locals
 * volatile.)
 */
pg_noinline static bool
claim_job(TsmJob *job)
{
	bool		found;
	bool		more = false;

	tsm_job_start_transaction();
	PushActiveSnapshot(GetTransactionSnapshot());
	MemoryContextSwitchTo(job->cxt);
	found = tsm_my_slot->local ? tsm_localjob_claim_next(&job->row) :
		tsm_jobrec_claim_next(&job->row);
	if (found)
	{
		TsmClaimedJob *row = &job->row;

		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		tsm_my_slot->job_id = row->job_id;
		tsm_my_slot->kind = row->kind;
		tsm_my_slot->relid = row->relid;
		tsm_my_slot->source_spc = row->source_spc;
		tsm_my_slot->target_spc = row->target_spc;
		tsm_my_slot->max_rate_mb = row->max_rate_mb;
		tsm_my_slot->cancel_job_id = 0;
		tsm_my_slot->pause_requested = row->pause_requested;
		memset(&tsm_my_slot->progress, 0, sizeof(TsmProgress));
		tsm_my_slot->progress.state = TSM_PREPARING;
		tsm_my_slot->progress.switch_ms = -1;
		LWLockRelease(tsm_shared->lock);

		more = !tsm_my_slot->local && tsm_jobrec_has_claimable();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	if (more)
		tsm_mark_database_pending(MyDatabaseId, false);
	return found;
}

/*
 * Claim and run one job to its end.  Never throws.  Returns false if there
 * was no job to claim.
 */
static bool
run_next_job(void)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "pg_tsmove job",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	TsmJob	   *job = palloc0(sizeof(TsmJob));
	bool		claimed;

	job->cxt = cxt;
	claimed = claim_job(job);
	MemoryContextSwitchTo(cxt);
	if (claimed)
	{
		job->front = job->row.kind == TSM_KIND_RELOCATE ?
			&tablespace_relocation : &relation_move;
		tsm_ctl_init(&job->ctl, job->row.job_id, job->row.relname,
					 job->row.max_rate_mb);
		job->ctl.pause_requested = job->row.pause_requested;
		job->ctl.others_wait = (job->row.kind == TSM_KIND_MOVE &&
								job->row.mode != TSM_MODE_ONLINE);
		job->switch_lockmode = switch_lockmode_for(job);
		tsm_switch_block_init(&job->block, job->row.job_id, job->row.relname,
							  job->row.submitted_by, job->switch_lockmode,
							  job->row.source_spc);
		if (job->row.resuming)
			tsm_ctl_continue_counters(&job->ctl, &job->row.earlier);
		next_file = 0;
		tsm_job_run_as(job->row.submitted_by);
		PG_TRY();
		{
			run_job(job);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			HOLD_INTERRUPTS();
			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			EmitErrorReport();
			FlushErrorState();
			abort_job(job, edata);
			RESUME_INTERRUPTS();
		}
		PG_END_TRY();
		tsm_job_run_as(InvalidOid);
		tsm_fileset_free(&job->files);

		LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
		tsm_my_slot->job_id = 0;
		tsm_my_slot->relid = InvalidOid;
		tsm_my_slot->source_spc = tsm_my_slot->target_spc = InvalidOid;
		LWLockRelease(tsm_shared->lock);
	}

	MemoryContextSwitchTo(oldcxt);
	MemoryContextDelete(cxt);
	return claimed;
}

/* Whether pg_tsmove is installed in the database the worker is in. */
static bool
extension_installed(void)
{
	bool		installed;

	tsm_job_start_transaction();
	installed = OidIsValid(get_extension_oid("pg_tsmove", true));
	CommitTransactionCommand();
	return installed;
}

void
tsm_worker_main(Datum main_arg)
{
	int			slot_index = DatumGetInt32(main_arg);
	Oid			dbid;

	pqsignal(SIGTERM, tsm_ctl_sigterm);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();

	tsm_my_slot = &tsm_shared->slots[slot_index];
	before_shmem_exit(release_slot, 0);

	LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
	dbid = tsm_my_slot->dbid;
	tsm_my_slot->pid = MyProcPid;
	tsm_my_slot->latch = MyLatch;
	LWLockRelease(tsm_shared->lock);

	/*
	 * Connect as the bootstrap superuser, which can always log in; each job
	 * runs as its submitter, and the job table is written as the superuser
	 * (job_record.c).
	 */
	BackgroundWorkerInitializeConnectionByOid(dbid, BOOTSTRAP_SUPERUSERID, 0);
	tsm_worker_session_settings();
	pgstat_report_appname("pg_tsmove");

	if (!extension_installed())
	{
		tsm_my_slot->queue_empty = true;
		proc_exit(0);
	}
	while (!tsm_ctl_shutdown_requested())
	{
		if (!run_next_job())
		{
			LWLockAcquire(tsm_shared->lock, LW_EXCLUSIVE);
			tsm_my_slot->queue_empty = true;
			LWLockRelease(tsm_shared->lock);
			break;
		}
	}
	proc_exit(0);
}
