/*-------------------------------------------------------------------------
 *
 * pg_tsmove.c
 *	  Module start-up: the move engine's GUCs, the shared-memory hooks, the
 *	  launcher's registration.  The top of the source tree: it calls the
 *	  move's folders through jobs/jobs.h, jobs/queue.h,
 *	  relocation/relocation.h and workers/workers.h, the monitoring (monitor/)
 *	  through monitor/monitor.h and the autopilot (autopilot/) through
 *	  autopilot/autopilot.h, and nothing calls it (pg_tsmove.h).
 *
 * pg_tsmove must be in shared_preload_libraries: its worker slots live in
 * shared memory sized at start-up, and its launcher (workers/launcher.c) is a
 * static background worker that cleans up after crashes.  Functions that
 * need either call tsm_require_preload() (jobs/queue.c) first.
 *
 * The GUCs of the move engine are defined here; their variables live in
 * jobs/settings.c, beside the code that reads them.
 *
 * Shared memory is one TsmShared with one slot per possible background
 * worker (max_worker_processes), so pg_tsmove.max_workers can be changed
 * with a reload.  The lock rules are in jobs/queue.h.
 *
 * Monitoring (monitor/monitor.c and the files it names) hooks in through
 * four calls: tsm_monitor_init() and tsm_monitor_register_workers() from
 * _PG_init, tsm_monitor_shmem_request() and tsm_monitor_shmem_startup()
 * from the shared-memory hooks below.  The autopilot (autopilot/) likewise,
 * through autopilot/autopilot.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/postmaster.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/guc.h"

#include "autopilot/autopilot.h"
#include "jobs/jobs.h"
#include "jobs/queue.h"
#include "monitor/monitor.h"
#include "pg_tsmove.h"
#include "relocation/relocation.h"
#include "workers/workers.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static const struct config_enum_entry pacing_options[] = {
	{"adaptive", TSM_PACING_ADAPTIVE, false},
	{"fixed", TSM_PACING_FIXED, false},
	{NULL, 0, false}
};

static void
tsm_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(tsm_queue_shmem_size());
	RequestAddinShmemSpace(tsm_backups_shmem_size());
	RequestAddinShmemSpace(tsm_autopilot_shmem_size());
	RequestNamedLWLockTranche("pg_tsmove", 2);	/* jobs/queue.c */
	tsm_monitor_shmem_request();
}

static void
tsm_shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	tsm_queue_shmem_init();
	tsm_backups_shmem_init();
	tsm_autopilot_shmem_init();
	LWLockRelease(AddinShmemInitLock);
	tsm_monitor_shmem_startup();
}

