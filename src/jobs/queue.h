/*-------------------------------------------------------------------------
 *
 * queue.h
 *	  What a job is (its kind, mode, states and counters), and the shared
 *	  state of the move engine: the queue of databases with work, and one
 *	  slot per running worker (queue.c).  The bottom of move/, with
 *	  settings.c: every other file of the engine may use it.
 *
 * A move is a job: a row in tsmove.job (the durable record, job_record.c)
 * plus, while it runs, a worker slot in shared memory (the live record:
 * state, counters, cancel request, rate).
 *
 * The queue is the job table itself.  tsmove.move() only inserts rows
 * ('queued'); when its transaction commits it marks its database pending
 * and wakes the launcher (launcher.c), which starts a worker there if
 * fewer than pg_tsmove.max_workers run.  A worker claims queued jobs of its
 * database one at a time (FOR UPDATE SKIP LOCKED) and exits when none is
 * left.  So a queued row always has the queue that will run it: rows of a
 * transaction that has not committed are invisible to workers, and after
 * a restart the launcher's recovery pass marks every database with queued
 * rows pending again.
 *
 * Locking of the shared state: TsmShared->lock guards every field of
 * TsmShared, the pending-database table and every slot.  The launcher takes
 * it exclusively to claim a slot for a worker it starts; a worker to publish
 * its job and counters (a few times a second), to charge the budget all
 * workers share (every TSM_TOTAL_BUDGET_CHUNK bytes) and to release its
 * slot; backends to mark a database pending, to request a cancel or a rate
 * change, a pause or a resume.  Readers (tsmove.jobs, wait) take it shared.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_QUEUE_H
#define TSM_QUEUE_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "storage/block.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/relcache.h"

#include "jobs/jobs.h"

/* A table moves with its TOAST table and TOAST index: at most three files. */
#define TSM_MAX_MEMBERS 3

/* Databases with queued jobs the launcher keeps track of at once. */
#define TSM_MAX_PENDING_DBS 64

/* Length of the notes that say why a job or a queue waits. */
#define TSM_NOTE_LEN 160

typedef enum TsmJobState
{
	TSM_QUEUED,
	TSM_PREPARING,
	TSM_COPYING,
	TSM_CATCHING_UP,
	TSM_SWITCHING,
	TSM_WARMING,
	TSM_DONE,
	TSM_FAILED,
	TSM_CANCELLED,
	TSM_SKIPPED,				/* never ran: move_tablespace() says why */
	TSM_PAUSED					/* tsmove.pause(): copies nothing until
								 * tsmove.resume() */
} TsmJobState;

/* Whether a job in this state has ended. */
static inline bool
tsm_state_is_final(TsmJobState state)
{
	return state == TSM_DONE || state == TSM_FAILED || state == TSM_CANCELLED ||
		state == TSM_SKIPPED;
}

/* What a job does: move one relation, or relocate a whole tablespace. */
typedef enum TsmJobKind
{
	TSM_KIND_MOVE,
	TSM_KIND_RELOCATE
} TsmJobKind;

/* How a relation move treats writers while it copies. */
typedef enum TsmMoveMode
{
	TSM_MODE_ONLINE,			/* writes go on and are mirrored */
	TSM_MODE_QUIESCE,			/* writes wait (ExclusiveLock) */
	TSM_MODE_EXCLUSIVE			/* everything waits (AccessExclusiveLock):
								 * unlogged relations, whose changes cannot
								 * be mirrored */
} TsmMoveMode;

/* What a running job publishes and finally writes to its row. */
typedef struct TsmProgress
{
	TsmJobState state;
	int64		blocks_total;
	int64		blocks_copied;
	int64		blocks_recopied;
	int64		dirty_backlog;
	int64		blocks_under_lock;	/* copied while holding the switch's locks */
	int64		bytes_written;
	int64		wal_bytes;
	double		rate_mb_s;
	double		pace_mb_s;		/* the adaptive pace now; 0 with fixed pacing */
	int			switch_attempts;
	double		lock_wait_ms;
	double		switch_ms;		/* < 0 until the switch happened */
	char		note[TSM_NOTE_LEN]; /* why the job waits, if it does */
} TsmProgress;

