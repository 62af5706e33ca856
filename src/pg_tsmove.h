/*-------------------------------------------------------------------------
 *
 * pg_tsmove.h
 *	  What every file of pg_tsmove shares: compat.h, and the map of the
 *	  source tree.
 *
 * The source tree, top down; a file calls only into what is below it:
 *
 *	pg_tsmove.c		_PG_init: the move engine's GUCs, the shared-memory
 *					hooks, the static workers' registration.  Calls each
 *					subsystem through its one interface header.
 *	move/			the move engine: tsmove.move(), move_tablespace(),
 *					relocate_tablespace() and the functions that steer
 *					jobs; the launcher, the workers that run jobs, and the
 *					crash recovery.  Interface: move/move.h, whose header
 *					says which of its files may call which.
 *	monitor/		the monitoring: per-tablespace I/O, co-access, load
 *					history, and their sampler.  Interface:
 *					monitor/monitor.h, which says the same for its files.
 *	compat.h		every difference between PostgreSQL versions, as
 *					static inline wrappers; used by both subsystems.
 *
 * move/ and monitor/ do not call each other.  Each subsystem keeps the
 * declarations its files share in headers of its own folder, which no
 * file outside that folder includes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PG_TSMOVE_H
#define PG_TSMOVE_H

#include "postgres.h"

#include "compat.h"

#endif							/* PG_TSMOVE_H */