void
_PG_init(void)
{
	DefineCustomRealVariable("pg_tsmove.max_rate_mb",
							 "Default ceiling of a move's byte rate, in MB per second (0 = none).",
							 "Counts the pages written to the new files and the WAL that logs them. "
							 "With pg_tsmove.pacing = fixed a move runs at this rate, 0 meaning unthrottled; "
							 "with adaptive pacing it is the highest pace. "
							 "tsmove.move(max_rate_mb => ...) and tsmove.set_rate() override it per job.",
							 &tsm_max_rate_mb,
							 0.0, 0.0, 1.0e6,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("pg_tsmove.pacing",
							 "How moves pace themselves: adaptive or fixed.",
							 "adaptive: as fast as the other sessions' throughput allows (pg_tsmove.pacing_target), "
							 "never above the job's max_rate_mb nor below pg_tsmove.min_rate_mb; "
							 "fixed: at the job's max_rate_mb.",
							 &tsm_pacing,
							 TSM_PACING_ADAPTIVE, pacing_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.pacing_target",
							"Share of the other sessions' throughput adaptive pacing keeps, in percent.",
							"The pace falls when transactions per second drop below this share of what they "
							"are while the move holds still, and rises while they do not.",
							&tsm_pacing_target_pct,
							95, 50, 100,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomRealVariable("pg_tsmove.min_rate_mb",
							 "Lowest pace of adaptive pacing, in MB per second.",
							 "Adaptive pacing also stays above the rate at which other sessions change "
							 "pages the job has copied, plus a quarter of their changes ahead of the copy "
							 "and a tenth of its catch-up's backlog a second, so that the move converges "
							 "(in MB of pages and their WAL; a re-copy read in from outside shared "
							 "buffers counts 16 kB more).",
							 &tsm_min_rate_mb,
							 1.0, 0.1, 1.0e6,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomRealVariable("pg_tsmove.total_max_rate_mb",
							 "Ceiling of the sum of the byte rates of all running moves, in MB per second (0 = none).",
							 "Applies on top of each job's own rate, across databases.",
							 &tsm_total_max_rate_mb,
							 0.0, 0.0, 1.0e6,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("pg_tsmove.resume_after_restart",
							 "Whether a relation move interrupted by a restart or crash continues where it was.",
							 "On: it continues from its last resume point; off: its new files are removed "
							 "and it is marked failed.",
							 &tsm_resume_after_restart,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.resume_interval",
							"Time between two resume points of a relation move.",
							"At each, the new files are fsynced and the WAL from there on is kept, so a restart "
							"loses at most this much of the copy.",
							&tsm_resume_interval_s,
							30, 1, 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.max_retained_wal",
							"Most WAL a move's replication slot may keep before the move fails.",
							"A move that waits for a worker, or whose reading of the WAL falls behind, "
							"keeps the WAL from its last resume point; past this it fails and releases it.",
							&tsm_max_retained_wal_mb,
							16384, 64, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.switch_lock_timeout",
							"Longest wait for the exclusive lock of one switch attempt.",
							"A queued exclusive lock request blocks every later query of the relation, "
							"so each attempt gives up after this long, keeps mirroring and tries again.",
							&tsm_switch_lock_timeout_ms,
							20, 1, 60000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.switch_timed_wait",
							"Longest wait of a switch attempt timed to the predicted end of the transactions that block it.",
							"While readers block a switch, the worker learns how long each blocking session's "
							"transactions last and requests the locks just before they are due to end, waiting "
							"up to this long (later queries wait as long); when they never end together, an "
							"attempt every 5 s waits this long, which lines them up (held off for up to 30 s while "
							"autovacuum works in the database or a VACUUM reads the source's file system). "
							"0 turns this off.",
							&tsm_switch_timed_wait_ms,
							1000, 0, 10000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("pg_tsmove.relocation_switch_admits_readers",
							 "Experimental: a relocation's switch lets readers on (ExclusiveLock).",
							 "Off: the switch takes AccessExclusiveLock on every relation of the tablespace, "
							 "as a relation move's does. On: ExclusiveLock, which only writers wait for and "
							 "standbys never see; the pages readers change meanwhile are logged whole after "
							 "the rename, and a standby query holding such a heap page as that image replays "
							 "can read moved bytes (README, Limits).",
							 &tsm_relocation_switch_admits_readers,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.switch_cancel_blockers_after",
							"Time a switch may stay blocked before it cancels the queries that block it.",
							"Once a switch (of a relation move or a relocation) has been blocked this long, each "
							"attempt first cancels the queries of the transactions that blocked the previous "
							"attempt too, when the job's submitter may signal their sessions (as with "
							"pg_cancel_backend). -1 never cancels.",
							&tsm_switch_cancel_blockers_after_ms,
							-1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.switch_terminate_client_writers_after",
							"Time a session blocked writing to its client may hold a relocation's switch before it is terminated.",
							"Such a session does not answer the procsignal barrier that makes every process close "
							"the tablespace's old files, and a cancel does not reach it.  Before the locks it is "
							"sent SIGTERM when two tries in a row named it and this long has passed since the "
							"first; after the rename, at the barrier wait's reports (every 5 s) once the wait has "
							"lasted this long.  Only client sessions whose wait event is ClientWrite, and only "
							"while the job's submitter is a superuser.  -1 never terminates.",
							&tsm_switch_terminate_client_writers_after_ms,
							-1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.max_workers",
							"Largest number of moves running at once.",
							"Each running move uses one background worker; max_worker_processes must leave room.",
							&tsm_max_workers,
							2, 0, MAX_BACKENDS,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.switch_backlog_blocks",
							"Dirty blocks left to re-copy at which a switch is attempted.",
							"The switch re-copies them under the exclusive lock, so this bounds its length.",
							&tsm_switch_backlog_blocks,
							256, 0, INT_MAX / 2,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("pg_tsmove.yield_to_ddl",
							 "Whether an online move cancels itself when a command waits for a conflicting lock.",
							 "DDL that needs AccessExclusiveLock would otherwise wait for the whole move, "
							 "and every query queued behind it with it.",
							 &tsm_yield_to_ddl,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("pg_tsmove.debug_pause_at",
							   "Developer option: a phase at which the worker pauses for 60 s.",
							   "'copying' pauses before the first page is copied, 'switching' under "
							   "the exclusive lock just before the switch commits, 'renaming' (a "
							   "relocation) just before its rename, with checkpoints held back, "
							   "'warming' just after the switch, 'shrinking' after the first step "
							   "that shrinks the old files; the tests crash the server there.  A "
							   "reload that no longer "
							   "names the phase ends the pause.",
							   &tsm_debug_pause_at,
							   "",
							   PGC_SIGHUP, GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							   NULL, NULL, NULL);

	tsm_monitor_init();			/* monitoring: GUCs, executor hooks */
	tsm_autopilot_init();		/* the autopilot's policy GUCs */
	tsm_backups_init();			/* sees pg_backup_start() */
	tsm_guard_init();			/* keeps new storage out of a switch's window */
	tsm_standby_crash_check_init(); /* a switch's PANIC the postmaster forgot */
	MarkGUCPrefixReserved("pg_tsmove");

	if (!process_shared_preload_libraries_in_progress)
		return;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = tsm_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = tsm_shmem_startup;

	tsm_register_launcher();
	tsm_monitor_register_workers();	/* the sampler, after the launcher */
}
