/*-------------------------------------------------------------------------
 *
 * local_jobs.c
 *	  The record of this server's local jobs, in files (local_jobs.h).
 *
 * pg_tsmove/local/<job_id>.job holds a TsmLocalJob behind a magic number
 * and a format version, followed by its CRC-32C; a file that fails those
 * checks is skipped with a WARNING, never trusted.  pg_tsmove/local/next_id
 * holds the next id to give, so that an id is never given twice, even if
 * job files are removed.
 * Every write is whole and durable (durable_file.c): a crash leaves the old
 * content or the new one.
 *
 * Locks: TsmShared->local_jobs_lock (local_jobs.h), held across the read
 * and the durable write of one file and released on error too.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_perm.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

#include "jobs/durable_file.h"
#include "jobs/local_jobs.h"

#define TSM_LOCAL_DIR "pg_tsmove/local"
#define TSM_LOCAL_MAGIC 0x74736C6A	/* "tslj" */
#define TSM_LOCAL_VERSION 1

typedef struct TsmLocalJobFile
{
	uint32		magic;
	uint32		version;
	TsmLocalJob job;
	pg_crc32c	crc;			/* of everything before it */
} TsmLocalJobFile;

static void
job_path(char *path, int64 job_id)
{
	snprintf(path, MAXPGPATH, "%s/%lld.job", TSM_LOCAL_DIR, (long long) job_id);
}

static void
make_directory(void)
{
	if (MakePGDirectory("pg_tsmove") < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", "pg_tsmove")));
	if (MakePGDirectory(TSM_LOCAL_DIR) < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", TSM_LOCAL_DIR)));
}

/* Read a job's file; false if it is absent or not a valid one (WARNING). */
static bool
read_job_file(const char *path, TsmLocalJob *job)
{
	TsmLocalJobFile content;
	pg_crc32c	crc;
	int			fd;
	int			len;

	fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno == ENOENT)
			return false;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	len = read(fd, &content, sizeof(content));
	CloseTransientFile(fd);
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, &content, offsetof(TsmLocalJobFile, crc));
	FIN_CRC32C(crc);
	if (len != sizeof(content) || content.magic != TSM_LOCAL_MAGIC ||
		content.version != TSM_LOCAL_VERSION || !EQ_CRC32C(crc, content.crc))
	{
		ereport(WARNING,
				(errmsg("pg_tsmove: \"%s\" is not a valid local job record; ignored", path)));
		return false;
	}
	*job = content.job;
	return true;
}

static void
write_job_file(const TsmLocalJob *job)
{
	TsmLocalJobFile content;
	char		path[MAXPGPATH];

	memset(&content, 0, sizeof(content));
	content.magic = TSM_LOCAL_MAGIC;
	content.version = TSM_LOCAL_VERSION;
	content.job = *job;
	INIT_CRC32C(content.crc);
	COMP_CRC32C(content.crc, &content, offsetof(TsmLocalJobFile, crc));
	FIN_CRC32C(content.crc);
	job_path(path, job->job_id);
	tsm_write_file_durably(path, (const char *) &content, sizeof(content));
}

/* A change of one job's file under the lock: false if there is no such job. */
typedef void (*LocalJobChange) (TsmLocalJob *job, const void *arg);

static bool
change_job(int64 job_id, LocalJobChange change, const void *arg)
{
	char		path[MAXPGPATH];
	TsmLocalJob job;
	volatile bool found = false;

	job_path(path, job_id);
	LWLockAcquire(tsm_shared->local_jobs_lock, LW_EXCLUSIVE);
	PG_TRY();
	{
		found = read_job_file(path, &job);
		if (found)
		{
			change(&job, arg);
			write_job_file(&job);
		}
	}
	PG_FINALLY();
	{
		LWLockRelease(tsm_shared->local_jobs_lock);
	}
	PG_END_TRY();
	return found;
}

/* Set a job's state; a final one stamps finished_at. */
static void
set_state_in(TsmLocalJob *job, TsmJobState state, const char *error)
{
	job->state = state;
	if (error)
		strlcpy(job->error, error, sizeof(job->error));
	if (job->started_at == 0 && state != TSM_QUEUED && state != TSM_PAUSED)
		job->started_at = GetCurrentTimestamp();
	job->finished_at = tsm_state_is_final(state) ? GetCurrentTimestamp() : 0;
}

/*
 * Record a new job (job->job_id is set here, with submitted_at); returns
 * its id.
 */
