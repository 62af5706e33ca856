/*-------------------------------------------------------------------------
 *
 * relocation_finish.c
 *	  The end of a tablespace relocation: after the switch, wait for the
 *	  old files' last users and remove the old files, a step at a time;
 *	  after an error, clean up what the job made.
 *
 * After the switch nothing opens the old files any more, but a base backup
 * that began before it, or a session whose temporary files were created in
 * the old location just before the rename, may still read them: finish
 * waits for both (step 6 of the switch, relocation_switch.c), then frees
 * the old files' space a step at a time (engine.h, "shrink") and removes
 * the old version directory.  Cleanup after an error: before the rename,
 * the new location is scratch and goes; after it, what the switch left is
 * finished (the barrier, the stragglers) and the old files go, unless
 * someone may still read them.  Either way the job's marks
 * (relocation_marks.c) go, and the lock on the tablespace object.
 *
 * Calls relocation_switch.c (the barrier) and relocation_files.c; the
 * worker calls it.
 *
 * Locks: releases the job's session ExclusiveLock on the tablespace
 * object, taken by prepare (relocation_files.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "catalog/pg_tablespace.h"
#include "storage/fd.h"
#include "storage/proc.h"

#include "relocation/relocation_backups.h"
#include "relocation/relocation_internal.h"
#include "relocation/relocation_marks.h"

static void
close_all_files(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	for (int i = 0; i < st->nfiles; i++)
		tsm_reloc_close_segments(&st->files[i]);
}

static void
release_tablespace_lock(TsmRelocation *st)
{
	LOCKTAG		tag;

	if (!st->spc_locked)
		return;
	SET_LOCKTAG_OBJECT(tag, InvalidOid, TableSpaceRelationId, st->spc, 0);
	LockRelease(&tag, ExclusiveLock, true);
	st->spc_locked = false;
}

/*
 * Whether files of the old location are longer than their copies
 * (tsm_copy_stragglers): then it may hold data the new one lacks, and it
 * stays, with a warning saying what to do.
 */
static bool
keep_old_for_short_copies(TsmRelocation *st)
{
	if (st->short_copies == 0)
		return false;
	ereport(WARNING,
			(errmsg("pg_tsmove left \"%s\" in place: %d of its files are longer than their copies in \"%s\"",
					st->old_dir, st->short_copies, st->new_dir),
			 errdetail("The tablespace uses the new location; the old files may hold data their copies lack."),
			 errhint("Compare the files the log names, with amcheck on their relations, before removing the old location by hand.")));
	return true;
}

/* Remove the old version directory, now that nothing uses it. */
static void
remove_old_files(TsmRelocation *st)
{
	if (!rmtree(st->old_dir, true))
		ereport(WARNING,
				(errmsg("pg_tsmove could not remove all of \"%s\"", st->old_dir),
				 errhint("Remove it by hand: the tablespace no longer uses it.")));
	fsync_fname(st->old_location, true);
}

/*
 * Add the regular files under dir, and under its subdirectories, to
 * *files; not the temporary files of sessions (pgsql_tmp), which a query
 * may still be reading: shrunk, it would read short, with no error.
 */
static void
list_old_files(const char *dir, bool recurse, List **files)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;

	while ((de = ReadDirExtended(d, dir, LOG)) != NULL)
	{
		char	   *path;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			strcmp(de->d_name, PG_TEMP_FILES_DIR) == 0)
			continue;
		path = psprintf("%s/%s", dir, de->d_name);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && recurse)
			list_old_files(path, false, files);
		else if (S_ISREG(st.st_mode))
			*files = lappend(*files, path);
	}
	FreeDir(d);
}

/*
 * Free the old files' space a step at a time before they are removed
 * (engine.h, "shrink"): nothing uses them any more.  Best effort: what is
 * not shrunk is removed at once.  No descriptor is held across a sleep,
 * which a cancel can end with an error.
 */
static void
shrink_old_files(TsmJob *job, const char *old_dir)
{
	List	   *files = NIL;
	ListCell   *lc;

	list_old_files(old_dir, true, &files);
	foreach(lc, files)
	{
		const char *path = lfirst(lc);
		struct stat st;
		uint64		step;
		off_t		size;

		if (stat(path, &st) < 0 || (uint64) st.st_size <= TSM_SHRINK_STEP_BYTES)
			continue;
		step = tsm_shrink_step_bytes(st.st_size, tsm_ctl_others_idle(&job->ctl));
		for (size = st.st_size; size > 0;)
		{
			size = (uint64) size > step ? size - step : 0;
			if (truncate(path, size) < 0)
				break;
			tsm_ctl_sleep(&job->ctl, TSM_SHRINK_PAUSE_MS);
		}
	}
	list_free_deep(files);
}

/*
 * The pid of a live process that owns a temporary file or file set in the
 * old location's pgsql_tmp (named pgsql_tmp<pid>.<n>), or 0.
 */
