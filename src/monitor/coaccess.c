/*-------------------------------------------------------------------------
 *
 * coaccess.c
 *	  Co-access between relations: which tables and indexes are read
 *	  together, per query (executor hooks) and at the same moment by
 *	  different sessions (the sampler), in a bounded shared pair table;
 *	  tsmove.coaccess_pairs() and tsmove.coaccess_reset().
 *
 * Per query.  ExecutorStart lists the relations the plan scans (scan nodes,
 * the index of an index scan, bitmap index scans, the target of
 * INSERT/UPDATE/DELETE) and notes each one's block counters
 * (rel->pgstat_info: blocks fetched and hit in this backend, the counters
 * behind pg_statio_*).  ExecutorEnd reads them again: the differences are
 * the blocks the execution accessed, and how many of them were found
 * outside shared buffers.  Every pair of relations that both had blocks
 * accessed is one co-access, weighted as in Agrawal et al., "Automating
 * layout of relational databases" (ICDE 2003): the blocks of the pair
 * accessed together.  A query run inside another one (a function, a
 * trigger) adds its relations and blocks to the enclosing execution, so a
 * function that reads B for each row of A makes (A, B) co-accessed.  A
 * parallel worker adds its blocks to the pair but not an execution.
 * System catalogs (OID below FirstNormalObjectId) and temporary relations
 * are left out: they cannot be moved.  Relations a plan opens only while
 * it runs (INSERT/UPDATE's indexes, tuple-routing partitions) are not seen.
 *
 * Across sessions.  While a backend is inside its top-level ExecutorRun it
 * publishes the relations of that execution in its TsmBackendSlot.  The
 * sampler copies all slots every pg_tsmove.coaccess_sample_interval; two
 * relations of one database being read by different sessions (a parallel
 * worker counts as its leader's session) add one concurrent tick to their
 * pair.
 *
 * The pair table is a shared hash of pg_tsmove.coaccess_max_pairs entries,
 * keyed by (database, lower relation OID, higher relation OID).  When it
 * is full, the least-used 5 % are evicted (usage: updates, decayed at each
 * eviction, as pg_stat_statements' entry_dealloc) and counted.
 *
 * A query does not touch the shared pair table: it adds its pairs to a
 * small pending table (TSM_BACKEND_PAIRS pairs) in its backend's own slot
 * of shared memory, under that slot's spinlock, which nobody else takes
 * but the merge.  The sampler merges every backend's pending pairs into
 * the pair table at each tick, and so does every reader of the pairs
 * (tsmove.coaccess, monitor_status, reset), so what a query did is visible
 * as soon as it ended, and an idle or exited backend's pairs are not held
 * back.  Pairs that do not fit in the pending table go to the pair table
 * directly.  So under OLTP load the backends do not fight over one pair's
 * cache line, as they would (pg_stat_statements' entries do).
 *
 * Locking: a backend slot's pending pairs are guarded by the slot's
 * spinlock (the backend adding, a merge copying and clearing).  The pair
 * table, as pg_stat_statements: updating an existing pair takes the
 * coaccess lock shared and the pair's spinlock; creating pairs (and
 * evicting) takes the lock exclusively; a merge holds it exclusively from
 * before it empties the first slot until its pairs are in, so that a
 * reader never sees pairs that left a slot and are not in the table yet;
 * reset takes it exclusively, the SQL reader shared.  A slot's spinlock
 * is taken inside the exclusive lock, never the other way round.  A slot's reading set is written only by its backend,
 * without a lock, inside a change-counter protocol (even: stable) that lets
 * the sampler copy it consistently.
 *
 * Cost with pg_tsmove.track_coaccess = off: the hooks test one boolean.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/parallel.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "monitor/monitor_internal.h"

PG_FUNCTION_INFO_V1(tsm_coaccess_pairs);
PG_FUNCTION_INFO_V1(tsm_coaccess_reset);

/* Relations followed per execution: up to 496 pairs per execution. */
#define TSM_EXEC_MAX_RELS 32
/* Executions followed at once in one backend (nesting, open cursors). */
#define TSM_MAX_TRACKED 32
/* Distinct relations per database considered in one concurrency tick. */
#define TSM_TICK_MAX_RELS 64
/* Pairs a backend keeps pending between two merges (a power of 2). */
#define TSM_BACKEND_PAIRS 64
/* ... of which at most this many are used, to keep probing short. */
#define TSM_BACKEND_PAIRS_FILL 48
/* Share of the pair table evicted when it is full, as pg_stat_statements. */
#define TSM_EVICT_PERCENT 5
#define TSM_USAGE_DECAY 0.99

/* ---- shared state ------------------------------------------------------ */

typedef struct TsmPairKey
{
	Oid			dbid;
	Oid			rel_a;			/* rel_a < rel_b */
	Oid			rel_b;
} TsmPairKey;

typedef struct TsmPairCounters
{
	int64		executions;		/* executions that read both */
	int64		blocks_a;		/* blocks of rel_a accessed in them */
	int64		blocks_b;
	int64		blocks_read_a;	/* ... of which from outside shared buffers */
	int64		blocks_read_b;
	int64		concurrent_ticks;	/* samples with both read by different
									 * sessions */
	TimestampTz first_seen;
	TimestampTz last_seen;
	double		usage;			/* for eviction */
} TsmPairCounters;

