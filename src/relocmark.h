/*-------------------------------------------------------------------------
 *
 * relocmark.h
 *	  Ownership marks of a relocation's two locations: what lets the
 *	  recovery pass prove that a directory it is about to remove belongs to
 *	  this data directory and this job (relocmark.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCMARK_H
#define TSM_RELOCMARK_H

extern void tsm_relocmark_write(const char *location, int64 job_id);
extern bool tsm_relocmark_is_ours(const char *location, int64 job_id);
extern void tsm_relocmark_remove(const char *location, int64 job_id);

#endif							/* TSM_RELOCMARK_H */
