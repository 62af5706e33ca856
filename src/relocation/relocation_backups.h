/*-------------------------------------------------------------------------
 *
 * relocation_backups.h
 *	  Which base backups of the cluster run now, of either kind: a
 *	  walsender serving pg_basebackup, or a session between
 *	  pg_backup_start() and pg_backup_stop() (what pgBackRest, Barman and
 *	  WAL-G call).  A relocation must not switch while one runs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_BACKUPS_H
#define TSM_RELOCATION_BACKUPS_H

#include "utils/timestamp.h"

extern bool tsm_backup_running(TimestampTz *oldest_start, char *what, Size len);

#endif							/* TSM_RELOCATION_BACKUPS_H */
