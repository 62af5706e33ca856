/*-------------------------------------------------------------------------
 *
 * job_control.h
 *	  Services every running job uses, below the engine and its front ends:
 *	  state and counters, publishing them to the worker's slot, saving them
 *	  in the job row, cancel and shutdown checks, sleeping, the byte
 *	  budget, and the session settings of the engine's workers
 *	  (job_control.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_JOB_CONTROL_H
#define TSM_JOB_CONTROL_H

#include "jobs/pacing.h"
#include "jobs/queue.h"

typedef struct TsmJobCtl TsmJobCtl;

/*
 * Asked at every check: raise an error if the job should give way to
 * another session (pg_tsmove.yield_to_ddl).  Set by the front end.
 */
typedef void (*TsmConflictCheck) (TsmJobCtl *ctl, void *arg);

struct TsmJobCtl
{
	int64		job_id;
	const char *label;			/* the relation or tablespace, for messages */
	TsmProgress progress;		/* what the slot and the row show */

	/* byte budget: pages written plus the WAL that logs them */
	double		max_rate_mb;	/* the job's: MB/s, 0 = none */
	double		budget_rate;	/* the budget's now (the pace, if adaptive) */
	TimestampTz budget_start;
	int64		budget_spent;
	int64		total_unpaid;	/* not yet charged to total_max_rate_mb */
	int64		wal_usage_at_start;
	TsmPacer	pacer;			/* pg_tsmove.pacing = adaptive */
	int64		recopied_before;	/* blocks_recopied by earlier workers */
	int64		scattered_reads;	/* re-copies of this worker that had to
									 * be read in */
	int64		scattered_read_cost;	/* what the pace charged for them
										 * (TSM_PACER_SCATTERED_READ_COST each),
										 * beyond the bytes */
	bool		pace_binds;		/* the last budget was the adaptive pace,
								 * below the job's max_rate_mb */

	bool		pause_requested;	/* tsmove.pause(): hold still */
	bool		stops_held;		/* tsm_ctl_check() throws no cancel or
								 * shutdown now (they wait for it to clear) */
	bool		others_wait;	/* quiesce or exclusive: the job's lock holds
								 * the others' writes for its whole copy, so
								 * adaptive pacing, which would slow it for
								 * their sake, only makes them wait longer */
	int64		pages_changed;	/* changes by others that the copy must
								 * outpace (mirror.c): the pacing floor */
	int64		pages_changed_ahead;	/* their changes ahead of the cursor,
										 * which the floor counts at a share */

	/* the rate shown in the view */
	TimestampTz rate_sample_time;
	int64		rate_sample_bytes;
	TimestampTz last_publish;

	TsmConflictCheck check_conflicts;
	void	   *check_conflicts_arg;
};

/* The worker's slot; NULL outside a move worker. */
extern TsmWorkerSlot *tsm_my_slot;

extern void tsm_ctl_init(TsmJobCtl *ctl, int64 job_id, const char *label,
						 double max_rate_mb);
extern void tsm_ctl_continue_counters(TsmJobCtl *ctl, const TsmProgress *earlier);
extern void tsm_ctl_set_state(TsmJobCtl *ctl, TsmJobState state);
extern void tsm_ctl_publish(TsmJobCtl *ctl, bool force);
extern void tsm_ctl_save(TsmJobCtl *ctl, const char *error);
extern void tsm_ctl_save_in_transaction(TsmJobCtl *ctl, const char *error);
extern void tsm_ctl_check(TsmJobCtl *ctl);
extern void tsm_ctl_sleep(TsmJobCtl *ctl, long ms);
extern void tsm_ctl_charge_page(TsmJobCtl *ctl, bool throttled, bool scattered_read);

/* Blocks this worker re-copied (blocks_recopied goes on from the job's row). */
static inline int64
tsm_ctl_recopied_here(const TsmJobCtl *ctl)
{
	return ctl->progress.blocks_recopied - ctl->recopied_before;
}
extern bool tsm_ctl_others_idle(TsmJobCtl *ctl);
extern void tsm_ctl_debug_pause(TsmJobCtl *ctl, const char *phase);
extern void tsm_ctl_note(TsmJobCtl *ctl, const char *fmt,...) pg_attribute_printf(2, 3);
extern bool tsm_ctl_lock_all_or_none(void (*take_lock) (void *arg, int i), void *arg,
									 int nlocks, int timeout_ms, int *failed_at);

/* the worker's SIGTERM */
extern void tsm_ctl_sigterm(SIGNAL_ARGS);
extern bool tsm_ctl_shutdown_requested(void);

/* the session of a job worker or a recovery worker */
extern void tsm_worker_session_settings(void);

/*
 * A job's transactions run as its submitter, in a security-restricted
 * operation: tsm_job_run_as(submitter) before the job, InvalidOid after it;
 * tsm_job_start_transaction() instead of StartTransactionCommand() in the
 * job's phases.  The role and the restriction last from the start of each
 * transaction to its end (PostgreSQL allows no security context outside a
 * transaction: StartTransaction asserts it).
 */
extern void tsm_job_run_as(Oid role);
extern void tsm_job_start_transaction(void);

#endif							/* TSM_JOB_CONTROL_H */