typedef struct TsmPairEntry
{
	TsmPairKey	key;			/* hash key: must be first */
	slock_t		mutex;			/* protects counters */
	TsmPairCounters counters;
} TsmPairEntry;

typedef struct TsmCoaccessShared
{
	LWLock	   *lock;
	int64		evictions;		/* pairs evicted since reset */
	TimestampTz reset_at;
} TsmCoaccessShared;

/* A pair observed by a backend and not merged yet. */
typedef struct TsmPendingPair
{
	TsmPairKey	key;			/* dbid InvalidOid: a free entry */
	int64		executions;
	int64		blocks_a;
	int64		blocks_b;
	int64		blocks_read_a;
	int64		blocks_read_b;
	TimestampTz first_seen;
	TimestampTz last_seen;
} TsmPendingPair;

/* One backend's slot. */
typedef struct TsmBackendSlot
{
	/* what it is reading now; written only by the backend, no lock */
	volatile uint32 changecount;	/* odd while being written */
	Oid			dbid;
	int			session_pid;	/* the leader's pid for a parallel worker */
	int			nrels;
	Oid			relids[TSM_PUBLISHED_RELS];

	/* its pairs since the last merge, under mutex */
	slock_t		mutex;
	int			npending;
	TsmPendingPair pending[TSM_BACKEND_PAIRS];
} TsmBackendSlot;

static TsmCoaccessShared *tsm_coaccess = NULL;
static HTAB *tsm_pairs = NULL;
static TsmBackendSlot *tsm_backends = NULL;

/* ---- backend-local state ----------------------------------------------- */

typedef struct TsmExecRel
{
	Oid			relid;
	bool		own;			/* scanned by this execution's own plan */
	Relation	rel;			/* own: open until after our ExecutorEnd */
	int64		fetched_start;	/* own: pgstat counters at ExecutorStart */
	int64		hit_start;
	int64		fetched;		/* blocks accessed during the execution */
	int64		hit;
} TsmExecRel;

typedef struct TsmExecution
{
	QueryDesc  *query;			/* NULL: the pool entry is free */
	int			xact_level;		/* subtransaction that started it */
	int			nrels;
	TsmExecRel	rels[TSM_EXEC_MAX_RELS];
} TsmExecution;

/*
 * Executions between ExecutorStart and ExecutorEnd, in a pool of this
 * backend's static memory rather than in the queries' memory: an entry
 * left behind by an execution that never reached ExecutorEnd can hold
 * stale numbers, never a pointer to freed memory (its Relation pointers
 * are only used by its own ExecutorEnd, which never comes).  Entries are
 * freed at ExecutorEnd, at (sub)transaction abort and at transaction end.
 */
static TsmExecution tracked[TSM_MAX_TRACKED];
static int	in_use[TSM_MAX_TRACKED];	/* indexes of the entries in use */
static int	ntracked = 0;
/* The execution whose ExecutorRun/Finish is on the stack now. */
static TsmExecution *running = NULL;
static bool published = false;
static bool callbacks_registered = false;

static ExecutorStart_hook_type prev_ExecutorStart = NULL;
static ExecutorRun_hook_type prev_ExecutorRun = NULL;
static ExecutorFinish_hook_type prev_ExecutorFinish = NULL;
static ExecutorEnd_hook_type prev_ExecutorEnd = NULL;

/* ---- the pair table ---------------------------------------------------- */

static int
pair_usage_cmp(const void *a, const void *b)
{
	double		ua = (*(TsmPairEntry *const *) a)->counters.usage;
	double		ub = (*(TsmPairEntry *const *) b)->counters.usage;

	return (ua > ub) - (ua < ub);
}

/*
 * Evict the least-used TSM_EVICT_PERCENT of the pairs (at least one) and
 * decay the usage of the others.  Caller holds the coaccess lock exclusively.
 */
static void
evict_pairs(void)
{
	HASH_SEQ_STATUS seq;
	TsmPairEntry **entries;
	TsmPairEntry *entry;
	long		n = 0;
	long		victims;

	entries = palloc(hash_get_num_entries(tsm_pairs) * sizeof(TsmPairEntry *));
	hash_seq_init(&seq, tsm_pairs);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		entry->counters.usage *= TSM_USAGE_DECAY;
		entries[n++] = entry;
	}
	qsort(entries, n, sizeof(TsmPairEntry *), pair_usage_cmp);
	victims = Min(n, Max(1, n * TSM_EVICT_PERCENT / 100));
	for (long i = 0; i < victims; i++)
		hash_search(tsm_pairs, &entries[i]->key, HASH_REMOVE, NULL);
	tsm_coaccess->evictions += victims;
	pfree(entries);
}

/* Observations of a pair, to add to the pair table. */
typedef struct TsmPairUpdate
{
	TsmPairKey	key;
	int64		executions;
	int64		blocks_a;
	int64		blocks_b;
	int64		blocks_read_a;
	int64		blocks_read_b;
	int64		ticks;
	TimestampTz first_seen;
	TimestampTz last_seen;
} TsmPairUpdate;

static void
apply_update(TsmPairEntry *entry, const TsmPairUpdate *u)
{
	SpinLockAcquire(&entry->mutex);
	entry->counters.executions += u->executions;
	entry->counters.blocks_a += u->blocks_a;
	entry->counters.blocks_b += u->blocks_b;
	entry->counters.blocks_read_a += u->blocks_read_a;
	entry->counters.blocks_read_b += u->blocks_read_b;
	entry->counters.concurrent_ticks += u->ticks;
	entry->counters.usage += Max(1, u->executions + u->ticks);
	entry->counters.first_seen = Min(entry->counters.first_seen, u->first_seen);
	entry->counters.last_seen = Max(entry->counters.last_seen, u->last_seen);
	SpinLockRelease(&entry->mutex);
}

