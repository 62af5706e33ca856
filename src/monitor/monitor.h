/*-------------------------------------------------------------------------
 *
 * monitor.h
 *	  The monitoring's interface to the rest of pg_tsmove: what _PG_init
 *	  and the shared-memory hooks (pg_tsmove.c) call, and the entry points
 *	  of its background workers, which the postmaster looks up by name.
 *	  Nothing else of monitor/ is seen from outside it, and the monitoring
 *	  calls nothing of the move (api/ to jobs/, jobs/jobs.h), nor the move
 *	  anything of it.
 *
 * Layering inside monitor/.  A file calls only the files listed below it,
 * never one above, so the calls go one way (the order in which the sampler
 * and tsmove.monitor_info() reach the parts):
 *
 *	monitor.c		set-up: defines the GUCs, sizes and creates the shared
 *					memory, keeps the file across clean restarts,
 *					tsmove.monitor_info(); registers the sampler.  May call
 *					every file below.
 *	sampler.c		the sampler worker, the monitoring's clock: an I/O
 *					sample, a concurrency tick, the history's bucket, the
 *					relation map's schedule.  Calls tablespace_io.c,
 *					coaccess.c, history.c, relation_map.c, common.c; and,
 *					the one call out of monitor/, starts the autopilot's
 *					pilot while it is on (autopilot/autopilot.h).
 *	tablespace_io.c per-tablespace I/O; feeds history.c and recent_io.c
 *					and asks relation_map.c where a relation lives.  Calls
 *					those three and common.c.
 *	coaccess.c		co-access pairs (executor hooks, concurrency ticks).
 *	history.c		the load history ring.
 *	recent_io.c		each relation's recent reads and changes, decayed.
 *	relation_map.c	relation -> tablespace, and its refresh workers.
 *					These four call only common.c.
 *	common.c		the GUCs' variables, the named locks, the preload
 *					check.  Calls nothing.
 *
 * The shared memory of each part and the lock that guards it are in
 * monitor_internal.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_MONITOR_H
#define TSM_MONITOR_H

#include "postgres.h"

#include "fmgr.h"

/* monitor.c: called from _PG_init and the shared-memory hooks */
extern void tsm_monitor_init(void);
extern void tsm_monitor_register_workers(void);
extern void tsm_monitor_shmem_request(void);
extern void tsm_monitor_shmem_startup(void);

/* Background workers, started by name (sampler.c, relation_map.c). */
extern PGDLLEXPORT void tsm_sampler_main(Datum main_arg);
extern PGDLLEXPORT void tsm_relmap_refresh_main(Datum main_arg);

#endif							/* TSM_MONITOR_H */
