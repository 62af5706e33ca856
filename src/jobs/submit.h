/*-------------------------------------------------------------------------
 *
 * submit.h
 *	  What may move where, and the submission of jobs: what the SQL
 *	  functions that queue jobs share, and the checks the front ends make
 *	  again when a job starts (submit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_SUBMIT_H
#define TSM_SUBMIT_H

#include "fmgr.h"
#include "utils/relcache.h"

#include "jobs/queue.h"

/* what may move */
extern void tsm_check_movable(Relation rel, Oid target_spc, TsmMoveMode mode);
extern void tsm_check_move_privileges(Oid relid, const char *relname,
									  Oid target_spc, Oid role);
extern void tsm_check_server_can_move(bool online);
extern TsmMoveMode tsm_mode_argument(const char *name, bool *known);
extern double tsm_rate_argument(FunctionCallInfo fcinfo, int argno);
extern int64 tsm_active_relocation_of(Oid spc);
extern int64 tsm_active_move_on_tablespace(Oid spc);
extern void tsm_check_no_relocation_of(Oid spc, const char *what);

/* what may be relocated */
extern char *tsm_read_tablespace_link(Oid spc, const char *spcname);
extern char *tsm_check_relocatable(Oid spc, const char *spcname,
								   const char *new_location);

/* the submission */
extern void tsm_note_submission(void);
extern void tsm_note_queued_job_touched(void);
extern int64 tsm_insert_move(Relation rel, Oid target_spc, TsmMoveMode mode,
							 double rate, int64 parent_job, const char *skip_reason);

#endif							/* TSM_SUBMIT_H */