/*
 * Add observations to the pair table, creating pairs as needed (evicting
 * when full).  The caller holds the coaccess lock exclusively.
 */
static void
apply_pairs_locked(TsmPairUpdate *updates, int n)
{
	for (int i = 0; i < n; i++)
	{
		TsmPairEntry *entry = hash_search(tsm_pairs, &updates[i].key, HASH_FIND, NULL);
		bool		found;

		if (entry == NULL)
		{
			if (hash_get_num_entries(tsm_pairs) >= tsm_coaccess_max_pairs)
				evict_pairs();
			entry = hash_search(tsm_pairs, &updates[i].key, HASH_ENTER_NULL, &found);
			if (entry == NULL)
				continue;		/* cannot happen: we just made room */
			if (!found)
			{
				SpinLockInit(&entry->mutex);
				memset(&entry->counters, 0, sizeof(TsmPairCounters));
				entry->counters.first_seen = updates[i].first_seen;
			}
		}
		apply_update(entry, &updates[i]);
	}
}

/*
 * Add observations to the pair table, creating pairs as needed (evicting
 * when full).  Takes the coaccess lock: shared for existing pairs, then
 * exclusively if some pair must be created.
 */
static void
record_pairs(TsmPairUpdate *updates, int n)
{
	bool	   *missing = palloc(n * sizeof(bool));
	bool		any_missing = false;

	LWLockAcquire(tsm_coaccess->lock, LW_SHARED);
	for (int i = 0; i < n; i++)
	{
		TsmPairEntry *entry = hash_search(tsm_pairs, &updates[i].key, HASH_FIND, NULL);

		missing[i] = (entry == NULL);
		if (entry)
			apply_update(entry, &updates[i]);
		else
			any_missing = true;
	}
	LWLockRelease(tsm_coaccess->lock);

	if (any_missing)
	{
		int			nmissing = 0;

		for (int i = 0; i < n; i++)
			if (missing[i])
				updates[nmissing++] = updates[i];
		LWLockAcquire(tsm_coaccess->lock, LW_EXCLUSIVE);
		apply_pairs_locked(updates, nmissing);
		LWLockRelease(tsm_coaccess->lock);
	}
	pfree(missing);
}

/* ---- per-query collection --------------------------------------------- */

static TsmExecRel *
find_rel(TsmExecution *exec, Oid relid)
{
	for (int i = 0; i < exec->nrels; i++)
		if (exec->rels[i].relid == relid)
			return &exec->rels[i];
	return NULL;
}

/* At ExecutorStart: note rel and its block counters. */
static void
visit_relation(TsmExecution *exec, Relation rel)
{
	TsmExecRel *r;
	Oid			relid;

	if (rel == NULL)
		return;
	relid = RelationGetRelid(rel);
	if (relid < FirstNormalObjectId ||
		rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP ||
		exec->nrels == TSM_EXEC_MAX_RELS || find_rel(exec, relid) != NULL)
		return;
	/* associates the relation with its pending statistics, as a read would */
	if (!pgstat_should_count_relation(rel))
		return;
	r = &exec->rels[exec->nrels++];
	r->relid = relid;
	r->own = true;
	r->rel = rel;
	r->fetched_start = TSM_TABSTAT_BLOCKS_FETCHED(rel->pgstat_info);
	r->hit_start = TSM_TABSTAT_BLOCKS_HIT(rel->pgstat_info);
	r->fetched = 0;
	r->hit = 0;
}

/*
 * At ExecutorEnd, before the executor closes them: the blocks each of the
 * plan's own relations had accessed since ExecutorStart.
 */
static void
measure_relations(TsmExecution *exec)
{
	for (int i = 0; i < exec->nrels; i++)
	{
		TsmExecRel *r = &exec->rels[i];
		PgStat_TableStatus *stats;

		if (!r->own)
			continue;
		stats = r->rel->pgstat_info;
		if (stats == NULL)
			continue;
		r->fetched = Max(0, TSM_TABSTAT_BLOCKS_FETCHED(stats) - r->fetched_start);
		r->hit = Min(r->fetched, Max(0, TSM_TABSTAT_BLOCKS_HIT(stats) - r->hit_start));
	}
}

/* planstate_tree_walker callback: the relations a plan node reads. */
static bool
relation_walker(PlanState *ps, void *context)
{
	TsmExecution *exec = (TsmExecution *) context;

	if (ps == NULL)
		return false;
	switch (nodeTag(ps))
	{
		case T_SeqScanState:
		case T_SampleScanState:
		case T_BitmapHeapScanState:
		case T_TidScanState:
		case T_TidRangeScanState:
		case T_ForeignScanState:
		case T_CustomScanState:
			visit_relation(exec, ((ScanState *) ps)->ss_currentRelation);
			break;
		case T_IndexScanState:
			visit_relation(exec, ((ScanState *) ps)->ss_currentRelation);
			visit_relation(exec, ((IndexScanState *) ps)->iss_RelationDesc);
			break;
		case T_IndexOnlyScanState:
			visit_relation(exec, ((ScanState *) ps)->ss_currentRelation);
			visit_relation(exec, ((IndexOnlyScanState *) ps)->ioss_RelationDesc);
			break;
		case T_BitmapIndexScanState:
			visit_relation(exec, ((BitmapIndexScanState *) ps)->biss_RelationDesc);
			break;
		case T_ModifyTableState:
			{
				ModifyTableState *mt = (ModifyTableState *) ps;

				for (int i = 0; i < mt->mt_nrels; i++)
					visit_relation(exec, mt->resultRelInfo[i].ri_RelationDesc);
			}
			break;
		default:
			break;
	}
	return planstate_tree_walker(ps, relation_walker, context);
}

