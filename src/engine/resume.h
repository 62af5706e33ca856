/*-------------------------------------------------------------------------
 *
 * resume.h
 *	  Resume points of relation moves (resume.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RESUME_H
#define TSM_RESUME_H

#include "engine/engine.h"
#include "nodes/pg_list.h"

extern void tsm_resume_write(Oid dbid, int64 job_id, XLogRecPtr resume_lsn,
							 TsmFileSet *fs, Oid target_spc, int nnew,
							 const TsmRelFileNumber *new_nodes);
extern XLogRecPtr tsm_resume_read(Oid dbid, int64 job_id, TsmFileSet *fs);
extern bool tsm_resume_exists(Oid dbid, int64 job_id);
extern void tsm_resume_forget(Oid dbid, int64 job_id);
extern void tsm_resume_slot_name(char *name, Oid dbid, int64 job_id);
extern bool tsm_resume_parse_slot_name(const char *name, Oid *dbid, int64 *job_id);
extern bool tsm_resume_slot_usable(Oid dbid, int64 job_id, const char **why);
extern void tsm_resume_drop_slot(Oid dbid, int64 job_id);
extern void tsm_resume_remove_orphans(Oid dbid, bool (*is_unfinished) (int64 job_id));
extern List *tsm_resume_check_slots(List *dbids);

#endif							/* TSM_RESUME_H */
