/*-------------------------------------------------------------------------
 *
 * autopilot.h
 *	  The autopilot's interface to the rest of pg_tsmove: what _PG_init and
 *	  the shared-memory hooks (pg_tsmove.c) call, and the entry points of
 *	  its background workers.  The autopilot closes the essay's loop: it
 *	  reads what the monitoring measured, decides by the DBA's policy what
 *	  to move, starts the move, logs the decision and later measures whether
 *	  the move brought what it predicted.
 *
 * Layering.  The autopilot calls neither the move (api/ to jobs/) nor the
 * monitoring (monitor/) in C: it reaches both through their SQL surface
 * (tsmove.advise_candidates(), tsmove.move(), the history), from the
 * function tsmove.autopilot_step() in the extension's script, which holds
 * the decision itself.  The C part is the plumbing a SQL function cannot
 * have: a cluster-wide clock, a worker per database, and the policy GUCs
 * with their checks.
 *
 *	autopilot.c		set-up: the policy GUCs and their check hooks, the
 *					shared memory, the pilot's start (the sampler calls
 *					tsm_autopilot_ensure_pilot(): the pilot runs only
 *					while pg_tsmove.autopilot is not off).
 *	pilot.c			the pilot worker (one per cluster, the loop) and the
 *					step worker (one per database and step, short-lived).
 *
 * The shared state and its lock rule are in autopilot_internal.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_AUTOPILOT_H
#define TSM_AUTOPILOT_H

#include "postgres.h"

#include "fmgr.h"

/* autopilot.c: called from _PG_init and the shared-memory hooks */
extern void tsm_autopilot_init(void);
extern void tsm_autopilot_ensure_pilot(void);	/* the sampler's pass */
extern Size tsm_autopilot_shmem_size(void);
extern void tsm_autopilot_shmem_init(void);

/* Background workers, started by name (pilot.c). */
extern PGDLLEXPORT void tsm_autopilot_main(Datum main_arg);
extern PGDLLEXPORT void tsm_autopilot_step_main(Datum main_arg);

#endif							/* TSM_AUTOPILOT_H */