/* The pool entry of this query, or NULL. */
static TsmExecution *
find_tracked(QueryDesc *query)
{
	for (int i = ntracked - 1; i >= 0; i--)
		if (tracked[in_use[i]].query == query)
			return &tracked[in_use[i]];
	return NULL;
}

static void
untrack(TsmExecution *exec)
{
	int			index = exec - tracked;

	exec->query = NULL;
	for (int i = 0; i < ntracked; i++)
		if (in_use[i] == index)
		{
			in_use[i] = in_use[--ntracked];
			return;
		}
}

static TsmExecution *
new_tracked(QueryDesc *query)
{
	TsmExecution *stale = find_tracked(query);

	/* a query starts once: an entry with its address was left behind */
	if (stale != NULL)
		untrack(stale);
	for (int i = 0; i < TSM_MAX_TRACKED; i++)
		if (tracked[i].query == NULL)
		{
			tracked[i].query = query;
			in_use[ntracked++] = i;
			return &tracked[i];
		}
	return NULL;				/* nested too deep: not followed */
}

static void
untrack_all(void)
{
	while (ntracked > 0)
		untrack(&tracked[in_use[ntracked - 1]]);
}

/* ---- the reading slot -------------------------------------------------- */

static TsmBackendSlot *
my_backend_slot(void)
{
	int			slot = tsm_backend_slot();

	if (tsm_backends == NULL || slot < 0 || slot >= tsm_backend_slots())
		return NULL;
	return &tsm_backends[slot];
}

/* Publish (or, with exec NULL, clear) the relations this session reads. */
static void
publish_reading(TsmExecution *exec, bool append)
{
	TsmBackendSlot *slot = my_backend_slot();

	if (slot == NULL)
		return;
	slot->changecount++;
	pg_write_barrier();
	if (exec == NULL)
		slot->nrels = 0;
	else
	{
		if (!append)
		{
			slot->nrels = 0;
			slot->dbid = MyDatabaseId;
			slot->session_pid = (MyProc && MyProc->lockGroupLeader) ?
				MyProc->lockGroupLeader->pid : MyProcPid;
		}
		for (int i = 0; i < exec->nrels && slot->nrels < TSM_PUBLISHED_RELS; i++)
		{
			bool		present = false;

			for (int j = 0; j < slot->nrels && !present; j++)
				present = (slot->relids[j] == exec->rels[i].relid);
			if (!present)
				slot->relids[slot->nrels++] = exec->rels[i].relid;
		}
	}
	pg_write_barrier();
	slot->changecount++;
}

/* ---- the end of an execution ------------------------------------------ */

/* Add a finished inner execution's blocks to the one enclosing it. */
static void
merge_into(TsmExecution *outer, TsmExecution *inner)
{
	for (int i = 0; i < inner->nrels; i++)
	{
		TsmExecRel *src = &inner->rels[i];
		TsmExecRel *dst;

		if (src->fetched == 0)
			continue;
		dst = find_rel(outer, src->relid);
		if (dst != NULL && dst->own)
			continue;			/* the outer's own counters include these */
		if (dst == NULL)
		{
			if (outer->nrels == TSM_EXEC_MAX_RELS)
				continue;
			dst = &outer->rels[outer->nrels++];
			memset(dst, 0, sizeof(*dst));
			dst->relid = src->relid;
			dst->own = false;	/* read by an inner execution only */
		}
		dst->fetched += src->fetched;
		dst->hit += src->hit;
	}
}

static int
exec_rel_cmp(const void *a, const void *b)
{
	Oid			ra = ((const TsmExecRel *) a)->relid;
	Oid			rb = ((const TsmExecRel *) b)->relid;

	return (ra > rb) - (ra < rb);
}

static uint32
pair_hash(const TsmPairKey *key)
{
	return hash_combine(murmurhash32(key->rel_a),
						hash_combine(murmurhash32(key->rel_b), key->dbid));
}

/*
 * Add one execution's pair to this backend's pending pairs; false if the
 * pending table is full.  Caller holds the slot's spinlock.
 */
static bool
add_pending(TsmBackendSlot *slot, const TsmPairUpdate *u)
{
	uint32		i = pair_hash(&u->key) & (TSM_BACKEND_PAIRS - 1);

	for (;;)
	{
		TsmPendingPair *p = &slot->pending[i];

		if (!OidIsValid(p->key.dbid))
		{
			if (slot->npending >= TSM_BACKEND_PAIRS_FILL)
				return false;
			slot->npending++;
			memset(p, 0, sizeof(*p));
			p->key = u->key;
			p->first_seen = u->first_seen;
		}
		if (memcmp(&p->key, &u->key, sizeof(TsmPairKey)) == 0)
		{
			p->executions += u->executions;
			p->blocks_a += u->blocks_a;
			p->blocks_b += u->blocks_b;
			p->blocks_read_a += u->blocks_read_a;
			p->blocks_read_b += u->blocks_read_b;
			p->last_seen = u->last_seen;
			return true;
		}
		i = (i + 1) & (TSM_BACKEND_PAIRS - 1);
	}
}

