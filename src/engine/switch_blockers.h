/*-------------------------------------------------------------------------
 *
 * switch_blockers.h
 *	  The sessions whose locks block a switch, and cancelling them
 *	  (switch_blockers.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_SWITCH_BLOCKERS_H
#define TSM_SWITCH_BLOCKERS_H

#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/timestamp.h"

#include "jobs/job_control.h"

/* After cancelling its blockers, an attempt waits this long for them to end. */
#define TSM_CANCEL_GRACE_MS 200
/* Blocking transactions remembered from one failed attempt to the next. */
#define TSM_MAX_REMEMBERED_BLOCKERS 64

/* What a switch tells switch_blockers.c about itself. */
typedef struct TsmSwitchBlock
{
	int64		job_id;
	const char *what;			/* the relation's or tablespace's name */
	Oid			submitted_by;	/* cancels only what this role may */
	LOCKMODE	lockmode;		/* the switch's: who conflicts with it blocks */
	TimestampTz blocked_since;	/* first failed attempt, or 0 */
	bool		refusal_logged; /* "may not signal" was logged */
	/* the client transactions that blocked the last failed attempt */
	int			nblockers;
	VirtualTransactionId blockers[TSM_MAX_REMEMBERED_BLOCKERS];
	int			blocker_pids[TSM_MAX_REMEMBERED_BLOCKERS];	/* their processes */
} TsmSwitchBlock;

extern void tsm_switch_block_init(TsmSwitchBlock *block, int64 job_id,
								  const char *what, Oid submitted_by,
								  LOCKMODE lockmode);
extern void tsm_switch_attempt_failed(TsmSwitchBlock *block,
									  const LOCKTAG *tags, int ntags);
extern bool tsm_last_blockers_remain(const TsmSwitchBlock *block,
									 const LOCKTAG *tags, int ntags);
extern void tsm_switch_blockers_named(const TsmSwitchBlock *block, char *buf,
									  size_t len);
extern void tsm_note_blockers_remain(TsmJobCtl *ctl, const TsmSwitchBlock *block);
extern int	tsm_cancel_blocking_queries(TsmSwitchBlock *block,
										const LOCKTAG *tags, int ntags);

#endif							/* TSM_SWITCH_BLOCKERS_H */
