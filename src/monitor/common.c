/*-------------------------------------------------------------------------
 *
 * common.c
 *	  What every part of pg_tsmove's monitoring shares, at the bottom of
 *	  monitor/: the variables behind its GUCs, its named locks, and the
 *	  check that the library was preloaded.
 *
 * The GUCs are defined by tsm_monitor_init() (monitor.c); their variables
 * live here so that the parts read them without calling up into the file
 * that sets them up.  The same for the locks: monitor.c requests the
 * "pg_tsmove monitor" tranche, and each part takes its own lock from it
 * when it creates its shared memory.  This file calls no other file of
 * pg_tsmove.
 *
 * Locks: none of its own; which lock guards what is in monitor_internal.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/lwlock.h"

#include "monitor/monitor_internal.h"

bool		tsm_track_coaccess = true;
int			tsm_sample_interval_ms = 10000;
int			tsm_coaccess_sample_interval_ms = 100;
int			tsm_coaccess_max_pairs = 5000;
int			tsm_history_interval_s = 60;
int			tsm_history_size = 10080;
int			tsm_relation_map_size = 20000;
int			tsm_relation_map_refresh_s = 30;
bool		tsm_save_monitoring = true;

/* Set by tsm_monitor_shmem_startup() once every part's memory exists. */
bool		tsm_monitor_ready = false;

LWLock *
tsm_monitor_lock(int which)
{
	return &(GetNamedLWLockTranche("pg_tsmove monitor"))[which].lock;
}

/*
 * Error out unless the library was preloaded: the sampler and the shared
 * structures exist only then.
 */
void
tsm_monitor_require_preload(void)
{
	if (!tsm_monitor_ready)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("pg_tsmove must be loaded via shared_preload_libraries"),
				 errhint("Add pg_tsmove to shared_preload_libraries in postgresql.conf and restart the server.")));
}
