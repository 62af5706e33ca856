/*-------------------------------------------------------------------------
 *
 * relation_map.c
 *	  Which tablespace each relation of each database lives in, so that the
 *	  sampler can add a relation's block counters to its tablespace.
 *
 * PostgreSQL's cumulative statistics are in shared memory for every
 * database, keyed by (database, relation OID), but a relation's tablespace
 * is in its own database's pg_class, which only a process connected to
 * that database can read.  So the map is filled by short-lived background
 * workers, one database at a time: "pg_tsmove relation map" connects to the
 * database, scans pg_class (a plain catalog scan: no SQL, nothing a user
 * could redefine), keeps the relations with storage that have statistics
 * showing block accesses, and replaces that database's part of the shared
 * map.  Shared catalogs are stored under database 0.
 *
 * The sampler decides when (tsm_relmap_schedule, sampler only):
 *	- soon (2 s after the last refresh, doubling while the same relations
 *	  stay unknown, up to the refresh interval) when a database has blocks
 *	  of a relation the map does not know (a new relation);
 *	- every pg_tsmove.relation_map_refresh for a database that had any
 *	  block accesses since its last refresh (so a relation moved by any
 *	  means is attributed to its new tablespace within that time);
 *	- never for an idle database; one idle for ten refresh intervals (or
 *	  dropped) is forgotten, its part of the map with it.
 * One refresh worker runs at a time; it takes a background worker slot for
 * a few milliseconds.  Databases are found from the statistics, so none is
 * listed from the catalog.
 *
 * Locking: the relmap lock, exclusive while a refresh worker replaces its
 * database's entries, shared for lookups by the sampler.  The map holds at
 * most pg_tsmove.relation_map_size relations; when it is full, relations
 * left out stay "unattributed" (counted in tsmove.monitor_status).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_tablespace_d.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "monitor/monitor_internal.h"

/* First retry after unknown relations were seen, in ms (then doubling). */
#define TSM_RELMAP_RETRY_MS 2000

typedef struct TsmRelMapKey
{
	Oid			dbid;			/* InvalidOid: a shared catalog */
	Oid			relid;
} TsmRelMapKey;

typedef struct TsmRelMapEntry
{
	TsmRelMapKey key;
	Oid			spcoid;
	bool		is_index;
} TsmRelMapEntry;

typedef struct TsmRelMapShared
{
	LWLock	   *lock;
	bool		full;			/* a refresh could not store everything */
} TsmRelMapShared;

static TsmRelMapShared *tsm_relmap = NULL;
static HTAB *tsm_relmap_hash = NULL;

/* ---- sampler-local scheduling ------------------------------------------ */

typedef struct TsmDbRefresh
{
	Oid			dbid;
	TimestampTz last_refresh;	/* start of the last refresh, 0 if none */
	bool		active;			/* blocks accessed since then */
	bool		unmapped;		/* ... of relations the map does not know */
	int			retries;		/* refreshes in a row that left some unknown */
} TsmDbRefresh;

static HTAB *db_refresh = NULL;
static BackgroundWorkerHandle *refresh_handle = NULL;

Size
tsm_relmap_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(TsmRelMapShared)),
					hash_estimate_size(tsm_relation_map_size, sizeof(TsmRelMapEntry)));
}

