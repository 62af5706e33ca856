/*-------------------------------------------------------------------------
 *
 * local_jobs.h
 *	  Jobs of this server alone, kept in files of its data directory
 *	  rather than in tsmove.job: a hot standby's tablespace relocations
 *	  (local_jobs.c).
 *
 * A standby cannot write a table, and its tsmove.job is the primary's.  A
 * relocation of the standby's own copy of a tablespace is recorded in
 * pg_tsmove/local/<job_id>.job, one file per job, written whole and
 * durably (durable_file.c) at each change of state and every few seconds
 * while it runs; its live counters are in its worker's slot, as any job's
 * (queue.h).  Local job ids start at TSM_LOCAL_JOB_ID_BASE, far above any
 * tsmove.job id, so that a promoted standby shows both kinds without a
 * clash, and job_record.c sends every call on a local id here.
 *
 * Locks: TsmShared->local_jobs_lock exclusively around each
 * read-modify-write of a file and the choice of a new id; shared to read.
 * Only the worker running a job writes its counters; the API writes a
 * queued job (cancel), the launcher an unfinished one after a restart.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_LOCAL_JOBS_H
#define TSM_LOCAL_JOBS_H

#include "jobs/job_record.h"

#define TSM_LOCAL_JOB_ID_BASE INT64CONST(1000000000000)

/* Whether job_id is one of this server's local jobs. */
static inline bool
tsm_job_is_local(int64 job_id)
{
	return job_id >= TSM_LOCAL_JOB_ID_BASE;
}

/* A local job, as its file holds it. */
typedef struct TsmLocalJob
{
	int64		job_id;
	TsmJobState state;
	Oid			dbid;			/* the database its worker connects to */
	Oid			spc;			/* the tablespace relocated */
	char		spcname[NAMEDATALEN];
	Oid			owner;			/* the tablespace's owner */
	Oid			submitted_by;
	double		max_rate_mb;
	bool		pause_requested;
	TimestampTz submitted_at;
	TimestampTz started_at;		/* 0 until claimed */
	TimestampTz finished_at;	/* 0 until it ends */
	int64		blocks_total;
	int64		blocks_copied;
	int64		blocks_recopied;
	int64		blocks_under_lock;
	int64		bytes_written;
	int64		wal_bytes;
	int			switch_attempts;
	double		lock_wait_ms;
	double		switch_ms;		/* < 0 until the switch */
	int			restarts;
	char		old_location[MAXPGPATH];	/* "" until recorded */
	char		new_location[MAXPGPATH];
	char		error[TSM_NOTE_LEN * 2];
} TsmLocalJob;

extern int64 tsm_localjob_insert(TsmLocalJob *job);
extern bool tsm_localjob_read(int64 job_id, TsmLocalJob *job);
extern List *tsm_localjob_list(void);
extern bool tsm_localjob_claim_next(TsmClaimedJob *claimed);
extern int64 tsm_localjob_active_on_tablespace(Oid spc);
extern void tsm_localjob_record_old_location(int64 job_id, const char *old_location);
extern void tsm_localjob_save(int64 job_id, const TsmProgress *progress, const char *error);
extern void tsm_localjob_set_state(int64 job_id, TsmJobState state, const char *error);
extern bool tsm_localjob_cancel_queued(int64 job_id);
extern void tsm_localjob_set_rate(int64 job_id, double max_rate_mb);
extern TsmJobState tsm_localjob_request_pause(int64 job_id, bool pause);
extern void tsm_localjob_foreach_unfinished(TsmUnfinishedJobCallback callback, void *arg);

#endif							/* TSM_LOCAL_JOBS_H */