/*
 * Record every pair of relations the execution accessed blocks of: in this
 * backend's pending pairs, or in the pair table for those that do not fit.
 */
static void
record_execution(TsmExecution *exec)
{
	TsmExecRel	read[TSM_EXEC_MAX_RELS];
	int			nread = 0;
	TsmPairUpdate few[6];		/* up to 4 relations without palloc */
	TsmPairUpdate *updates;
	int			n = 0;
	int			nspilled = 0;
	bool		counts_execution = !IsParallelWorker();
	TimestampTz when = GetCurrentStatementStartTimestamp();
	TsmBackendSlot *slot = my_backend_slot();

	for (int i = 0; i < exec->nrels; i++)
		if (exec->rels[i].fetched > 0)
			read[nread++] = exec->rels[i];
	if (nread < 2 || tsm_coaccess == NULL)
		return;
	if (nread > 2)
		qsort(read, nread, sizeof(TsmExecRel), exec_rel_cmp);
	else if (read[0].relid > read[1].relid)
	{
		TsmExecRel	swap = read[0];

		read[0] = read[1];
		read[1] = swap;
	}
	updates = nread <= 4 ? few :
		palloc(sizeof(TsmPairUpdate) * nread * (nread - 1) / 2);
	for (int i = 0; i < nread; i++)
		for (int j = i + 1; j < nread; j++)
		{
			TsmPairUpdate *u = &updates[n++];

			u->key.dbid = MyDatabaseId;
			u->key.rel_a = read[i].relid;
			u->key.rel_b = read[j].relid;
			u->executions = counts_execution ? 1 : 0;
			u->blocks_a = read[i].fetched;
			u->blocks_b = read[j].fetched;
			u->blocks_read_a = read[i].fetched - read[i].hit;
			u->blocks_read_b = read[j].fetched - read[j].hit;
			u->ticks = 0;
			u->first_seen = u->last_seen = when;
		}

	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		for (int i = 0; i < n; i++)
			if (!add_pending(slot, &updates[i]))
				updates[nspilled++] = updates[i];
		SpinLockRelease(&slot->mutex);
	}
	else
		nspilled = n;
	if (nspilled > 0)
		record_pairs(updates, nspilled);
	if (updates != few)
		pfree(updates);
}

/*
 * tsm_coaccess_merge_pending
 *		Move every backend's pending pairs into the pair table.
 *
 * Holds the coaccess lock exclusively from before it empties the first
 * slot until every copied pair is in the table, and takes each slot's
 * spinlock just to copy and clear its pending pairs: so a reader, which
 * merges and then takes the lock to read, never sees a slot already
 * emptied by another merge whose pairs are not in the table yet.  Called
 * by the sampler at each tick and by every reader of the pair table.
 */
void
tsm_coaccess_merge_pending(void)
{
	int			nslots = tsm_backend_slots();
	TsmPairUpdate *updates = NULL;
	int			n = 0;
	bool		any = false;

	for (int s = 0; s < nslots && !any; s++)
		any = tsm_backends[s].npending > 0;	/* unlocked peek */
	if (!any)
		return;					/* a merge under way holds the lock */
	LWLockAcquire(tsm_coaccess->lock, LW_EXCLUSIVE);
	for (int s = 0; s < nslots; s++)
	{
		TsmBackendSlot *slot = &tsm_backends[s];

		if (slot->npending == 0)	/* unlocked peek: next merge catches up */
			continue;
		if (updates == NULL)
			updates = palloc(sizeof(TsmPairUpdate) * TSM_BACKEND_PAIRS);
		SpinLockAcquire(&slot->mutex);
		for (int i = 0; i < TSM_BACKEND_PAIRS; i++)
		{
			TsmPendingPair *p = &slot->pending[i];

			if (!OidIsValid(p->key.dbid))
				continue;
			updates[n].key = p->key;
			updates[n].executions = p->executions;
			updates[n].blocks_a = p->blocks_a;
			updates[n].blocks_b = p->blocks_b;
			updates[n].blocks_read_a = p->blocks_read_a;
			updates[n].blocks_read_b = p->blocks_read_b;
			updates[n].ticks = 0;
			updates[n].first_seen = p->first_seen;
			updates[n].last_seen = p->last_seen;
			n++;
			p->key.dbid = InvalidOid;
		}
		slot->npending = 0;
		SpinLockRelease(&slot->mutex);
		apply_pairs_locked(updates, n);
		n = 0;
	}
	LWLockRelease(tsm_coaccess->lock);
	if (updates != NULL)
		pfree(updates);
}

/* Forget every backend's pending pairs (tsmove.coaccess_reset). */
static void
discard_pending(void)
{
	for (int s = 0; s < tsm_backend_slots(); s++)
	{
		TsmBackendSlot *slot = &tsm_backends[s];

		SpinLockAcquire(&slot->mutex);
		for (int i = 0; i < TSM_BACKEND_PAIRS; i++)
			slot->pending[i].key.dbid = InvalidOid;
		slot->npending = 0;
		SpinLockRelease(&slot->mutex);
	}
}

/* ---- hooks ------------------------------------------------------------- */