int64
tsm_localjob_insert(TsmLocalJob *job)
{
	char		path[MAXPGPATH];
	volatile int64 next = TSM_LOCAL_JOB_ID_BASE + 1;

	snprintf(path, sizeof(path), "%s/next_id", TSM_LOCAL_DIR);
	LWLockAcquire(tsm_shared->local_jobs_lock, LW_EXCLUSIVE);
	PG_TRY();
	{
		int			fd;
		char		buf[32];
		int			len;

		make_directory();
		fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
		if (fd >= 0)
		{
			len = read(fd, buf, sizeof(buf) - 1);
			CloseTransientFile(fd);
			if (len > 0)
			{
				buf[len] = '\0';
				next = Max(next, strtoll(buf, NULL, 10));
			}
		}
		job->job_id = next;
		job->submitted_at = GetCurrentTimestamp();
		write_job_file(job);
		len = snprintf(buf, sizeof(buf), "%lld\n", (long long) (next + 1));
		tsm_write_file_durably(path, buf, len);
	}
	PG_FINALLY();
	{
		LWLockRelease(tsm_shared->local_jobs_lock);
	}
	PG_END_TRY();
	return job->job_id;
}

bool
tsm_localjob_read(int64 job_id, TsmLocalJob *job)
{
	char		path[MAXPGPATH];
	volatile bool found = false;

	job_path(path, job_id);
	LWLockAcquire(tsm_shared->local_jobs_lock, LW_SHARED);
	PG_TRY();
	{
		found = read_job_file(path, job);
	}
	PG_FINALLY();
	{
		LWLockRelease(tsm_shared->local_jobs_lock);
	}
	PG_END_TRY();
	return found;
}

static int
job_id_cmp(const ListCell *a, const ListCell *b)
{
	const TsmLocalJob *ja = lfirst(a);
	const TsmLocalJob *jb = lfirst(b);

	return ja->job_id < jb->job_id ? -1 : ja->job_id > jb->job_id ? 1 : 0;
}

/* Every local job (palloc'd TsmLocalJob *), oldest first. */
List *
tsm_localjob_list(void)
{
	List	   *volatile jobs = NIL;
	DIR		   *dir;
	struct dirent *de;

	LWLockAcquire(tsm_shared->local_jobs_lock, LW_SHARED);
	PG_TRY();
	{
		dir = AllocateDir(TSM_LOCAL_DIR);
		while (dir != NULL && (de = ReadDirExtended(dir, TSM_LOCAL_DIR, DEBUG1)) != NULL)
		{
			char		path[MAXPGPATH];
			TsmLocalJob job;
			size_t		n = strlen(de->d_name);

			if (n < 5 || strcmp(de->d_name + n - 4, ".job") != 0 ||
				strspn(de->d_name, "0123456789") != n - 4)
				continue;
			snprintf(path, sizeof(path), "%s/%s", TSM_LOCAL_DIR, de->d_name);
			if (read_job_file(path, &job))
			{
				TsmLocalJob *copy = palloc(sizeof(TsmLocalJob));

				*copy = job;
				jobs = lappend(jobs, copy);
			}
		}
		if (dir != NULL)
			FreeDir(dir);
	}
	PG_FINALLY();
	{
		LWLockRelease(tsm_shared->local_jobs_lock);
	}
	PG_END_TRY();
	list_sort(jobs, job_id_cmp);
	return jobs;
}

static void
claim_in(TsmLocalJob *job, const void *arg)
{
	set_state_in(job, TSM_PREPARING, NULL);
	job->error[0] = '\0';
}

/*
 * Claim the oldest queued local job: mark it 'preparing' and return it as
 * the worker sees a claimed job.  False if none is queued.
 */
bool
tsm_localjob_claim_next(TsmClaimedJob *claimed)
{
	List	   *jobs = tsm_localjob_list();
	ListCell   *lc;

	foreach(lc, jobs)
	{
		TsmLocalJob *job = lfirst(lc);

		if (job->state != TSM_QUEUED)
			continue;
		if (!change_job(job->job_id, claim_in, NULL))
			continue;
		memset(claimed, 0, sizeof(*claimed));
		claimed->job_id = job->job_id;
		claimed->kind = TSM_KIND_RELOCATE;
		claimed->relid = InvalidOid;
		claimed->relname = pstrdup(job->spcname);
		claimed->mode = TSM_MODE_ONLINE;
		claimed->source_spc = claimed->target_spc = job->spc;
		claimed->max_rate_mb = job->max_rate_mb;
		claimed->submitted_by = job->submitted_by;
		claimed->new_location = pstrdup(job->new_location);
		claimed->pause_requested = job->pause_requested;
		return true;
	}
	return false;
}

/* The local job on tablespace spc that has not ended, or 0. */
int64
tsm_localjob_active_on_tablespace(Oid spc)
{
	ListCell   *lc;

	foreach(lc, tsm_localjob_list())
	{
		TsmLocalJob *job = lfirst(lc);

		if (job->spc == spc && !tsm_state_is_final(job->state))
			return job->job_id;
	}
	return 0;
}

