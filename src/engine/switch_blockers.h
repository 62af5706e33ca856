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
#include "engine/vacuum_look.h"

/* After cancelling its blockers, an attempt waits this long for them to end. */
#define TSM_CANCEL_GRACE_MS 200
/* Blocking transactions remembered from one failed attempt to the next. */
#define TSM_MAX_REMEMBERED_BLOCKERS 64
/* Holders seen just before an attempt's requests; more: not told apart. */
#define TSM_MAX_HOLDERS_BEFORE_REQUEST 64

/* Sessions whose transactions a blocked switch times (timed attempts). */
#define TSM_MAX_WATCHED_SESSIONS 32
/* How often a blocked switch looks at them. */
#define TSM_WATCH_INTERVAL_MS 20
/* At most one attempt this often waits to line them up. */
#define TSM_LINE_UP_INTERVAL_MS 5000
/*
 * Two looks further apart may have missed a transaction's start or end
 * (a switch attempt between two rounds of looks takes tens of ms).
 */
#define TSM_WATCH_GAP_MS 250
/* A blocker's transactions shorter than this are not timed. */
#define TSM_SHORT_TRANSACTION_MS 100

typedef enum TsmTimedAttempt
{
	TSM_TIMED_NOW,				/* attempt now, waiting timed_wait_ms */
	TSM_TIMED_LATER,			/* every blocker is timed: look again */
	TSM_TIMED_NEVER				/* attempts as usual */
} TsmTimedAttempt;

typedef struct TsmWatchedSession
{
	int			pid;
	PGPROC	   *proc;			/* its backend's slot: the same pid in
								 * another is a new session (a reused pid) */
	LocalTransactionId lxid;	/* its transaction that holds a lock the
								 * switch needs, or invalid */
	TimestampTz since;			/* when that was first seen */
	bool		seen_from_start;	/* one look before, it held none: since is
									 * within a look of its start */
	double		last_length_ms; /* of its last such transaction seen whole;
								 * < 0 unknown */
	double		variation_ms;	/* between its last lengths, fading */
} TsmWatchedSession;

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
	/*
	 * The transactions that held a conflicting lock just before the
	 * attempt's requests (tsm_switch_attempt_starting): only those can
	 * have blocked it.  Not complete (more than fit, or not taken): a
	 * failed attempt names every holder, as before.
	 */
	int			nheld_before;
	bool		held_before_complete;
	VirtualTransactionId held_before[TSM_MAX_HOLDERS_BEFORE_REQUEST];
	MemoryContext cxt;			/* the job's, for tags */
	/* the locks the switch needs that a failed attempt found held */
	LOCKTAG    *tags;
	int			ntags;
	int			tags_room;
	/* timed attempts (tsm_switch_block_watch, tsm_switch_block_timed) */
	TimestampTz last_look;
	bool		attempted_since_look;	/* an attempt failed since */
	int			nwatched;
	TsmWatchedSession watched[TSM_MAX_WATCHED_SESSIONS];
	bool		unwatched_blockers; /* the last look saw a holder it cannot
									 * time (a prepared transaction, a
									 * background process, no room) */
	TimestampTz last_lining_up;	/* the last attempt that waited to line
								 * blockers up */
	Oid			source_spc;		/* the tablespace the job reads from */
	char		vacuum_what[80];	/* what held line-ups off at the last
									 * look, or "" */
	TimestampTz held_off_since; /* the first line-up it held off, or 0 */
	bool		line_up_held_off;	/* the last decision held one off */
	bool		lining_up;		/* the attempt decided on does */
	TimestampTz timed_failed_at;	/* the last timed attempt that failed */
	int			timed_wait_ms;	/* > 0: the next attempt is timed, and
								 * waits this long for its locks */
} TsmSwitchBlock;

extern void tsm_switch_block_init(TsmSwitchBlock *block, int64 job_id,
								  const char *what, Oid submitted_by,
								  LOCKMODE lockmode, Oid source_spc);
extern void tsm_switch_block_look_at_vacuums(TsmSwitchBlock *block);
extern void tsm_switch_timed_attempt_failed(TsmSwitchBlock *block);
extern void tsm_switch_attempt_starting(TsmSwitchBlock *block,
										const LOCKTAG *tags, int ntags);
extern void tsm_switch_attempt_failed(TsmSwitchBlock *block,
									  const LOCKTAG *tags, int ntags);
extern bool tsm_last_blockers_remain(const TsmSwitchBlock *block,
									 const LOCKTAG *tags, int ntags);
extern void tsm_switch_blockers_named(const TsmSwitchBlock *block, char *buf,
									  size_t len);
extern void tsm_note_blockers_remain(TsmJobCtl *ctl, const TsmSwitchBlock *block);
extern void tsm_switch_block_watch(TsmSwitchBlock *block);
extern TsmTimedAttempt tsm_switch_block_timed(TsmSwitchBlock *block, bool recheck);
extern bool tsm_switch_block_still_due(TsmSwitchBlock *block);
extern void tsm_switch_block_describe(const TsmSwitchBlock *block, char *buf,
									  size_t len);
extern int	tsm_cancel_blocking_queries(TsmSwitchBlock *block,
										const LOCKTAG *tags, int ntags);

#endif							/* TSM_SWITCH_BLOCKERS_H */
