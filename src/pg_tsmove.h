/*-------------------------------------------------------------------------
 *
 * pg_tsmove.h
 *	  What every file of pg_tsmove shares: compat.h, and the map of the
 *	  source tree.
 *
 * The source tree, top down; a file calls only into what is below it
 * (tools/check-layers.py checks it on the built objects):
 *
 *	pg_tsmove.c		_PG_init: the move's GUCs, the shared-memory hooks, the
 *					static workers' registration.  Calls each folder
 *					through its interface header.
 *	api/			tsmove.move(), move_tablespace(), relocate_tablespace()
 *					and the functions that steer jobs: rows in the job
 *					table, and a word to the launcher.
 *	workers/		the launcher, the job worker that drives a job through
 *					its phases, the recovery worker (workers/workers.h).
 *	relation/		the relation move's front end and switch
 *					(relation/relation.h).
 *	relocation/		the tablespace relocation's front end, switch, crash
 *					recovery and backup watch (relocation/relocation.h).
 *	engine/			what both front ends share: the copy through shared
 *					buffers, the WAL mirror, the file set, resume points,
 *					the switch's blockers (engine/engine.h, and
 *					engine/frontend.h, the contract of a front end).
 *	jobs/			the job table, the queue's shared state, a running
 *					job's control and pacing, the settings (jobs/jobs.h).
 *	monitor/		the monitoring: per-tablespace I/O, co-access, load
 *					history, and their sampler (monitor/monitor.h).
 *	autopilot/		the autonomic loop: the pilot and its steps
 *					(autopilot/autopilot.h); it moves through SQL.
 *	compat.h		every difference between PostgreSQL versions, as
 *					static inline wrappers; used everywhere.
 *
 * The move's folders (api/ to jobs/) and monitor/ do not call each other.
 * A folder keeps what only its files share in a *_internal.h, which no
 * file outside it includes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PG_TSMOVE_H
#define PG_TSMOVE_H

#include "postgres.h"

#include "compat.h"

#endif							/* PG_TSMOVE_H */