void
tsm_relmap_shmem_init(void)
{
	bool		found;
	HASHCTL		info;

	tsm_relmap = ShmemInitStruct("pg_tsmove relation map", sizeof(TsmRelMapShared), &found);
	if (!found)
	{
		tsm_relmap->lock = tsm_monitor_lock(TSM_LOCK_RELMAP);
		tsm_relmap->full = false;
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(TsmRelMapKey);
	info.entrysize = sizeof(TsmRelMapEntry);
	tsm_relmap_hash = tsm_shmem_init_hash("pg_tsmove relation map hash",
										  tsm_relation_map_size, &info, HASH_ELEM | HASH_BLOBS);
}

/*
 * tsm_relmap_lookup
 *		The tablespace of (dbid, relid) and whether it is an index; false
 *		if the map does not know it.  Takes the relmap lock shared.
 */
bool
tsm_relmap_lookup(Oid dbid, Oid relid, Oid *spcoid, bool *is_index)
{
	TsmRelMapKey key;
	TsmRelMapEntry *entry;

	key.dbid = dbid;
	key.relid = relid;
	LWLockAcquire(tsm_relmap->lock, LW_SHARED);
	entry = hash_search(tsm_relmap_hash, &key, HASH_FIND, NULL);
	if (entry != NULL)
	{
		*spcoid = entry->spcoid;
		*is_index = entry->is_index;
	}
	LWLockRelease(tsm_relmap->lock);
	return entry != NULL;
}

/* Relations in the map and whether the last refresh had to leave some out. */
int64
tsm_relmap_count(void)
{
	int64		n;

	LWLockAcquire(tsm_relmap->lock, LW_SHARED);
	n = hash_get_num_entries(tsm_relmap_hash);
	LWLockRelease(tsm_relmap->lock);
	return n;
}

bool
tsm_relmap_full(void)
{
	return tsm_relmap->full;
}

/* Sampler only: a new sample starts; unknown relations are seen afresh. */
void
tsm_relmap_begin_pass(void)
{
	HASH_SEQ_STATUS seq;
	TsmDbRefresh *db;

	if (db_refresh == NULL)
		return;
	hash_seq_init(&seq, db_refresh);
	while ((db = hash_seq_search(&seq)) != NULL)
		db->unmapped = false;
}

/*
 * tsm_relmap_request
 *		Sampler only: database dbid had block accesses (of a relation the
 *		map does not know, if unmapped).
 */
void
tsm_relmap_request(Oid dbid, bool unmapped)
{
	TsmDbRefresh *db;
	bool		found;

	if (!OidIsValid(dbid))
		return;					/* shared catalogs: mapped by any database */
	if (db_refresh == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(TsmDbRefresh);
		ctl.hcxt = TopMemoryContext;
		db_refresh = hash_create("pg_tsmove database refreshes", 16, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	db = hash_search(db_refresh, &dbid, HASH_ENTER, &found);
	if (!found)
	{
		db->last_refresh = 0;
		db->active = false;
		db->unmapped = false;
		db->retries = 0;
	}
	db->active = true;
	if (unmapped)
		db->unmapped = true;
}

/* Remove a database's relations from the map (relmap lock exclusive). */
static void
purge_database(Oid dbid)
{
	HASH_SEQ_STATUS seq;
	TsmRelMapEntry *entry;

	LWLockAcquire(tsm_relmap->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, tsm_relmap_hash);
	while ((entry = hash_seq_search(&seq)) != NULL)
		if (entry->key.dbid == dbid)
			hash_search(tsm_relmap_hash, &entry->key, HASH_REMOVE, NULL);
	LWLockRelease(tsm_relmap->lock);
}

/* Start the refresh worker for one database; false if no slot is free. */
static bool
start_refresh(Oid dbid)
{
	BackgroundWorker worker;
	MemoryContext old;
	bool		started;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_relmap_refresh_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "pg_tsmove relation map of database %u", dbid);
	strlcpy(worker.bgw_type, "pg_tsmove relation map", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(dbid);
	worker.bgw_notify_pid = MyProcPid;
	/* the handle outlives the sampler's pass, whose memory is reset */
	old = MemoryContextSwitchTo(TopMemoryContext);
	started = RegisterDynamicBackgroundWorker(&worker, &refresh_handle);
	MemoryContextSwitchTo(old);
	return started;
}

/*
 * tsm_relmap_schedule
 *		Sampler only: start the refresh of the database that needs it most,
 *		unless one is running.
 */
void
tsm_relmap_schedule(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	TsmDbRefresh *db;
	TsmDbRefresh *best = NULL;
	int64		periodic_us = (int64) tsm_relation_map_refresh_s * USECS_PER_SEC;
	static TimestampTz last_no_slot_log = 0;

	if (refresh_handle != NULL)
	{
		pid_t		pid;

		if (GetBackgroundWorkerPid(refresh_handle, &pid) != BGWH_STOPPED)
			return;
		pfree(refresh_handle);
		refresh_handle = NULL;
	}
	if (db_refresh == NULL)
		return;

	hash_seq_init(&seq, db_refresh);
	while ((db = hash_seq_search(&seq)) != NULL)
	{
		int64		since = now - db->last_refresh;
		int64		retry_us = (int64) TSM_RELMAP_RETRY_MS * 1000 << Min(db->retries, 16);
		bool		due;

		if (!db->unmapped)
			db->retries = 0;	/* the last sample knew every relation */
		if (!db->active && !db->unmapped && since >= 10 * periodic_us)
		{
			/*
			 * Idle (or dropped) for long: forget it and its part of the map,
			 * which activity would bring back within a refresh.
			 */
			purge_database(db->dbid);
			hash_search(db_refresh, &db->dbid, HASH_REMOVE, NULL);
			continue;
		}
		due = (db->unmapped && since >= Min(retry_us, periodic_us)) ||
			(db->active && since >= periodic_us);
		if (due && (best == NULL || db->last_refresh < best->last_refresh))
			best = db;
	}
	if (best == NULL)
		return;

	if (!start_refresh(best->dbid))
	{
		refresh_handle = NULL;
		if (now - last_no_slot_log >= 60 * USECS_PER_SEC)
		{
			ereport(LOG,
					(errmsg("pg_tsmove could not start a relation map refresh: no background worker slot is free"),
					 errhint("You may need to increase max_worker_processes.")));
			last_no_slot_log = now;
		}
		return;
	}
	if (best->unmapped)
		best->retries++;
	best->last_refresh = now;
	best->active = false;
}

/* ---- the refresh worker ------------------------------------------------ */

/*
 * tsm_relmap_refresh_main
 *		Background worker: replace database main_arg's part of the map.
 *
 * Connected to that database as a superuser; reads pg_class with a catalog
 * scan in one short transaction (AccessShareLock on pg_class), then takes
 * the relmap lock exclusively to rewrite the database's entries.
 */
void
tsm_relmap_refresh_main(Datum main_arg)
{
	Oid			dbid = DatumGetObjectId(main_arg);
	Relation	pg_class;
	TableScanDesc scan;
	HeapTuple	tuple;
	TsmRelMapEntry *found_rels;
	int			nfound = 0;
	int			cap = 256;
	HASH_SEQ_STATUS seq;
	TsmRelMapEntry *entry;
	bool		full = false;

	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, BGWORKER_BYPASS_ALLOWCONN);
	pgstat_report_appname("pg_tsmove relation map");

	found_rels = MemoryContextAlloc(TopMemoryContext, cap * sizeof(TsmRelMapEntry));
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pg_class = table_open(RelationRelationId, AccessShareLock);
	scan = table_beginscan_catalog(pg_class, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_class c = (Form_pg_class) GETSTRUCT(tuple);
		CHECK_FOR_INTERRUPTS();
		if (!RELKIND_HAS_STORAGE(c->relkind))
			continue;
		/* only relations whose blocks were ever accessed: the map stays small */
		if (tsm_relation_blocks_fetched(c->relisshared, c->oid) == 0)
			continue;
		if (nfound == cap)
		{
			cap *= 2;
			found_rels = repalloc(found_rels, cap * sizeof(TsmRelMapEntry));
		}
		entry = &found_rels[nfound++];
		entry->key.dbid = c->relisshared ? InvalidOid : MyDatabaseId;
		entry->key.relid = c->oid;
		entry->spcoid = OidIsValid(c->reltablespace) ? c->reltablespace :
			(c->relisshared ? GLOBALTABLESPACE_OID : MyDatabaseTableSpace);
		entry->is_index = (c->relkind == RELKIND_INDEX);
	}
	table_endscan(scan);
	table_close(pg_class, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();

	LWLockAcquire(tsm_relmap->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, tsm_relmap_hash);
	while ((entry = hash_seq_search(&seq)) != NULL)
		if (entry->key.dbid == dbid)
			hash_search(tsm_relmap_hash, &entry->key, HASH_REMOVE, NULL);
	for (int i = 0; i < nfound; i++)
	{
		TsmRelMapEntry *e;
		bool		exists;

		e = hash_search(tsm_relmap_hash, &found_rels[i].key, HASH_FIND, NULL);
		if (e == NULL && hash_get_num_entries(tsm_relmap_hash) >= tsm_relation_map_size)
		{
			full = true;
			continue;
		}
		e = hash_search(tsm_relmap_hash, &found_rels[i].key, HASH_ENTER_NULL, &exists);
		if (e == NULL)
		{
			full = true;
			continue;
		}
		e->spcoid = found_rels[i].spcoid;
		e->is_index = found_rels[i].is_index;
	}
	tsm_relmap->full = full;
	LWLockRelease(tsm_relmap->lock);
	proc_exit(0);
}
