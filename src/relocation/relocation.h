/*-------------------------------------------------------------------------
 *
 * relocation.h
 *	  The tablespace relocation (tsmove.relocate_tablespace()): the front
 *	  end that copies every file of a tablespace to a new directory and
 *	  repoints pg_tblspc/<oid>; its crash recovery; the marks of running
 *	  backups it waits for.
 *
 * Files, one a role (relocation_internal.h says which calls which inside
 * the folder):
 *	relocation_files.c		list, resolve and copy the files; prepare, guard
 *	relocation_switch.c		lock, check, repoint the link, the barrier
 *	relocation_finish.c		remove the old files; clean up after an error
 *	relocation_recovery.c	finish or undo what a crash interrupted
 *	relocation_backups.c	running backups, seen by the hooks (shared memory)
 *	relocation_barrier.c	the SMGRRELEASE barrier and who does not answer it
 *	relocation_dbcatalog.c	another database's pg_class, read without a
 *							connection to it
 *	relocation_marks.c		which data directory a new location belongs to
 *	relocation_guard.c		the creation guard: the utility hook's lock that
 *							keeps new storage out of the switch's window
 *	relocation_standby.c	a hot standby's switch: replay paused, not locks
 *
 * Who calls whom: the worker (workers/worker.c) calls the front end's
 * functions through its TsmFrontEnd (engine/frontend.h); the recovery
 * worker (workers/recovery.c) tsm_recover_relocation(); pg_tsmove.c the
 * backups' shared memory and hooks, and the guard's hook.  relocation/ calls engine/ (the file
 * set, switch blockers, durable files; never the copy or the mirror) and
 * jobs/; never workers/, api/ or relation/.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_H
#define TSM_RELOCATION_H

#include "storage/lock.h"

#include "engine/frontend.h"

/* relocation_files.c: a tablespace relocation's files */
extern void tsm_relocation_settle(TsmJob *job);
extern void tsm_relocation_prepare(TsmJob *job);
extern TsmGuard tsm_relocation_guard(TsmJob *job, TsmFile *f);

/* relocation_switch.c: its switch */
extern bool tsm_relocation_switch_lock(TsmJob *job);
extern bool tsm_relocation_switch_check(TsmJob *job);
extern void tsm_relocation_switch_release(TsmJob *job);
extern bool tsm_relocation_switch_commit(TsmJob *job);
extern void tsm_relocation_switch_end(TsmJob *job);

/* relocation_finish.c: its end */
extern void tsm_relocation_finish(TsmJob *job);
extern void tsm_relocation_cleanup(TsmJob *job);

/* relocation_recovery.c, for the recovery pass (workers/recovery.c) */
extern void tsm_recover_relocation(const TsmUnfinishedJob *job);

/* relocation_guard.c: nothing creates storage in the switch's window */
extern void tsm_guard_init(void);
extern void tsm_guard_locktag(LOCKTAG *tag);
extern void tsm_guard_holders(char *buf, Size len);
extern void tsm_guard_drain(TsmJobCtl *ctl);

/* relocation_standby.c: from relocation_backups.c's object access hook */
extern void tsm_standby_replay_control_called(Oid funcid);
/* ... and a switch's PANIC that did not restart the server (_PG_init, the launcher) */
extern void tsm_standby_crash_check_init(void);
extern void tsm_standby_crash_if_restart_skipped(void);

/* relocation_backups.c: the marks of running backups, and its hooks */
extern Size tsm_backups_shmem_size(void);
extern void tsm_backups_shmem_init(void);
extern void tsm_backups_init(void);

#endif							/* TSM_RELOCATION_H */
