/*-------------------------------------------------------------------------
 *
 * relocation_backups.c
 *	  Which base backups run now: what a relocation asks before its switch
 *	  and before it removes the old files (relocation_switch.c,
 *	  relocation_finish.c).
 *
 * A backup copies the tablespace's files by following pg_tblspc/<oid>; the
 * relocation writes no WAL for its copy, so a backup that read the link
 * on one side of the switch and the files on the other, or whose files
 * were removed under it, restores without them.  PostgreSQL 15 keeps its
 * count of running backups private (XLogCtl), so pg_tsmove sees them
 * itself:
 *	- pg_basebackup: a walsender whose progress command is BASEBACKUP; it
 *	  is set before do_pg_backup_start() runs;
 *	- the low-level API (pg_backup_start() ... pg_backup_stop()): a
 *	  session marks its slot below when it starts a query that names
 *	  pg_backup_start, before the function runs, and each of its
 *	  transactions ends by asking the session's own state
 *	  (get_backup_status()), which clears the mark once no backup runs.
 *	  A session that exits ends its backup, and its mark.  Not seen: a
 *	  backup started through the fast-path function call protocol, or by
 *	  a query whose text does not name pg_backup_start (a PL/pgSQL
 *	  assignment evaluated as a simple expression, a wrapper function);
 *	  nor pg_basebackup with track_activities off (no progress command).
 * The relocation closes the window between its check and its rename by
 * delaying checkpoints (relocation_switch.c): a backup that starts after the
 * check reads pg_tblspc only after its start checkpoint, so after the
 * rename.
 *
 * Locks: BackupMarks->mutex, a spinlock, guards the slots; a backend
 * writes only its own slot.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/backend_progress.h"
#include "utils/backend_status.h"

#include "compat.h"
#include "jobs/jobs.h"
#include "relocation/relocation.h"
#include "relocation/relocation_backups.h"

typedef struct BackupMark
{
	int			pid;			/* 0: no backup */
	TimestampTz since;
} BackupMark;

typedef struct BackupMarks
{
	slock_t		mutex;
	int			nslots;
	BackupMark	slots[FLEXIBLE_ARRAY_MEMBER];
} BackupMarks;

static BackupMarks *backup_marks = NULL;
static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static bool marked = false;		/* this backend's slot is set */
static bool callbacks_registered = false;

Size
tsm_backups_shmem_size(void)
{
	return add_size(offsetof(BackupMarks, slots),
					mul_size(tsm_backend_slots(), sizeof(BackupMark)));
}

/* In the shared-memory start-up hook, under AddinShmemInitLock. */
void
tsm_backups_shmem_init(void)
{
	bool		found;

	backup_marks = ShmemInitStruct("pg_tsmove backups", tsm_backups_shmem_size(), &found);
	if (!found)
	{
		memset(backup_marks, 0, tsm_backups_shmem_size());
		SpinLockInit(&backup_marks->mutex);
		backup_marks->nslots = tsm_backend_slots();
	}
}

static void
set_mark(bool running)
{
	int			slot = tsm_backend_slot();

	if (backup_marks == NULL || slot < 0 || slot >= backup_marks->nslots)
		return;
	SpinLockAcquire(&backup_marks->mutex);
	if (running && backup_marks->slots[slot].pid != MyProcPid)
	{
		backup_marks->slots[slot].pid = MyProcPid;
		backup_marks->slots[slot].since = GetCurrentTimestamp();
	}
	else if (!running)
		backup_marks->slots[slot].pid = 0;
	SpinLockRelease(&backup_marks->mutex);
	marked = running;
}

/* At each transaction's end: keep the mark only while a backup runs. */
static void
refresh_mark(XactEvent event, void *arg)
{
	if (!marked)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		set_mark(get_backup_status() == SESSION_BACKUP_RUNNING);
}

static void
clear_mark_at_exit(int code, Datum arg)
{
	if (marked)
		set_mark(false);
}

/* Whether text names pg_backup_start, in any case. */
static bool
names_backup_start(const char *text)
{
	static const char name[] = "pg_backup_start";

	for (const char *p = text; p != NULL && *p != '\0'; p++)
		if ((*p == 'p' || *p == 'P') &&
			pg_strncasecmp(p, name, sizeof(name) - 1) == 0)
			return true;
	return false;
}

static void
backups_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	if (backup_marks != NULL && !marked && names_backup_start(queryDesc->sourceText))
	{
		if (!callbacks_registered)
		{
			RegisterXactCallback(refresh_mark, NULL);
			before_shmem_exit(clear_mark_at_exit, (Datum) 0);
			callbacks_registered = true;
		}
		set_mark(true);
	}
	if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
}

/* From _PG_init. */
void
tsm_backups_init(void)
{
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = backups_ExecutorStart;
}

/*
 * Whether a base backup runs now, of either kind; if so, *oldest_start
 * (if not NULL) gets when the earliest began (for pg_basebackup: when its
 * walsender started) and what a description.  Reads the backends' status
 * afresh, even inside a transaction that read it before.
 */
bool
tsm_backup_running(TimestampTz *oldest_start, char *what, Size len)
{
	TimestampTz oldest = DT_NOEND;
	int			nbackends;
	int			count = 0;

	if (backup_marks != NULL)
	{
		SpinLockAcquire(&backup_marks->mutex);
		for (int i = 0; i < backup_marks->nslots; i++)
			if (backup_marks->slots[i].pid != 0)
			{
				if (count++ == 0 && what)
					snprintf(what, len, "a backup started with pg_backup_start() by process %d",
							 backup_marks->slots[i].pid);
				oldest = Min(oldest, backup_marks->slots[i].since);
			}
		SpinLockRelease(&backup_marks->mutex);
	}

	pgstat_clear_backend_activity_snapshot();
	nbackends = pgstat_fetch_stat_numbackends();
	for (int i = 1; i <= nbackends; i++)
	{
		LocalPgBackendStatus *local = tsm_local_backend_status(i);

		if (local && local->backendStatus.st_progress_command == PROGRESS_COMMAND_BASEBACKUP)
		{
			if (count++ == 0 && what)
				snprintf(what, len, "pg_basebackup (process %d)",
						 local->backendStatus.st_procpid);
			oldest = Min(oldest, local->backendStatus.st_proc_start_timestamp);
		}
	}
	pgstat_clear_backend_activity_snapshot();
	if (oldest_start)
		*oldest_start = oldest;
	return count > 0;
}