static int
old_temporary_file_owner(TsmRelocation *st)
{
	char		path[MAXPGPATH];
	DIR		   *dir;
	struct dirent *de;
	int			owner = 0;

	snprintf(path, sizeof(path), "%s/%s", st->old_dir, PG_TEMP_FILES_DIR);
	dir = AllocateDir(path);
	while (owner == 0 && dir != NULL && (de = ReadDirExtended(dir, path, DEBUG1)) != NULL)
	{
		int			pid;

		if (sscanf(de->d_name, PG_TEMP_FILE_PREFIX "%d.", &pid) == 1 && pid > 0 &&
			(kill(pid, 0) == 0 || errno == EPERM))
			owner = pid;
	}
	if (dir != NULL)
		FreeDir(dir);
	return owner;
}

/*
 * Before the old files go: wait for every backup that began before the
 * switch (none can, as switch_commit checks, unless it started in a way
 * relocation_backups.c cannot see), and for the sessions whose temporary
 * files are still in the old location (created just before the rename: they
 * read them through descriptors they hold; no new one goes there).
 */
static bool
old_files_in_use(TsmRelocation *st, char *what, Size len)
{
	TimestampTz oldest;
	char		backup[MAXPGPATH + 64];
	int			owner;

	if (tsm_backup_running(&oldest, backup, sizeof(backup)) && oldest <= st->switched_at)
	{
		snprintf(what, len, "%s, which began before the switch", backup);
		return true;
	}
	if ((owner = old_temporary_file_owner(st)) != 0)
	{
		snprintf(what, len, "process %d, which has temporary files in \"%s\"", owner, st->old_dir);
		return true;
	}
	return false;
}

static void
wait_for_old_files_users(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	char		what[2 * MAXPGPATH];

	while (old_files_in_use(st, what, sizeof(what)))
	{
		tsm_ctl_note(&job->ctl, "waiting for %s, to end before removing the old files", what);
		tsm_ctl_publish(&job->ctl, true);
		tsm_ctl_sleep(&job->ctl, 1000);
	}
}

/* Remove the job's marks from both locations. */
static void
remove_marks(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	if (!st->marks_written)
		return;
	tsm_relocmark_remove(st->new_location, job->row.job_id);
	tsm_relocmark_remove(st->old_location, job->row.job_id);
	st->marks_written = false;
}

/* finish: the shared buffers stay valid (relfilenodes are unchanged); remove the old files. */
void
tsm_relocation_finish(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	close_all_files(job);
	if (keep_old_for_short_copies(st))
	{
		tsm_ctl_note(&job->ctl, "%d files in \"%s\" are longer than their copies: the old location was kept",
					 st->short_copies, st->old_dir);
		remove_marks(job);
		release_tablespace_lock(st);
		return;
	}
	wait_for_old_files_users(job);
	tsm_ctl_note(&job->ctl, "%s", "removing the old files");
	tsm_ctl_debug_pause(&job->ctl, "shrinking");
	shrink_old_files(job, st->old_dir);
	remove_old_files(st);
	remove_marks(job);
	release_tablespace_lock(st);
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld relocated tablespace \"%s\" to \"%s\": %lld blocks, "
					"%lld re-copied, %lld copied under the lock, %s %.1f ms",
					(long long) job->row.job_id, st->spcname, st->new_location,
					(long long) job->ctl.progress.blocks_total,
					(long long) job->ctl.progress.blocks_recopied,
					(long long) job->ctl.progress.blocks_under_lock,
					st->on_standby ? "replay paused" : "locks held",
					job->ctl.progress.switch_ms)));
}

/*
 * cleanup: before the rename, the new location is scratch: remove it.
 * After it, finish what the switch left: the old files are removed only
 * once everything created there is copied.
 */
void
tsm_relocation_cleanup(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	if (st == NULL)
		return;
	/* an error inside the switch: no abort clears these, nor resumes replay */
	MyProc->delayChkptFlags &= ~(DELAY_CHKPT_START | DELAY_CHKPT_COMPLETE);
	tsm_standby_end_pause(st);
	close_all_files(job);
	if (job->switch_committed)
	{
		char		what[2 * MAXPGPATH];

		if (!st->barrier_done)
			tsm_reloc_release_old_descriptors(st);
		if (!st->stragglers_done)
			st->short_copies = tsm_copy_stragglers(st->old_dir, st->new_dir);
		if (keep_old_for_short_copies(st))
		{
			remove_marks(job);
			release_tablespace_lock(st);
			return;
		}
		/* cancelled while finish waited: the old files stay for their users */
		if (old_files_in_use(st, what, sizeof(what)))
		{
			ereport(WARNING,
					(errmsg("pg_tsmove left \"%s\" in place: %s, may still read it", st->old_dir, what),
					 errhint("Remove it by hand once that has ended: the tablespace no longer uses it.")));
			remove_marks(job);
			release_tablespace_lock(st);
			return;
		}
		remove_old_files(st);
	}
	else if (st->new_dir_made && !rmtree(st->new_dir, true))
		ereport(WARNING,
				(errmsg("pg_tsmove could not remove all of \"%s\"", st->new_dir),
				 errhint("Remove it by hand: the relocation failed and nothing uses it.")));
	remove_marks(job);
	release_tablespace_lock(st);
}
