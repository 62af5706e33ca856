/*-------------------------------------------------------------------------
 *
 * relocation_dbcatalog.h
 *	  The relations of any database stored in a tablespace
 *	  (relocation_dbcatalog.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_DBCATALOG_H
#define TSM_RELOCATION_DBCATALOG_H

#include "pg_tsmove.h"

typedef struct TsmDbRelation
{
	Oid			relid;
	TsmRelFileNumber relfilenode;
	char		relpersistence;
	char		relkind;
} TsmDbRelation;

extern void tsm_db_relations_in_tablespace(Oid dbid, Oid db_spc, Oid spc,
										   TsmDbRelation **rels, int *nrels);

#endif							/* TSM_RELOCATION_DBCATALOG_H */
