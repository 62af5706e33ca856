/*-------------------------------------------------------------------------
 *
 * settings.c
 *	  The variables behind the move engine's GUCs.
 *
 * _PG_init (pg_tsmove.c) defines the GUCs and points each at its variable
 * here, as core's GUC tables point at variables that the modules using
 * them define; so every file of the move's folders reads its settings without calling
 * up into the extension's entry point.  The defaults below are the GUCs'
 * boot values; pg_tsmove.c states them again, as DefineCustom*Variable
 * wants.
 *
 * This file is at the bottom of move/: it calls nothing.
 *
 * Locks: none; each process reads its own copy of the settings.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "jobs/jobs.h"

double		tsm_max_rate_mb = 0.0;
int			tsm_switch_lock_timeout_ms = 20;
int			tsm_switch_cancel_blockers_after_ms = -1;
int			tsm_switch_timed_wait_ms = 1000;
int			tsm_switch_terminate_client_writers_after_ms = -1;
int			tsm_max_workers = 2;
int			tsm_switch_backlog_blocks = 256;
bool		tsm_yield_to_ddl = true;
char	   *tsm_debug_pause_at = NULL;
int			tsm_pacing = TSM_PACING_ADAPTIVE;
double		tsm_total_max_rate_mb = 0.0;
double		tsm_min_rate_mb = 1.0;
int			tsm_pacing_target_pct = 95;
bool		tsm_resume_after_restart = true;
int			tsm_resume_interval_s = 30;
int			tsm_max_retained_wal_mb = 16384;
bool		tsm_relocation_switch_admits_readers = false;
