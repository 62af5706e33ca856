/*-------------------------------------------------------------------------
 *
 * relation_storage.h
 *	  Dropping the files of a relation move (relation_storage.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELATION_STORAGE_H
#define TSM_RELATION_STORAGE_H

#include "pg_tsmove.h"

extern void tsm_drop_storage(TsmRelFileNode node);
extern void tsm_drop_storage_set(Oid spc, const TsmRelFileNumber *relfilenumbers, int n);

#endif							/* TSM_RELATION_STORAGE_H */
