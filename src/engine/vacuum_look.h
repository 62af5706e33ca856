/*-------------------------------------------------------------------------
 *
 * vacuum_look.h
 *	  Which VACUUMs read the file system a job reads from (vacuum_look.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_VACUUM_LOOK_H
#define TSM_VACUUM_LOOK_H

#include "datatype/timestamp.h"

/* How often a job looks for VACUUMs near it. */
#define TSM_VACUUM_LOOK_MS 500
/* The longest one holds a line-up, or the copy, off at a time. */
#define TSM_VACUUM_HOLD_MS 30000

/* A bulk copy holds still for VACUUMs at most this many times as long as it copied. */
#define TSM_VACUUM_HELD_PER_COPIED 2

/* A job's holds of its bulk copy for VACUUMs (worker.c). */
typedef struct TsmVacuumYield
{
	double		copied_ms;		/* in the bulk copy's batches so far */
	double		held_ms;		/* held still so far */
	TimestampTz next_look;
} TsmVacuumYield;

extern void tsm_vacuums_in_this_database(bool *autovacuum, bool *vacuum);
extern Oid	tsm_vacuumed_table_on(Oid source_spc, const char **command);
extern Oid	tsm_vacuum_reading(Oid source_spc, const char **command);

#endif							/* TSM_VACUUM_LOOK_H */