/*
 * At transaction end every execution has ended (commit, prepare) or been
 * thrown away (abort): forget them all, and what this backend published.
 */
static void
tsm_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
	{
		untrack_all();
		if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
			running = NULL;
		if (published)
		{
			publish_reading(NULL, false);
			published = false;
		}
	}
}

/* Executions started in an aborted subtransaction never reach their end. */
static void
tsm_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					 SubTransactionId parentSubid, void *arg)
{
	int			level;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	level = GetCurrentTransactionNestLevel();
	for (int i = ntracked - 1; i >= 0; i--)
		if (tracked[in_use[i]].xact_level >= level)
			untrack(&tracked[in_use[i]]);
}

/*
 * ExecutorStart hook: after the standard start, note the relations the plan
 * scans and their block counters in a pool entry.  No lock; associating a
 * relation with its pending statistics may allocate them, as a read would.
 */
static void
tsm_ExecutorStart(QueryDesc *queryDesc, int eflags)
{
	TsmExecution *exec;

	if (prev_ExecutorStart)
		prev_ExecutorStart(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);

	if (!tsm_track_coaccess || tsm_coaccess == NULL ||
		(eflags & EXEC_FLAG_EXPLAIN_ONLY) || !OidIsValid(MyDatabaseId))
		return;
	if (!callbacks_registered)
	{
		RegisterXactCallback(tsm_xact_callback, NULL);
		RegisterSubXactCallback(tsm_subxact_callback, NULL);
		callbacks_registered = true;
	}
	exec = new_tracked(queryDesc);
	if (exec == NULL)
		return;
	exec->xact_level = GetCurrentTransactionNestLevel();
	exec->nrels = 0;
	(void) relation_walker(queryDesc->planstate, exec);
}

/*
 * ExecutorRun hook: while a followed execution runs, it is the one inner
 * executions merge into, and (at top level) what this session publishes as
 * being read.  Both are restored on the way out, error or not.
 */
static void
tsm_ExecutorRun(TSM_EXECUTOR_RUN_PARAMS)
{
	TsmExecution *saved = running;
	TsmExecution *exec = find_tracked(queryDesc);
	volatile bool publish_here = false;

	if (exec == NULL)
	{
		/* not followed (tracking off): nothing to restore on error */
		if (prev_ExecutorRun)
			prev_ExecutorRun(TSM_EXECUTOR_RUN_ARGS);
		else
			standard_ExecutorRun(TSM_EXECUTOR_RUN_ARGS);
		return;
	}
	running = exec;
	if (!published)
	{
		publish_reading(exec, false);
		published = publish_here = true;
	}
	else if (exec->nrels > 0)
		publish_reading(exec, true);
	PG_TRY();
	{
		if (prev_ExecutorRun)
			prev_ExecutorRun(TSM_EXECUTOR_RUN_ARGS);
		else
			standard_ExecutorRun(TSM_EXECUTOR_RUN_ARGS);
	}
	PG_FINALLY();
	{
		running = saved;
		if (publish_here)
		{
			publish_reading(NULL, false);
			published = false;
		}
	}
	PG_END_TRY();
}

