/*-------------------------------------------------------------------------
 *
 * workers.h
 *	  The background workers that run the moves: the launcher (the queue's
 *	  dispatcher, a static worker), the job worker that drives one job
 *	  through its phases, and the recovery worker that cleans up after a
 *	  crash.
 *
 * Files:
 *	launcher.c		starts job and recovery workers by name, per database
 *	worker.c		the job driver: the only caller of the front ends
 *					(relation/, relocation/), of the copy and the mirror
 *					(engine/), and of a switch
 *	recovery.c		jobs a crash left mid-way: resume, or drop their files
 *
 * Who calls whom: pg_tsmove.c registers the launcher; the postmaster starts
 * the workers by name.  workers/ calls relation/, relocation/, engine/ and
 * jobs/; nothing calls workers/ (the launcher and api/ only wake each
 * other through jobs/queue.c's latches).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_WORKERS_H
#define TSM_WORKERS_H

#include "postgres.h"

#include "fmgr.h"

/* launcher.c */
extern void tsm_register_launcher(void);

/* Background workers, started by name (launcher.c, recovery.c, worker.c). */
extern PGDLLEXPORT void tsm_launcher_main(Datum main_arg);
extern PGDLLEXPORT void tsm_recovery_main(Datum main_arg);
extern PGDLLEXPORT void tsm_worker_main(Datum main_arg);

#endif							/* TSM_WORKERS_H */
