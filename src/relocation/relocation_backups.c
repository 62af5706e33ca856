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
 * itself, by what they do, never by what a query's text says:
 *	- pg_basebackup (the BASE_BACKUP replication command): a walsender
 *	  whose state in shared memory is WALSNDSTATE_BACKUP, set before
 *	  do_pg_backup_start() runs and kept until the walsender exits; read
 *	  from WalSndCtl, so track_activities does not matter;
 *	- the low-level API (pg_backup_start() ... pg_backup_stop()): a
 *	  session marks its slot below when it sets up a call of
 *	  pg_backup_start() (or of another declaration of its C code), by any
 *	  route: the executor (SQL, PL/pgSQL expressions and assignments,
 *	  SQL-language wrappers, prepared plans) and the fast-path protocol all
 *	  invoke object_access_hook with OAT_FUNCTION_EXECUTE for each function
 *	  they set up, after its EXECUTE check and before the call (fmgr_hook
 *	  would not do: it never sees built-in functions).  Each of the
 *	  session's transactions then ends (commit, abort or PREPARE) by asking
 *	  the session's own state (get_backup_status()), which clears the mark
 *	  once no backup runs.  A session that exits ends its backup, and its
 *	  mark.  The mark is set up, not at the call: a call set up and not
 *	  made (EXPLAIN, a branch not taken, a SECURITY DEFINER wrapper that
 *	  decides not to) postpones the switch until that transaction ends,
 *	  with a note that names the process.  So only a role that may execute
 *	  pg_backup_start(), or a wrapper one of them wrote, can postpone a
 *	  switch, and only while its backup runs or its transaction lasts
 *	  (idle_in_transaction_session_timeout bounds that).  Not seen: a C
 *	  function that calls pg_backup_start's code directly.
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
#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "replication/walsender_private.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/backend_progress.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/syscache.h"

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
static object_access_hook_type prev_object_access_hook = NULL;
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
	TimestampTz now = running ? GetCurrentTimestamp() : 0;

	if (backup_marks == NULL || slot < 0 || slot >= backup_marks->nslots)
		return;
	SpinLockAcquire(&backup_marks->mutex);
	if (running && backup_marks->slots[slot].pid != MyProcPid)
	{
		backup_marks->slots[slot].pid = MyProcPid;
		backup_marks->slots[slot].since = now;
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
		event == XACT_EVENT_PREPARE ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		set_mark(get_backup_status() == SESSION_BACKUP_RUNNING);
}

static void
clear_mark_at_exit(int code, Datum arg)
{
	if (marked)
		set_mark(false);
}

/*
 * object_access_hook: a call of pg_backup_start() is being set up (after its
 * EXECUTE check, before it runs), by the executor or the fast-path protocol.
 */
/*
 * Whether function fn is pg_backup_start(): the built-in one, or another SQL
 * declaration of its C code (CREATE FUNCTION ... LANGUAGE internal AS
 * 'pg_backup_start', which only a superuser can make).  A syscache look-up
 * for functions that are not built in.
 */
static bool
is_backup_start(Oid fn)
{
	HeapTuple	tuple;
	bool		found = false;

	if (fn == F_PG_BACKUP_START)
		return true;
	if (fn < FirstNormalObjectId)
		return false;
	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (HeapTupleIsValid(tuple))
	{
		Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(tuple);
		bool		isnull;
		Datum		src;

		if (proc->prolang == INTERNALlanguageId)
		{
			src = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_prosrc, &isnull);
			found = !isnull && strcmp(TextDatumGetCString(src), "pg_backup_start") == 0;
		}
		ReleaseSysCache(tuple);
	}
	return found;
}

static void
backups_object_access(ObjectAccessType access, Oid classId, Oid objectId,
					  int subId, void *arg)
{
	if (access == OAT_FUNCTION_EXECUTE && classId == ProcedureRelationId &&
		backup_marks != NULL && !marked && is_backup_start(objectId))
	{
		if (!callbacks_registered)
		{
			RegisterXactCallback(refresh_mark, NULL);
			before_shmem_exit(clear_mark_at_exit, (Datum) 0);
			callbacks_registered = true;
		}
		set_mark(true);
	}
	/* and a standby's switch keeps replay-control calls out of its window */
	if (access == OAT_FUNCTION_EXECUTE && classId == ProcedureRelationId)
		tsm_standby_replay_control_called(objectId);
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);
}

/* From _PG_init. */
void
tsm_backups_init(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = backups_object_access;
}

/*
 * A walsender in WALSNDSTATE_BACKUP: whether its BASE_BACKUP still runs (the
 * state stays BACKUP after a successful one, until the walsender exits),
 * and when it began.  With its activity tracked, its progress command says
 * (set before do_pg_backup_start(), cleared after the last file; a backup
 * between the state and the progress command has not reached its start
 * checkpoint, which the switch holds back); untracked, assume it runs,
 * since its process started.
 */
static bool
walsender_backing_up(int pid, TimestampTz *start)
{
	int			nbackends = pgstat_fetch_stat_numbackends();

	for (int i = 1; i <= nbackends; i++)
	{
		LocalPgBackendStatus *local = tsm_local_backend_status(i);
		PgBackendStatus *be;

		if (local == NULL || local->backendStatus.st_procpid != pid)
			continue;
		be = &local->backendStatus;
		if (be->st_state == STATE_DISABLED || be->st_state == STATE_UNDEFINED)
		{
			*start = be->st_proc_start_timestamp;
			return true;
		}
		*start = be->st_activity_start_timestamp;
		return be->st_progress_command == PROGRESS_COMMAND_BASEBACKUP;
	}
	*start = GetCurrentTimestamp();
	return true;
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
	int			count = 0;
	int			first_marked = 0;

	if (backup_marks != NULL)
	{
		SpinLockAcquire(&backup_marks->mutex);
		for (int i = 0; i < backup_marks->nslots; i++)
			if (backup_marks->slots[i].pid != 0)
			{
				if (count++ == 0)
					first_marked = backup_marks->slots[i].pid;
				oldest = Min(oldest, backup_marks->slots[i].since);
			}
		SpinLockRelease(&backup_marks->mutex);
		if (count > 0 && what)
			snprintf(what, len, "a backup by process %d (it set up a call of pg_backup_start() "
					 "in its current transaction, or has a backup running)", first_marked);
	}

	pgstat_clear_backend_activity_snapshot();
	for (int i = 0; WalSndCtl != NULL && i < max_wal_senders; i++)
	{
		volatile WalSnd *walsnd = &WalSndCtl->walsnds[i];
		int			pid;
		WalSndState state;
		TimestampTz start;

		SpinLockAcquire(&walsnd->mutex);
		pid = walsnd->pid;
		state = walsnd->state;
		SpinLockRelease(&walsnd->mutex);
		if (pid == 0 || state != WALSNDSTATE_BACKUP || !walsender_backing_up(pid, &start))
			continue;
		if (count++ == 0 && what)
			snprintf(what, len, "pg_basebackup (process %d)", pid);
		oldest = Min(oldest, start);
	}
	pgstat_clear_backend_activity_snapshot();
	if (oldest_start)
		*oldest_start = oldest;
	return count > 0;
}