/* One worker, in shared memory; claimed by the launcher, freed by the worker. */
typedef struct TsmWorkerSlot
{
	bool		in_use;
	Oid			dbid;
	TimestampTz launched_at;
	int			pid;			/* 0 until the worker runs */
	Latch	   *latch;
	bool		queue_empty;	/* it exits because nothing was left to claim */
	bool		local;			/* it runs this server's local jobs
								 * (local_jobs.h), not tsmove.job's */

	/* the job it runs now; 0 between jobs */
	int64		job_id;
	TsmJobKind	kind;
	Oid			relid;			/* a relation move's relation */
	Oid			source_spc;		/* a relocation: both are its tablespace */
	Oid			target_spc;
	int64		cancel_job_id;	/* tsmove.cancel() asked this job to stop */
	bool		pause_requested;	/* tsmove.pause() asked it to hold still */
	double		max_rate_mb;	/* byte budget, MB/s, 0 = unthrottled */
	TsmProgress progress;
} TsmWorkerSlot;

/* A database whose queued jobs may need a worker. */
typedef struct TsmPendingDb
{
	Oid			dbid;			/* InvalidOid: entry free */
	bool		pending;		/* start a worker there when a slot frees */
	bool		needs_recovery; /* a worker died inside a job there */
	TimestampTz not_before;		/* back-off after a failed start */
	int			failed_starts;
	char		note[TSM_NOTE_LEN]; /* why its queue waits, if it does */
} TsmPendingDb;

typedef struct TsmShared
{
	LWLock	   *lock;
	LWLock	   *local_jobs_lock;	/* the files of local jobs (local_jobs.h) */
	Latch	   *launcher_latch; /* NULL while no launcher runs */
	bool		pending_overflow;	/* a database did not fit in pending[] */

	/*
	 * pg_tsmove.total_max_rate_mb, the budget all workers share: the time
	 * at which the bytes charged so far are paid for (a virtual clock that
	 * never lags now by more than a short burst).
	 */
	TimestampTz total_budget_paid_until;
	TsmPendingDb pending[TSM_MAX_PENDING_DBS];

	/*
	 * Set just before a PANIC that relies on crash recovery (a standby's
	 * switch that a promotion overtook, relocation_standby.c); a restart
	 * makes new shared memory, so whoever finds it set after the PANIC
	 * knows that the postmaster did not restart (tsm_crash_was_skipped).
	 */
	pg_atomic_uint32 crash_requested;
	int			nslots;
	TsmWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} TsmShared;

/* queue.c: the shared state, the pending databases, the slots */
extern TsmShared *tsm_shared;

extern void tsm_require_preload(void);
extern void tsm_note_crash_requested(void);
extern bool tsm_crash_was_skipped(void);
extern TsmPendingDb *tsm_pending_entry(Oid dbid, bool create);
extern void tsm_pending_back_off(TsmPendingDb *e, const char *note);
extern void tsm_pending_forget_if_idle(TsmPendingDb *e);
extern void tsm_mark_database_pending(Oid dbid, bool needs_recovery);
extern void tsm_worker_exited(Oid dbid, bool queue_empty, bool died_in_job);
extern bool tsm_database_has_pending_work(Oid dbid);
extern int	tsm_running_workers_locked(void);
extern int	tsm_running_workers(void);
extern void tsm_queue_note(Oid dbid, char *note, Size len);
extern TsmWorkerSlot *tsm_find_slot_for_job(int64 job_id);
extern void tsm_wake_launcher(void);
extern int	tsm_running_relocations(Oid *spcs, int64 *jobs, int max);

#endif							/* TSM_QUEUE_H */
