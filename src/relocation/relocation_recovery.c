/*-------------------------------------------------------------------------
 *
 * relocation_recovery.c
 *	  The recovery pass's part of a tablespace relocation: finish or undo
 *	  one that a crash or an immediate shutdown interrupted.
 *
 * Crash: the link is the truth.  Before the rename the new location is
 * scratch; after it the old one is.  (Crash recovery could point the link
 * back by replaying XLOG_TBLSPC_CREATE; the switch waits for a checkpoint
 * when that could happen, relocation_files.c.)  The job row records both
 * locations before the first file is written.
 *
 * The recovery pass removes a location only if the job's mark proves it is
 * this data directory's (relocation_marks.c): a restored backup or a
 * promoted standby finds the same paths, which may hold another cluster's
 * files.
 *
 * Calls relocation_files.c (the stragglers) and relocation_marks.c; the
 * recovery worker (recovery.c) calls it.
 *
 * Locks: none; runs in the recovery transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "catalog/catalog.h"
#include "common/relpath.h"

#include "relocation/relocation_internal.h"
#include "relocation/relocation_marks.h"

/*
 * The recovery pass's part: a relocation interrupted by a crash or an
 * immediate shutdown.  The link is the truth: if it points to the new
 * location, the switch happened, and the old files go (after copying what
 * raced the rename); otherwise the new location is scratch.  But a
 * location is removed only if its mark proves it is this data directory's
 * and this job's (relocation_marks.c): in a restored backup or a promoted
 * standby the same paths may hold another cluster's live files.  Runs in
 * the recovery transaction; marks the job.
 */
void
tsm_recover_relocation(const TsmUnfinishedJob *job)
{
	char		link_path[MAXPGPATH];
	char		target[MAXPGPATH];
	int			len;
	char	   *old_dir;
	char	   *new_dir;
	int			short_copies = 0;

	if (job->old_location == NULL || job->new_location == NULL)
	{
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 "interrupted before it created any file");
		return;
	}
	old_dir = psprintf("%s/%s", job->old_location, TABLESPACE_VERSION_DIRECTORY);
	new_dir = psprintf("%s/%s", job->new_location, TABLESPACE_VERSION_DIRECTORY);
	snprintf(link_path, sizeof(link_path), "pg_tblspc/%u", job->target_spc);
	len = readlink(link_path, target, sizeof(target) - 1);
	if (len >= 0)
		target[len] = '\0';

	if (len >= 0 && strcmp(target, job->new_location) == 0 &&
		tsm_relocmark_is_ours(job->old_location, job->job_id) &&
		(short_copies = tsm_copy_stragglers(old_dir, new_dir)) > 0)
	{
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 psprintf("the server stopped after the switch; \"%s\" was kept: %d of its files "
									  "are longer than their copies in the new location (see the server log)",
									  old_dir, short_copies));
		ereport(WARNING,
				(errmsg("pg_tsmove: job %lld: \"%s\" was kept: %d of its files are longer than their copies in \"%s\"",
						(long long) job->job_id, old_dir, short_copies, new_dir),
				 errhint("Compare the files the log names, with amcheck on their relations, before removing the old location by hand.")));
	}
	else if (len >= 0 && strcmp(target, job->new_location) == 0 &&
			 tsm_relocmark_is_ours(job->old_location, job->job_id))
	{
		if (!rmtree(old_dir, true))
			ereport(WARNING,
					(errmsg("pg_tsmove could not remove all of \"%s\"", old_dir)));
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 "the server stopped after the switch; the old files were removed at restart");
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had relocated its tablespace when the server stopped; removed \"%s\"",
						(long long) job->job_id, old_dir)));
	}
	else if (len >= 0 && strcmp(target, job->new_location) == 0 &&
			 tsm_relocmark_is_ours(job->new_location, job->job_id))
	{
		/* the live side is ours: what raced the rename goes there; copying removes nothing */
		tsm_copy_stragglers(old_dir, new_dir);
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 psprintf("the server stopped after the switch; \"%s\" was left as it is: "
									  "its mark does not name this data directory", old_dir));
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had relocated its tablespace; \"%s\" does not carry this data directory's mark, left as it is",
						(long long) job->job_id, old_dir)));
	}
	else if (len >= 0 && strcmp(target, job->new_location) == 0)
	{
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 psprintf("the server stopped after the switch; \"%s\" was left as it is: "
									  "nothing proves that this data directory wrote it "
									  "(a restored backup or a promoted standby?)", old_dir));
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had relocated its tablespace; \"%s\" is not this data directory's, left as it is",
						(long long) job->job_id, old_dir)));
	}
	else if (len >= 0 && strcmp(target, job->old_location) == 0 &&
			 tsm_relocmark_is_ours(job->new_location, job->job_id))
	{
		if (access(new_dir, F_OK) == 0 && !rmtree(new_dir, true))
			ereport(WARNING,
					(errmsg("pg_tsmove could not remove all of \"%s\"", new_dir)));
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 "interrupted by a server crash or shutdown; its new files were removed");
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted before its switch; removed \"%s\"",
						(long long) job->job_id, new_dir)));
	}
	else
	{
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 psprintf("interrupted; \"%s\" and \"%s\" were left as they are: the tablespace "
									  "link points to the first, and nothing proves that this data "
									  "directory wrote the other (a restored backup or a promoted standby?)",
									  len >= 0 ? target : "(no link)",
									  len >= 0 && strcmp(target, job->old_location) == 0 ?
									  new_dir : old_dir));
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted; nothing proves its directories are this data directory's, left them as they are",
						(long long) job->job_id)));
		return;
	}
	if (tsm_relocmark_is_ours(job->old_location, job->job_id))
		tsm_relocmark_remove(job->old_location, job->job_id);
	if (tsm_relocmark_is_ours(job->new_location, job->job_id))
		tsm_relocmark_remove(job->new_location, job->job_id);
}