/* ExecutorFinish hook: AFTER triggers (foreign-key checks) merge into it. */
static void
tsm_ExecutorFinish(QueryDesc *queryDesc)
{
	TsmExecution *saved = running;
	TsmExecution *exec = find_tracked(queryDesc);

	if (exec == NULL)
	{
		if (prev_ExecutorFinish)
			prev_ExecutorFinish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
		return;
	}
	running = exec;
	PG_TRY();
	{
		if (prev_ExecutorFinish)
			prev_ExecutorFinish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_FINALLY();
	{
		running = saved;
	}
	PG_END_TRY();
}

/*
 * ExecutorEnd hook: before the executor closes the relations, measure the
 * blocks each one had accessed; add them to the enclosing execution if
 * there is one, else record the pairs (backend slot spinlock, or the
 * coaccess lock for pairs that do not fit).
 */
static void
tsm_ExecutorEnd(QueryDesc *queryDesc)
{
	TsmExecution *exec = find_tracked(queryDesc);

	if (exec != NULL)
	{
		measure_relations(exec);
		if (running != NULL && running != exec)
			merge_into(running, exec);
		else
			record_execution(exec);
		untrack(exec);
	}

	if (prev_ExecutorEnd)
		prev_ExecutorEnd(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
}

/*
 * tsm_coaccess_install_hooks
 *		Chain the executor hooks; called from _PG_init when preloading.
 */
void
tsm_coaccess_install_hooks(void)
{
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = tsm_ExecutorStart;
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = tsm_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = tsm_ExecutorFinish;
	prev_ExecutorEnd = ExecutorEnd_hook;
	ExecutorEnd_hook = tsm_ExecutorEnd;
}

/* ---- concurrency ticks (the sampler) ----------------------------------- */

typedef struct TsmReader
{
	Oid			dbid;
	int			session_pid;
	int			nrels;
	Oid			relids[TSM_PUBLISHED_RELS];
} TsmReader;

static int
reader_db_cmp(const void *a, const void *b)
{
	Oid			da = ((const TsmReader *) a)->dbid;
	Oid			db = ((const TsmReader *) b)->dbid;

	return (da > db) - (da < db);
}

/* Copy a reading slot; false if it is empty or kept changing. */
static bool
copy_reading_slot(volatile TsmBackendSlot *slot, TsmReader *out)
{
	for (int attempt = 0; attempt < 8; attempt++)
	{
		uint32		before = slot->changecount;
		uint32		after;

		pg_read_barrier();
		out->dbid = slot->dbid;
		out->session_pid = slot->session_pid;
		out->nrels = Min(slot->nrels, TSM_PUBLISHED_RELS);
		for (int i = 0; i < out->nrels; i++)
			out->relids[i] = slot->relids[i];
		pg_read_barrier();
		after = slot->changecount;
		if (before == after && (before & 1) == 0)
			return out->nrels > 0;
	}
	return false;
}

/* Concurrent ticks for the pairs of one database's readers. */
static void
tick_database(TsmReader *readers, int n, TimestampTz now)
{
	Oid			relids[TSM_TICK_MAX_RELS];
	int			first_session[TSM_TICK_MAX_RELS];
	bool		several_sessions[TSM_TICK_MAX_RELS];
	int			nrels = 0;
	TsmPairUpdate *updates;
	int			nupdates = 0;

	for (int r = 0; r < n; r++)
		for (int i = 0; i < readers[r].nrels; i++)
		{
			int			k;

			for (k = 0; k < nrels; k++)
				if (relids[k] == readers[r].relids[i])
					break;
			if (k == nrels)
			{
				if (nrels == TSM_TICK_MAX_RELS)
					continue;
				relids[nrels] = readers[r].relids[i];
				first_session[nrels] = readers[r].session_pid;
				several_sessions[nrels++] = false;
			}
			else if (first_session[k] != readers[r].session_pid)
				several_sessions[k] = true;
		}
	if (nrels < 2)
		return;

	updates = palloc(sizeof(TsmPairUpdate) * nrels * (nrels - 1) / 2);
	for (int i = 0; i < nrels; i++)
		for (int j = i + 1; j < nrels; j++)
		{
			TsmPairUpdate *u;

			/* one session reading both is per-query co-access, counted there */
			if (!several_sessions[i] && !several_sessions[j] &&
				first_session[i] == first_session[j])
				continue;
			u = &updates[nupdates++];
			memset(u, 0, sizeof(*u));
			u->key.dbid = readers[0].dbid;
			u->key.rel_a = Min(relids[i], relids[j]);
			u->key.rel_b = Max(relids[i], relids[j]);
			u->ticks = 1;
			u->first_seen = u->last_seen = now;
		}
	if (nupdates > 0)
		record_pairs(updates, nupdates);
	pfree(updates);
}

/*
 * tsm_coaccess_sample_concurrency
 *		One concurrency tick: which relations are being read right now by
 *		which sessions; called by the sampler.
 *
 * Reads the slots without a lock (change-counter protocol), then records
 * pairs under the coaccess lock.
 */
void
tsm_coaccess_sample_concurrency(TimestampTz now)
{
	int			nslots = tsm_backend_slots();
	TsmReader  *readers = palloc(sizeof(TsmReader) * nslots);
	int			n = 0;
	int			start = 0;

	tsm_coaccess_merge_pending();
	for (int i = 0; i < nslots; i++)
		if (copy_reading_slot(&tsm_backends[i], &readers[n]))
			n++;
	if (n < 2)
	{
		pfree(readers);
		return;
	}
	qsort(readers, n, sizeof(TsmReader), reader_db_cmp);
	for (int i = 1; i <= n; i++)
		if (i == n || readers[i].dbid != readers[start].dbid)
		{
			if (i - start >= 2)
				tick_database(&readers[start], i - start, now);
			start = i;
		}
	pfree(readers);
}

/* ---- shared memory, persistence, status ------------------------------- */

Size
tsm_coaccess_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(TsmCoaccessShared));

	size = add_size(size, hash_estimate_size(tsm_coaccess_max_pairs, sizeof(TsmPairEntry)));
	size = add_size(size, mul_size(tsm_backend_slots(), sizeof(TsmBackendSlot)));
	return size;
}

void
tsm_coaccess_shmem_init(void)
{
	bool		found;
	HASHCTL		info;

	tsm_coaccess = ShmemInitStruct("pg_tsmove coaccess", sizeof(TsmCoaccessShared), &found);
	if (!found)
	{
		tsm_coaccess->lock = tsm_monitor_lock(TSM_LOCK_COACCESS);
		tsm_coaccess->evictions = 0;
		tsm_coaccess->reset_at = GetCurrentTimestamp();
	}
	tsm_backends = ShmemInitStruct("pg_tsmove backend slots",
								   mul_size(tsm_backend_slots(), sizeof(TsmBackendSlot)),
								   &found);
	if (!found)
	{
		memset(tsm_backends, 0, mul_size(tsm_backend_slots(), sizeof(TsmBackendSlot)));
		for (int i = 0; i < tsm_backend_slots(); i++)
			SpinLockInit(&tsm_backends[i].mutex);
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(TsmPairKey);
	info.entrysize = sizeof(TsmPairEntry);
	tsm_pairs = tsm_shmem_init_hash("pg_tsmove coaccess pairs", tsm_coaccess_max_pairs,
									&info, HASH_ELEM | HASH_BLOBS);
}

/* Pairs held, pairs evicted, and the last reset; takes the lock shared. */
void
tsm_coaccess_status(int64 *pairs, int64 *evictions, TimestampTz *reset_at)
{
	tsm_coaccess_merge_pending();
	LWLockAcquire(tsm_coaccess->lock, LW_SHARED);
	*pairs = hash_get_num_entries(tsm_pairs);
	*evictions = tsm_coaccess->evictions;
	*reset_at = tsm_coaccess->reset_at;
	LWLockRelease(tsm_coaccess->lock);
}

/*
 * Write the pair table to the monitoring file (postmaster, at shutdown: no
 * other process is left, so no lock).  Returns false on a write error.
 */
bool
tsm_coaccess_write(FILE *file)
{
	HASH_SEQ_STATUS seq;
	TsmPairEntry *entry;
	int64		n = hash_get_num_entries(tsm_pairs);

	if (fwrite(&tsm_coaccess->evictions, sizeof(int64), 1, file) != 1 ||
		fwrite(&tsm_coaccess->reset_at, sizeof(TimestampTz), 1, file) != 1 ||
		fwrite(&n, sizeof(int64), 1, file) != 1)
		return false;
	hash_seq_init(&seq, tsm_pairs);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (fwrite(&entry->key, sizeof(TsmPairKey), 1, file) != 1 ||
			fwrite(&entry->counters, sizeof(TsmPairCounters), 1, file) != 1)
		{
			hash_seq_term(&seq);
			return false;
		}
	}
	return true;
}

