/*-------------------------------------------------------------------------
 *
 * move.h
 *	  The move engine's interface to the rest of pg_tsmove: what _PG_init
 *	  and the shared-memory hooks (pg_tsmove.c) call, the variables of the
 *	  GUCs it defines, and the entry points of the engine's background
 *	  workers, which the postmaster looks up by name.  Nothing else of
 *	  move/ is seen from outside it; the engine calls nothing of the
 *	  monitoring (monitor/), nor the monitoring anything of it.
 *
 * Layering inside move/.  The files in four layers, top down; a file calls
 * only files below it (in its own layer, only those it names), never one
 * above, so the calls go one way:
 *
 * 1. What starts work.  Nothing calls these: SQL calls the API, the
 *	  postmaster starts the launcher, the launcher starts the workers by
 *	  name.
 *	job_api.c		tsmove.move(), wait(), cancel(), pause(), set_rate(), ...
 *	tablespace_api.c tsmove.move_tablespace(), relocate_tablespace()
 *					Both insert rows and tell the launcher, through
 *					submit.c, job_record.c and queue.c; job_api.c also
 *					resume.c and relation_storage.c (cancelling a queued
 *					job that had files).  Neither calls a front end or
 *					the engine.
 *	launcher.c		the queue's dispatcher: queue.c, resume.c (the jobs'
 *					slots), settings.c.
 *	recovery.c		the recovery worker: relocation_recovery.c,
 *					relation_storage.c, resume.c, job_control.c,
 *					job_record.c, queue.c.
 *	worker.c		the job driver, the only caller of the front ends, of
 *					the copy and the mirror, and of a switch; also
 *					fileset.c, resume.c, job_control.c,
 *					switch_blockers.c, job_record.c, queue.c.
 *
 * 2. The front ends (frontend.h), called only by worker.c.  They call
 *	  layers 3 and 4, never each other, copy.c or mirror.c.
 *	relation_move.c a relation's new files and locks, warming, the old
 *					files; also resume.c, submit.c, relation_storage.c.
 *	relation_switch.c the relation's switch; also switch_blockers.c.
 *	relocation_*.c	a tablespace's relocation, in four files whose calls
 *					go one way (relocation_internal.h): finish ->
 *					switch -> files, and recovery -> files, the part
 *					recovery.c calls.  Also submit.c, switch_blockers.c
 *					and the helpers
 *					relocation_{backups,barrier,dbcatalog,marks}.c.
 *
 * 3. The engine (engine.h).
 *	copy.c			pages through shared buffers to the sink: fileset.c,
 *					job_control.c.
 *	mirror.c		changed blocks from the WAL: fileset.c.
 *	resume.c		resume points: fileset.c, relation_storage.c,
 *					durable_file.c.
 *	fileset.c		the files, cursors and dirty blocks: nothing.
 *
 * 4. Services, each calling only those after it here.
 *	submit.c		what may move; the submission: job_record.c, queue.c.
 *	job_control.c	a running job's state, budget, checks, sleeps:
 *					job_record.c, pacing.c, queue.c.
 *	pacing.c, switch_blockers.c: settings.c only.
 *	relation_storage.c, relocation_backups.c, relocation_barrier.c,
 *	relocation_dbcatalog.c: nothing.
 *	relocation_marks.c	whose directory a relocation's is: durable_file.c.
 *	durable_file.c	a small file written whole and durably: nothing.
 *	job_record.c	the job table, the names of states: nothing.
 *	queue.c			the shared state (slots, pending databases):
 *					settings.c.
 *	settings.c		the GUCs' variables: nothing.
 *
 * Every file may read settings.c's variables.  pg_tsmove.c, above move/,
 * calls queue.c, relocation_backups.c and launcher.c through this header.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_MOVE_H
#define TSM_MOVE_H

#include "postgres.h"

#include "fmgr.h"

#include "pg_tsmove.h"

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

/* queue.c: the shared state, sized and created by the shared-memory hooks */
extern Size tsm_queue_shmem_size(void);
extern void tsm_queue_shmem_init(void);

/* relocation_backups.c: the marks of running backups, and its hooks */
extern Size tsm_backups_shmem_size(void);
extern void tsm_backups_shmem_init(void);
extern void tsm_backups_init(void);

/* launcher.c */
extern void tsm_register_launcher(void);

/* Background workers, started by name (launcher.c, recovery.c, worker.c). */
extern PGDLLEXPORT void tsm_launcher_main(Datum main_arg);
extern PGDLLEXPORT void tsm_recovery_main(Datum main_arg);
extern PGDLLEXPORT void tsm_worker_main(Datum main_arg);

#endif							/* TSM_MOVE_H */
