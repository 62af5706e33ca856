/*-------------------------------------------------------------------------
 *
 * jobrecord.h
 *	  The durable record of jobs, table tsmove.job: every statement
 *	  pg_tsmove runs on it (jobrecord.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_JOBRECORD_H
#define TSM_JOBRECORD_H

#include "pg_tsmove.h"

/* A job to insert (tsmove.move()). */
typedef struct TsmNewJob
{
	Oid			relid;
	const char *relname;		/* schema-qualified, quoted */
	char		relkind;
	Oid			owner;
	Oid			submitted_by;
	bool		online;
	Oid			source_spc;
	Oid			target_spc;
	double		max_rate_mb;
	TsmRelFileNumber relfilenode;
	int64		parent_job;		/* 0: none */
} TsmNewJob;

/* A job as a worker claims it. */
typedef struct TsmClaimedJob
{
	int64		job_id;
	Oid			relid;
	char	   *relname;
	bool		online;
	Oid			source_spc;
	Oid			target_spc;
	double		max_rate_mb;
	TsmRelFileNumber submitted_relfilenode;
	Oid			submitted_by;
} TsmClaimedJob;

/* A job as tsmove.wait(), cancel() and set_rate() see it. */
typedef struct TsmJobInfo
{
	TsmJobState state;
	Oid			submitted_by;
	Oid			owner;
	bool		submitted_here; /* inserted by the current transaction */
} TsmJobInfo;

/* A job the recovery pass finds unfinished. */
typedef struct TsmUnfinishedJob
{
	int64		job_id;
	TsmJobState state;
	Oid			target_spc;
	int			nnew;
	TsmRelFileNumber new_relfilenodes[TSM_MAX_MEMBERS];
} TsmUnfinishedJob;

typedef void (*TsmUnfinishedJobCallback) (const TsmUnfinishedJob *job, void *arg);

extern int64 tsm_jobrec_insert(const TsmNewJob *job);
extern bool tsm_jobrec_read(int64 job_id, bool latest, TsmJobInfo *info);
extern int64 tsm_jobrec_active_job(Oid relid);
extern bool tsm_jobrec_claim_next(TsmClaimedJob *claimed);
extern bool tsm_jobrec_has_claimable(void);
extern bool tsm_jobrec_has_queued(void);
extern void tsm_jobrec_record_storage(int64 job_id, int nmembers, const Oid *members,
									  const TsmRelFileNumber *old_nodes,
									  const TsmRelFileNumber *new_nodes);
extern void tsm_jobrec_save(int64 job_id, const TsmProgress *progress,
							const char *error);
extern void tsm_jobrec_set_state(int64 job_id, TsmJobState state,
								 const char *error);
extern bool tsm_jobrec_cancel_queued(int64 job_id);
extern void tsm_jobrec_set_rate(int64 job_id, double max_rate_mb);
extern void tsm_jobrec_foreach_unfinished(TsmUnfinishedJobCallback callback,
										  void *arg);

#endif							/* TSM_JOBRECORD_H */