/* Read what tsm_coaccess_write wrote (postmaster, at start-up). */
bool
tsm_coaccess_read(FILE *file)
{
	int64		n;

	if (fread(&tsm_coaccess->evictions, sizeof(int64), 1, file) != 1 ||
		fread(&tsm_coaccess->reset_at, sizeof(TimestampTz), 1, file) != 1 ||
		fread(&n, sizeof(int64), 1, file) != 1 || n < 0)
		return false;
	for (int64 i = 0; i < n; i++)
	{
		TsmPairKey	key;
		TsmPairCounters counters;
		TsmPairEntry *entry;
		bool		found;

		if (fread(&key, sizeof(key), 1, file) != 1 ||
			fread(&counters, sizeof(counters), 1, file) != 1)
			return false;
		if (hash_get_num_entries(tsm_pairs) >= tsm_coaccess_max_pairs)
			continue;			/* the table was made smaller */
		entry = hash_search(tsm_pairs, &key, HASH_ENTER_NULL, &found);
		if (entry == NULL)
			continue;
		SpinLockInit(&entry->mutex);
		entry->counters = counters;
	}
	return true;
}

/* ---- SQL functions ----------------------------------------------------- */

#define TSM_PAIR_COLS 11

/*
 * tsmove.coaccess_pairs() RETURNS SETOF record
 *		Every pair of the table, all databases: (dbid, rel_a, rel_b,
 *		executions, blocks_a, blocks_b, blocks_read_a, blocks_read_b,
 *		concurrent_ticks, first_seen, last_seen).  Thin data behind the
 *		tsmove.coaccess view.
 *
 * Takes the coaccess lock shared, and each pair's spinlock while copying.
 * Granted to pg_monitor.
 */
Datum
tsm_coaccess_pairs(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HASH_SEQ_STATUS seq;
	TsmPairEntry *entry;

	tsm_monitor_require_preload();
	InitMaterializedSRF(fcinfo, 0);
	tsm_coaccess_merge_pending();

	LWLockAcquire(tsm_coaccess->lock, LW_SHARED);
	hash_seq_init(&seq, tsm_pairs);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		Datum		values[TSM_PAIR_COLS];
		bool		nulls[TSM_PAIR_COLS] = {0};
		TsmPairCounters c;
		int			i = 0;

		SpinLockAcquire(&entry->mutex);
		c = entry->counters;
		SpinLockRelease(&entry->mutex);

		values[i++] = ObjectIdGetDatum(entry->key.dbid);
		values[i++] = ObjectIdGetDatum(entry->key.rel_a);
		values[i++] = ObjectIdGetDatum(entry->key.rel_b);
		values[i++] = Int64GetDatum(c.executions);
		values[i++] = Int64GetDatum(c.blocks_a);
		values[i++] = Int64GetDatum(c.blocks_b);
		values[i++] = Int64GetDatum(c.blocks_read_a);
		values[i++] = Int64GetDatum(c.blocks_read_b);
		values[i++] = Int64GetDatum(c.concurrent_ticks);
		values[i++] = TimestampTzGetDatum(c.first_seen);
		values[i++] = TimestampTzGetDatum(c.last_seen);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(tsm_coaccess->lock);
	return (Datum) 0;
}

/*
 * tsmove.coaccess_reset() RETURNS timestamptz
 *		Forget every pair (all databases) and the eviction count; returns
 *		the reset time.
 *
 * Takes the coaccess lock exclusively.  Revoked from PUBLIC.
 */
Datum
tsm_coaccess_reset(PG_FUNCTION_ARGS)
{
	HASH_SEQ_STATUS seq;
	TsmPairEntry *entry;
	TimestampTz now = GetCurrentTimestamp();

	tsm_monitor_require_preload();
	discard_pending();
	LWLockAcquire(tsm_coaccess->lock, LW_EXCLUSIVE);
	hash_seq_init(&seq, tsm_pairs);
	while ((entry = hash_seq_search(&seq)) != NULL)
		hash_search(tsm_pairs, &entry->key, HASH_REMOVE, NULL);
	tsm_coaccess->evictions = 0;
	tsm_coaccess->reset_at = now;
	LWLockRelease(tsm_coaccess->lock);
	PG_RETURN_TIMESTAMPTZ(now);
}
