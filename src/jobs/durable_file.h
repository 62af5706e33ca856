/*-------------------------------------------------------------------------
 *
 * durable_file.h
 *	  Write a small file whole and durably: under a temporary name, synced,
 *	  then renamed over the final name with durable_rename().  A crash
 *	  leaves either the old content or the new one, never a part.  Used
 *	  for resume points (resume.c) and relocation marks
 *	  (relocation_marks.c).  Calls nothing of pg_tsmove.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_DURABLE_FILE_H
#define TSM_DURABLE_FILE_H

extern void tsm_write_file_durably(const char *path, const char *data, int len);

#endif							/* TSM_DURABLE_FILE_H */