static void
old_location_in(TsmLocalJob *job, const void *arg)
{
	strlcpy(job->old_location, (const char *) arg, sizeof(job->old_location));
}

void
tsm_localjob_record_old_location(int64 job_id, const char *old_location)
{
	(void) change_job(job_id, old_location_in, old_location);
}

typedef struct SaveArg
{
	const TsmProgress *progress;
	const char *error;
} SaveArg;

static void
save_in(TsmLocalJob *job, const void *arg)
{
	const SaveArg *save = arg;
	const TsmProgress *p = save->progress;

	set_state_in(job, p->state, NULL);
	strlcpy(job->error, save->error ? save->error : "", sizeof(job->error));
	job->blocks_total = p->blocks_total;
	job->blocks_copied = p->blocks_copied;
	job->blocks_recopied = p->blocks_recopied;
	job->blocks_under_lock = p->blocks_under_lock;
	job->bytes_written = p->bytes_written;
	job->wal_bytes = p->wal_bytes;
	job->switch_attempts = p->switch_attempts;
	job->lock_wait_ms = p->lock_wait_ms;
	job->switch_ms = p->switch_ms;
}

/* As tsm_jobrec_save(): state, error (NULL clears it) and counters. */
void
tsm_localjob_save(int64 job_id, const TsmProgress *progress, const char *error)
{
	SaveArg		save = {progress, error};

	(void) change_job(job_id, save_in, &save);
}

typedef struct StateArg
{
	TsmJobState state;
	const char *error;
} StateArg;

static void
state_in(TsmLocalJob *job, const void *arg)
{
	const StateArg *s = arg;

	set_state_in(job, s->state, s->error);
}

/* As tsm_jobrec_set_state(): the state, and the error unless NULL. */
void
tsm_localjob_set_state(int64 job_id, TsmJobState state, const char *error)
{
	StateArg	s = {state, error};

	(void) change_job(job_id, state_in, &s);
}

static void
cancel_in(TsmLocalJob *job, const void *arg)
{
	bool	   *cancelled = (bool *) arg;

	*cancelled = job->state == TSM_QUEUED || job->state == TSM_PAUSED;
	if (*cancelled)
		set_state_in(job, TSM_CANCELLED, "cancelled before it started");
}

/* Cancel a local job if it is still queued; returns whether it was. */
bool
tsm_localjob_cancel_queued(int64 job_id)
{
	bool		cancelled = false;

	(void) change_job(job_id, cancel_in, &cancelled);
	return cancelled;
}

static void
rate_in(TsmLocalJob *job, const void *arg)
{
	job->max_rate_mb = *(const double *) arg;
}

void
tsm_localjob_set_rate(int64 job_id, double max_rate_mb)
{
	(void) change_job(job_id, rate_in, &max_rate_mb);
}

typedef struct PauseArg
{
	bool		pause;
	TsmJobState state;
} PauseArg;

static void
pause_in(TsmLocalJob *job, const void *arg)
{
	PauseArg   *p = (PauseArg *) arg;

	if (tsm_state_is_final(job->state))
	{
		p->state = TSM_DONE;
		return;
	}
	job->pause_requested = p->pause;
	if (p->pause && job->state == TSM_QUEUED)
		job->state = TSM_PAUSED;
	else if (!p->pause && job->state == TSM_PAUSED)
		job->state = TSM_QUEUED;
	p->state = job->state;
}

/* As tsm_jobrec_request_pause(). */
TsmJobState
tsm_localjob_request_pause(int64 job_id, bool pause)
{
	PauseArg	p = {pause, TSM_DONE};

	(void) change_job(job_id, pause_in, &p);
	return p.state;
}

/*
 * Call callback for every local job that started and has not ended, oldest
 * first (the recovery pass, at start-up: no worker runs one).
 */
void
tsm_localjob_foreach_unfinished(TsmUnfinishedJobCallback callback, void *arg)
{
	ListCell   *lc;

	foreach(lc, tsm_localjob_list())
	{
		TsmLocalJob *job = lfirst(lc);
		TsmUnfinishedJob u;

		if (tsm_state_is_final(job->state) || job->state == TSM_QUEUED ||
			job->state == TSM_PAUSED)
			continue;
		memset(&u, 0, sizeof(u));
		u.job_id = job->job_id;
		u.kind = TSM_KIND_RELOCATE;
		u.state = job->state;
		u.mode = TSM_MODE_ONLINE;
		u.source_spc = u.target_spc = job->spc;
		u.old_location = job->old_location[0] ? pstrdup(job->old_location) : NULL;
		u.new_location = pstrdup(job->new_location);
		callback(&u, arg);
	}
}
