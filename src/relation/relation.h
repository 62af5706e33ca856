/*-------------------------------------------------------------------------
 *
 * relation.h
 *	  The relation move (tsmove.move()): the front end that gives one
 *	  relation new files in another tablespace, and its switch.
 *
 * Files:
 *	relation_move.c		the new files and the locks the job holds for its
 *						life, warming the cache after the switch, the old
 *						files' removal, the clean-up after an error
 *	relation_switch.c	the switch: AccessExclusiveLock within
 *						pg_tsmove.switch_lock_timeout, the last copies,
 *						the catalog's new tablespace and relfilenode
 *	relation_internal.h	the state the two share, included by nothing else
 *
 * Who calls whom: only the worker (workers/worker.c) calls these functions,
 * through its TsmFrontEnd (engine/frontend.h).  relation/ calls engine/
 * (the file set, resume points, the relation's storage, switch blockers;
 * never the copy or the mirror) and jobs/; never workers/, api/ or
 * relocation/.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELATION_H
#define TSM_RELATION_H

#include "engine/frontend.h"

/* relation_move.c: a relation's new files, its locks, after the switch */
extern void tsm_relation_prepare(TsmJob *job);
extern void tsm_relation_finish(TsmJob *job);
extern void tsm_relation_drop_old(TsmJob *job);
extern void tsm_relation_cleanup(TsmJob *job);

/* relation_switch.c: the relation move's switch */
extern bool tsm_relation_switch_lock(TsmJob *job);
extern bool tsm_relation_switch_check(TsmJob *job);
extern void tsm_relation_switch_release(TsmJob *job);
extern bool tsm_relation_switch_commit(TsmJob *job);

#endif							/* TSM_RELATION_H */
