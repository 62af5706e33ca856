/*-------------------------------------------------------------------------
 *
 * relocation_marks.c
 *	  Ownership marks of a relocation's locations.
 *
 * After a crash the recovery pass (relocation_recovery.c) removes one of the
 * two locations of an interrupted relocation: the new one if the link still
 * names the old, the old one if it names the new.  A path alone does not
 * prove whose files those are.  A backup taken during a relocation holds
 * the job row; restored and started beside the original cluster on the
 * same host, or promoted from a standby, its recovery pass would find the
 * same paths, and they hold the original's live files.  So before the job
 * writes its first file it leaves a mark in each location,
 * <location>/pg_tsmove_<database>_<job>.relocation, naming the system
 * identifier and the data directory (its real path and inode) of the
 * cluster that runs it; the recovery pass removes a location only if its
 * mark names this data directory and this job.  Not the device number: a
 * volume manager may give the same filesystem another after a reboot.
 *
 * The mark lies beside the version directory (PG_15_...), not in it:
 * pg_basebackup and backup tools copy only the version directory of a
 * tablespace, so no backup carries it.  A copy made some other way (the
 * whole location by hand) carries a mark that names another data
 * directory (another inode, even at the same path: a restore creates the
 * directory anew), which is no proof.
 * The job removes its marks when it ends.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/fd.h"

#include "jobs/durable_file.h"
#include "jobs/local_jobs.h"
#include "relocation/relocation_marks.h"

/*
 * The database a mark names: the job's, whose worker and recovery pass
 * run there; 0 for a standby's local job, whose recovery pass (the
 * launcher's) runs in none.
 */
static Oid
mark_database(int64 job_id)
{
	return tsm_job_is_local(job_id) ? InvalidOid : MyDatabaseId;
}

static void
mark_path(char *path, const char *location, int64 job_id)
{
	snprintf(path, MAXPGPATH, "%s/pg_tsmove_%u_%lld.relocation", location,
			 mark_database(job_id), (long long) job_id);
}

/* What the mark of this data directory and job says. */
static char *
mark_content(int64 job_id)
{
	struct stat st;
	char	   *real_path = realpath(DataDir, NULL);
	char	   *content;

	if (real_path == NULL || stat(real_path, &st) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not stat data directory \"%s\": %m", DataDir)));
	content = psprintf("pg_tsmove relocation\njob %u %lld\nsystem %llu\n"
					   "data_directory %s\ninode %llu\n",
					   mark_database(job_id), (long long) job_id,
					   (unsigned long long) GetSystemIdentifier(), real_path,
					   (unsigned long long) st.st_ino);
	free(real_path);
	return content;
}

/* Leave the mark in location, durably, before any file of the job is there. */
void
tsm_relocmark_write(const char *location, int64 job_id)
{
	char		path[MAXPGPATH];
	char	   *content = mark_content(job_id);

	mark_path(path, location, job_id);
	tsm_write_file_durably(path, content, strlen(content));
	pfree(content);
}

/* Whether location holds the mark of this data directory and job. */
bool
tsm_relocmark_is_ours(const char *location, int64 job_id)
{
	char		path[MAXPGPATH];
	char	   *expected = mark_content(job_id);
	int			len = strlen(expected);
	char	   *found = palloc(len + 1);
	int			fd;
	int			nread;

	mark_path(path, location, job_id);
	fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (fd < 0)
		return false;
	nread = read(fd, found, len + 1);
	CloseTransientFile(fd);
	return nread == len && memcmp(found, expected, len) == 0;
}

/* Remove the job's mark from location, if it is there. */
void
tsm_relocmark_remove(const char *location, int64 job_id)
{
	char		path[MAXPGPATH];

	mark_path(path, location, job_id);
	if (unlink(path) < 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
}
