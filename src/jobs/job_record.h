/*-------------------------------------------------------------------------
 *
 * job_record.h
 *	  The durable record of jobs, table tsmove.job: every statement
 *	  pg_tsmove runs on it, and the names of states and modes
 *	  (job_record.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_JOB_RECORD_H
#define TSM_JOB_RECORD_H

#include "jobs/queue.h"

/* The relkind recorded for a tablespace relocation. */
#define TSM_RELKIND_TABLESPACE 't'

/* A job to insert (move(), move_tablespace(), relocate_tablespace()). */
typedef struct TsmNewJob
{
	TsmJobKind	kind;
	Oid			relid;			/* 0 for a relocation */
	const char *relname;		/* schema-qualified and quoted, or the
								 * tablespace's name */
	char		relkind;
	Oid			owner;			/* the relation's, or the tablespace's */
	Oid			submitted_by;
	TsmMoveMode mode;
	Oid			source_spc;
	Oid			target_spc;
	double		max_rate_mb;
	TsmRelFileNumber relfilenode;	/* what move() saw */
	int64		parent_job;		/* 0: none */
	const char *new_location;	/* a relocation's */
	const char *skip_reason;	/* not NULL: recorded as skipped, with it */
} TsmNewJob;

/* A job as a worker claims it. */
typedef struct TsmClaimedJob
{
	int64		job_id;
	TsmJobKind	kind;
	Oid			relid;
	char	   *relname;
	TsmMoveMode mode;
	Oid			source_spc;
	Oid			target_spc;
	double		max_rate_mb;
	TsmRelFileNumber submitted_relfilenode;
	Oid			submitted_by;
	char	   *new_location;	/* a relocation's */
	bool		pause_requested;	/* tsmove.pause() asked before the claim */

	/*
	 * A relation move the recovery pass queued again to resume: what it
	 * recorded before it was interrupted, and its counters so far.
	 */
	bool		resuming;
	int			nmembers;
	Oid			members[TSM_MAX_MEMBERS];
	TsmRelFileNumber old_nodes[TSM_MAX_MEMBERS];
	TsmRelFileNumber new_nodes[TSM_MAX_MEMBERS];
	TsmProgress earlier;
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
	TsmJobKind	kind;
	TsmJobState state;
	TsmMoveMode mode;
	Oid			source_spc;
	Oid			target_spc;
	int			nnew;
	TsmRelFileNumber new_relfilenodes[TSM_MAX_MEMBERS];
	int			nold;			/* a relation move's old storage, once the */
	TsmRelFileNumber old_relfilenodes[TSM_MAX_MEMBERS];	/* new is recorded */
	char	   *old_location;	/* a relocation's, once recorded */
	char	   *new_location;
} TsmUnfinishedJob;

typedef void (*TsmUnfinishedJobCallback) (const TsmUnfinishedJob *job, void *arg);

extern const char *tsm_state_name(TsmJobState state);
extern TsmJobState tsm_state_from_name(const char *name);
extern const char *tsm_mode_name(TsmMoveMode mode);
extern TsmMoveMode tsm_mode_from_name(const char *name, bool missing_ok, bool *found);

extern int64 tsm_jobrec_insert(const TsmNewJob *job);
extern bool tsm_jobrec_read(int64 job_id, bool latest, TsmJobInfo *info);
extern int64 tsm_jobrec_active_job(Oid relid);
extern bool tsm_jobrec_claim_next(TsmClaimedJob *claimed);
extern bool tsm_jobrec_has_claimable(void);
extern bool tsm_jobrec_has_queued(void);
extern void tsm_jobrec_record_storage(int64 job_id, int nmembers, const Oid *members,
									  const TsmRelFileNumber *old_nodes,
									  const TsmRelFileNumber *new_nodes);
extern void tsm_jobrec_record_old_location(int64 job_id, const char *old_location);
extern int64 tsm_jobrec_active_job_on_tablespace(Oid spc, TsmJobKind kind);
extern void tsm_jobrec_save(int64 job_id, const TsmProgress *progress,
							const char *error);
extern void tsm_jobrec_set_state(int64 job_id, TsmJobState state,
								 const char *error);

extern void tsm_jobrec_set_rate(int64 job_id, double max_rate_mb);
extern void tsm_jobrec_foreach_unfinished(TsmUnfinishedJobCallback callback,
										  void *arg);
extern bool tsm_jobrec_cancel_queued(int64 job_id, TsmUnfinishedJob *storage);
extern TsmJobState tsm_jobrec_request_pause(int64 job_id, bool pause);
extern void tsm_jobrec_requeue_to_resume(int64 job_id);
extern bool tsm_jobrec_is_unfinished(int64 job_id);
extern int64 tsm_jobrec_purge(TimestampTz cutoff, Oid role);

#endif							/* TSM_JOB_RECORD_H */
