/*-------------------------------------------------------------------------
 *
 * jobs.h
 *	  The job machinery every move shares, at the bottom of the move's
 *	  folders: the variables of the move's GUCs, and the map of jobs/.
 *
 * Files, each calling only those after it here:
 *	submit.c		what may move; the submission of a job: job_record.c,
 *					queue.c (submit.h)
 *	job_control.c	a running job's state, budget, checks, pauses, sleeps:
 *					job_record.c, pacing.c, queue.c (job_control.h)
 *	pacing.c		adaptive pacing from what the foreground feels
 *					(pacing.h)
 *	job_record.c	the job table, the names of states and modes
 *					(job_record.h)
 *	queue.c			the shared state: worker slots, pending databases,
 *					the preload check (queue.h, which has the lock rules)
 *	settings.c		the GUCs' variables, declared below
 *	durable_file.c	a small file written whole and durably (durable_file.h)
 *
 * The move's folders, top down (pg_tsmove.h has the whole map; each
 * folder's header says what it may call; tools/check-layers.py checks it):
 *	api/			SQL functions that submit and steer jobs -> engine/, jobs/
 *	workers/		launcher, job worker, recovery worker -> relation/,
 *					relocation/, engine/, jobs/
 *	relation/		the relation move's front end -> engine/, jobs/
 *	relocation/		the tablespace relocation's front end -> engine/, jobs/
 *	engine/			copy, mirror, file set, resume points -> jobs/
 *	jobs/			this folder: calls nothing outside itself
 *
 * Every file may read settings.c's variables.  pg_tsmove.c defines the
 * GUCs, and sizes and creates queue.c's shared memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_JOBS_H
#define TSM_JOBS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"

#include "pg_tsmove.h"

/* Milliseconds from one timestamp to another (negative if it is earlier). */
static inline double
tsm_ms_between(TimestampTz from, TimestampTz to)
{
	return (double) (to - from) / 1000.0;
}

/* How a worker paces its copy (pg_tsmove.pacing). */
typedef enum TsmPacing
{
	TSM_PACING_ADAPTIVE,		/* by what the foreground feels, up to the
								 * job's rate */
	TSM_PACING_FIXED			/* at the job's rate */
} TsmPacing;

/* settings.c: the variables of the GUCs that _PG_init defines */
extern double tsm_max_rate_mb;
extern int	tsm_switch_lock_timeout_ms;
extern int	tsm_switch_cancel_blockers_after_ms;
extern int	tsm_switch_timed_wait_ms;
extern int	tsm_switch_terminate_client_writers_after_ms;
extern int	tsm_max_workers;
extern int	tsm_switch_backlog_blocks;
extern bool tsm_yield_to_ddl;
extern char *tsm_debug_pause_at;
extern int	tsm_pacing;
extern double tsm_total_max_rate_mb;
extern double tsm_min_rate_mb;
extern int	tsm_pacing_target_pct;
extern bool tsm_resume_after_restart;
extern int	tsm_resume_interval_s;
extern int	tsm_max_retained_wal_mb;
extern bool tsm_relocation_switch_admits_readers;

/* queue.c: the shared state, sized and created by the shared-memory hooks */
extern Size tsm_queue_shmem_size(void);
extern void tsm_queue_shmem_init(void);

#endif							/* TSM_JOBS_H */
