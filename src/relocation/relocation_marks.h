/*-------------------------------------------------------------------------
 *
 * relocation_marks.h
 *	  Ownership marks of a relocation's two locations: what lets the
 *	  recovery pass prove that a directory it is about to remove belongs to
 *	  this data directory and this job (relocation_marks.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_MARKS_H
#define TSM_RELOCATION_MARKS_H

extern void tsm_relocmark_write(const char *location, int64 job_id);
extern bool tsm_relocmark_is_ours(const char *location, int64 job_id);
extern void tsm_relocmark_remove(const char *location, int64 job_id);

#endif							/* TSM_RELOCATION_MARKS_H */
