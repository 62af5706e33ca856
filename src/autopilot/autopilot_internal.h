/*-------------------------------------------------------------------------
 *
 * autopilot_internal.h
 *	  Declarations shared by autopilot.c and pilot.c only.
 *
 * Shared state: one TsmAutopilotShared, guarded by its spinlock.  The pilot
 * writes `pilot_pid` and the cycle figures; a step worker writes its
 * TsmStepResult, which the pilot reads after the worker has exited (one
 * step worker runs at a time, so the result slot has one writer).  Readers
 * copy the struct under the spinlock; nothing else is done while holding it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_AUTOPILOT_INTERNAL_H
#define TSM_AUTOPILOT_INTERNAL_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/spin.h"

#include "autopilot/autopilot.h"

/* pg_tsmove.autopilot */
typedef enum TsmAutopilotMode
{
	TSM_AUTOPILOT_OFF,
	TSM_AUTOPILOT_PROPOSE,
	TSM_AUTOPILOT_ON
} TsmAutopilotMode;

/*
 * What the pilot tells a step worker (in bgw_extra): whether it may act,
 * and what the other databases reported in this cycle's first pass, which
 * the step turns into reasons not to act (tsmove.autopilot_step()).
 */
typedef struct TsmStepOrder
{
	uint64		step_id;		/* echoed in the result: a step of a pilot
								 * that died and restarted cannot answer for
								 * a new one */
	bool		act;			/* second pass: propose or start the best */
	bool		in_flight;		/* a move the autopilot started is running */
	TimestampTz last_finished;	/* latest end of an autopilot move, or 0 */
	int32		moves_today;	/* moves started in the last 24 hours */
	int64		bytes_today;	/* ... and their size */
	Oid			stopped_db;		/* a database whose log says "stopped" */
} TsmStepOrder;

/* What a step worker answers. */
typedef struct TsmStepResult
{
	uint64		step_id;		/* the order's */
	bool		answered;		/* the step ran to its end */
	bool		installed;		/* the database has the extension (0.5+) */
	double		best_benefit;	/* of its best acceptable candidate; < 0: none */
	bool		in_flight;
	TimestampTz last_finished;
	int32		moves_today;
	int64		bytes_today;
	bool		stopped;
} TsmStepResult;

typedef struct TsmAutopilotShared
{
	slock_t		mutex;
	int			pilot_pid;
	TsmStepResult result;		/* of the step worker that ran last */
} TsmAutopilotShared;

/* autopilot.c */
extern int	tsm_autopilot_mode;
extern int	tsm_autopilot_interval_s;
extern TsmAutopilotShared *tsm_autopilot;

#endif							/* TSM_AUTOPILOT_INTERNAL_H */
