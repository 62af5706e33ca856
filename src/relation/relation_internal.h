/*-------------------------------------------------------------------------
 *
 * relation_internal.h
 *	  What the two files of the relation move share, and nothing outside
 *	  them includes: its state, one TsmRelMove per job (job->state), made
 *	  by relation_move.c and used by relation_switch.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELATION_INTERNAL_H
#define TSM_RELATION_INTERNAL_H

#include "relation/relation.h"

/* One member: the relation, its TOAST table or its TOAST index. */
typedef struct TsmRelMember
{
	Oid			relid;
	char		relpersistence;
	bool		standard_pages; /* heap or btree: pages have pd_lower/upper */
	TsmRelFileNode old_node;
	TsmRelFileNode new_node;
	BlockNumber resumed_length; /* resuming: blocks of the new main fork
								 * found on disk, overwritten, not extended */
	BlockNumber *warm_blocks;	/* blocks of the old file in shared buffers */
	int			nwarm;
} TsmRelMember;

typedef struct TsmRelMove
{
	int			nmembers;		/* the relation, its TOAST table and index */
	TsmRelMember members[TSM_MAX_MEMBERS];
	char	   *target_name;
	bool		session_locked;
} TsmRelMove;

#endif							/* TSM_RELATION_INTERNAL_H */
