/*-------------------------------------------------------------------------
 *
 * recent_io.c
 *	  What each relation read and changed lately, so that the advice can
 *	  take a relation's share of its tablespace over the same horizon as
 *	  the devices' load, not since the statistics were last reset.
 *
 * The cumulative statistics say what a relation did since their reset; a
 * table read heavily yesterday would be blamed for today's load of its
 * neighbour.  Keeping each relation's counters per history row would cost
 * a row per relation per interval, so each relation keeps, per quantity,
 * sums decayed exponentially with a few time constants (a reading of age a
 * weighs exp(-a / tau)): TSM_RECENT_SCALES of them, 5 s to 10.8 h, each six
 * times the last.  Each tablespace keeps the same sums of every database's
 * relations, fed with the same deltas where the relation map placed the
 * relation at the time (as the history counts them): a dropped relation's
 * reads stay there until they fade, a moved one's stay where they were
 * done, and a relation's own sums start again from zero when it is seen
 * in another tablespace (its share there counts its reads there only).  tsmove.relation_recent_io(horizon) gives this database's
 * relations' sums at the time constant nearest half the horizon (the mean
 * age of a reading within a window of that length),
 * tsmove.tablespace_recent_io(horizon) the tablespaces', and both for how
 * long the sampler has fed them (since start-up: they are not kept across
 * a restart, and the advice does not use them until that is one time
 * constant).  The advice divides a relation's by its tablespace's, so the
 * decay cancels out of a steady load, and a quiet database's relation is
 * not given the share of a busy database's reads of the same tablespace.
 * Three quantities: blocks read from outside shared buffers, rows changed
 * (inserted, updated, deleted), and rows that changed every index
 * (inserted, or updated not HOT: an index's writes).  A decayed sum never
 * reaches 0, and a share of writes divides two of them, where the decay
 * cancels out: a relation that wrote an hour ago and nothing since would
 * keep its whole share of a device nobody else writes.  So the sums also
 * say when rows were last changed, and the advice counts rows changed only
 * where that is within its horizon.  Reads are cut at the horizon per
 * tablespace, by the history's share of the device; within a tablespace,
 * as for rows changed since the last were, older ones weigh less, not
 * nothing: an exponential window, not an exact one.
 *
 * The sampler feeds them (tablespace_io.c, each relation's deltas since its
 * previous sample); the decay is applied when a sum is next fed or read.
 * A relation whose statistics are dropped is forgotten with them; when the
 * table is full, the least active entries make room.  The table is sized
 * as the relation map; relations that do not fit are not followed (their
 * tablespace counts them all the same; after a restart, when the sums are
 * empty, the advice falls back to the cumulative counters: the sums live
 * in shared memory only).  Tablespaces: those the sampler follows (at
 * most TSM_MAX_TABLESPACES); one it no longer lists (dropped) is
 * forgotten.  A feed adds up each tablespace's deltas in integers and
 * adds them to its sums once: a small relation's few blocks are not lost
 * below a large float4 sum's precision.
 *
 * Locking: the recent lock, exclusive while the sampler feeds a sample's
 * relations in one go, shared while tsmove.relation_recent_io() copies its
 * database's entries or tsmove.tablespace_recent_io() the tablespaces'.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "funcapi.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "monitor/monitor_internal.h"

PG_FUNCTION_INFO_V1(tsm_relation_recent_io);
PG_FUNCTION_INFO_V1(tsm_tablespace_recent_io);

#define TSM_RECENT_SCALES 6
/*
 * Columns of both functions' rows: oid, three sums, time constant,
 * followed, then relation_recent_io()'s tablespace, then last written.
 */
#define TSM_RECENT_COLS 8

/* The time constants, in seconds. */
static const double recent_tau_s[TSM_RECENT_SCALES] = {5, 30, 180, 1080, 6480, 38880};

typedef struct TsmRecentKey
{
	Oid			dbid;
	Oid			relid;
} TsmRecentKey;

/* Decayed sums, one per time constant. */
typedef struct TsmRecentSums
{
	TimestampTz updated;		/* when they were last decayed */
	TimestampTz last_written;	/* the last feed with rows changed, or 0 */
	float4		blocks_read[TSM_RECENT_SCALES];
	float4		rows_changed[TSM_RECENT_SCALES];
	float4		index_rows[TSM_RECENT_SCALES];
} TsmRecentSums;

typedef struct TsmRecentEntry
{
	TsmRecentKey key;
	Oid			spcoid;			/* where its sums were read and written */
	TsmRecentSums sums;
} TsmRecentEntry;

typedef struct TsmRecentTablespace
{
	Oid			spcoid;
	TsmRecentSums sums;
} TsmRecentTablespace;

typedef struct TsmRecentShared
{
	LWLock	   *lock;
	TimestampTz first_fed;		/* the sampler's first sample since start-up */
	int			ntablespaces;
	TsmRecentTablespace tablespaces[TSM_MAX_TABLESPACES];
} TsmRecentShared;

static TsmRecentShared *tsm_recent = NULL;
static HTAB *tsm_recent_hash = NULL;

Size
tsm_recent_shmem_size(void)
{
	return add_size(MAXALIGN(sizeof(TsmRecentShared)),
					hash_estimate_size(tsm_relation_map_size, sizeof(TsmRecentEntry)));
}

void
tsm_recent_shmem_init(void)
{
	bool		found;
	HASHCTL		info;

	tsm_recent = ShmemInitStruct("pg_tsmove recent io", sizeof(TsmRecentShared), &found);
	if (!found)
	{
		tsm_recent->lock = tsm_monitor_lock(TSM_LOCK_RECENT);
		tsm_recent->first_fed = 0;
		tsm_recent->ntablespaces = 0;
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(TsmRecentKey);
	info.entrysize = sizeof(TsmRecentEntry);
	tsm_recent_hash = tsm_shmem_init_hash("pg_tsmove recent io hash",
										  tsm_relation_map_size, &info, HASH_ELEM | HASH_BLOBS);
}

/* Zeroed sums, as of now. */
static void
sums_init(TsmRecentSums *sums, TimestampTz now)
{
	memset(sums, 0, sizeof(*sums));
	sums->updated = now;
}

/* Decay sums to now. */
static void
decay(TsmRecentSums *sums, TimestampTz now)
{
	double		age_s = (double) (now - sums->updated) / USECS_PER_SEC;

	if (age_s <= 0)
		return;
	for (int k = 0; k < TSM_RECENT_SCALES; k++)
	{
		double		f = exp(-age_s / recent_tau_s[k]);

		sums->blocks_read[k] *= f;
		sums->rows_changed[k] *= f;
		sums->index_rows[k] *= f;
	}
	sums->updated = now;
}

/* Decay sums to now and add deltas. */
static void
add_deltas(TsmRecentSums *sums, int64 blocks_read, int64 rows_changed, int64 index_rows,
		   TimestampTz now)
{
	decay(sums, now);
	if (rows_changed > 0 || index_rows > 0)
		sums->last_written = now;
	for (int k = 0; k < TSM_RECENT_SCALES; k++)
	{
		sums->blocks_read[k] += (float4) blocks_read;
		sums->rows_changed[k] += (float4) rows_changed;
		sums->index_rows[k] += (float4) index_rows;
	}
}

/* The sums' weight at the longest time constant (decayed beforehand). */
static double
weight(const TsmRecentSums *sums)
{
	int			last = TSM_RECENT_SCALES - 1;

	return (double) sums->blocks_read[last] + sums->rows_changed[last] + sums->index_rows[last];
}

/*
 * Make room when the table is full: forget the entries whose sums have
 * decayed below half a unit, then, if that freed less than a twentieth of
 * the table, those below ten times as much, and so on: the least active
 * make way for new relations.
 */
static void
forget_faded(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	TsmRecentEntry *e;
	long		goal = Max(hash_get_num_entries(tsm_recent_hash) / 20, 1);
	long		freed = 0;

	for (double below = 0.5; freed < goal && below < 1e12; below *= 10)
	{
		hash_seq_init(&seq, tsm_recent_hash);
		while ((e = hash_seq_search(&seq)) != NULL)
		{
			decay(&e->sums, now);
			if (weight(&e->sums) < below)
			{
				hash_search(tsm_recent_hash, &e->key, HASH_REMOVE, NULL);
				freed++;
			}
		}
	}
}

/*
 * tsm_recent_forget
 *		Drop the entries of relations whose statistics were dropped (the
 *		sampler, when they leave the shared statistics).
 */
void
tsm_recent_forget(const TsmRecentSample *gone, int n)
{
	if (n == 0)
		return;
	LWLockAcquire(tsm_recent->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		TsmRecentKey key;

		key.dbid = gone[i].dbid;
		key.relid = gone[i].relid;
		hash_search(tsm_recent_hash, &key, HASH_REMOVE, NULL);
	}
	LWLockRelease(tsm_recent->lock);
}

/* Whether the table holds its share of shared memory (relation_map_size). */
static bool
table_full(void)
{
	return hash_get_num_entries(tsm_recent_hash) >= tsm_relation_map_size;
}

/*
 * A feed's deltas added up per followed tablespace: blocks read, rows
 * changed and index rows, three to a tablespace, in followed's order.
 * Before the recent lock: nothing shared is read.
 */
static int64 *
tablespace_deltas(const TsmRecentSample *samples, int n, const Oid *followed,
				  int nfollowed)
{
	int64	   *deltas = palloc0(Max(nfollowed, 1) * 3 * sizeof(int64));

	for (int i = 0; i < n; i++)
		for (int j = 0; j < nfollowed; j++)
			if (followed[j] == samples[i].spcoid)
			{
				deltas[3 * j] += samples[i].blocks_read;
				deltas[3 * j + 1] += samples[i].rows_changed;
				deltas[3 * j + 2] += samples[i].index_rows;
				break;
			}
	return deltas;
}

/*
 * Add a feed's deltas per tablespace (tablespace_deltas) to the
 * tablespaces' sums; first forget those the sampler no longer follows.
 * The recent lock held exclusively.
 */
static void
feed_tablespaces(const int64 *deltas, TimestampTz now, const Oid *followed,
				 int nfollowed)
{
	int			kept = 0;

	for (int i = 0; i < tsm_recent->ntablespaces; i++)
	{
		bool		listed = false;

		for (int j = 0; j < nfollowed && !listed; j++)
			listed = (followed[j] == tsm_recent->tablespaces[i].spcoid);
		if (listed)
			tsm_recent->tablespaces[kept++] = tsm_recent->tablespaces[i];
	}
	tsm_recent->ntablespaces = kept;

	for (int j = 0; j < nfollowed; j++)
	{
		TsmRecentTablespace *t = NULL;

		if (deltas[3 * j] == 0 && deltas[3 * j + 1] == 0 && deltas[3 * j + 2] == 0)
			continue;
		for (int i = 0; i < tsm_recent->ntablespaces && t == NULL; i++)
			if (tsm_recent->tablespaces[i].spcoid == followed[j])
				t = &tsm_recent->tablespaces[i];
		if (t == NULL)
		{
			if (tsm_recent->ntablespaces == TSM_MAX_TABLESPACES)
				continue;		/* (the sampler follows no more than that) */
			t = &tsm_recent->tablespaces[tsm_recent->ntablespaces++];
			t->spcoid = followed[j];
			sums_init(&t->sums, now);
		}
		add_deltas(&t->sums, deltas[3 * j], deltas[3 * j + 1], deltas[3 * j + 2], now);
	}
}

/*
 * tsm_recent_feed
 *		Add one sample's deltas (relations with any) at time now, to each
 *		relation and to its tablespace; followed lists the tablespaces the
 *		sampler follows.  The sampler only; takes the recent lock
 *		exclusively, once.
 */
void
tsm_recent_feed(const TsmRecentSample *samples, int n, TimestampTz now,
				const Oid *followed, int nfollowed)
{
	bool		swept = false;
	int64	   *deltas = tablespace_deltas(samples, n, followed, nfollowed);

	LWLockAcquire(tsm_recent->lock, LW_EXCLUSIVE);
	if (tsm_recent->first_fed == 0)
		tsm_recent->first_fed = now;
	feed_tablespaces(deltas, now, followed, nfollowed);
	for (int i = 0; i < n; i++)
	{
		TsmRecentKey key;
		TsmRecentEntry *e;
		bool		found;

		key.dbid = samples[i].dbid;
		key.relid = samples[i].relid;
		e = hash_search(tsm_recent_hash, &key, HASH_FIND, NULL);
		if (e == NULL && table_full() && !swept)
		{
			forget_faded(now);
			swept = true;
		}
		if (e == NULL && !table_full())
			e = hash_search(tsm_recent_hash, &key, HASH_ENTER_NULL, &found);
		else
			found = true;
		if (e == NULL)
			continue;			/* not followed: the table is full */
		/* new, or moved: its sums count what it did where it is */
		if (!found || e->spcoid != samples[i].spcoid)
		{
			e->spcoid = samples[i].spcoid;
			sums_init(&e->sums, now);
		}
		add_deltas(&e->sums, samples[i].blocks_read, samples[i].rows_changed,
				   samples[i].index_rows, now);
	}
	LWLockRelease(tsm_recent->lock);
	pfree(deltas);
}

/* An interval in seconds, months of 30 days (as interval comparison). */
static double
interval_seconds(const Interval *i)
{
	return (double) i->time / USECS_PER_SEC +
		((double) i->day + (double) i->month * DAYS_PER_MONTH) * SECS_PER_DAY;
}

/* The time constant nearest half the horizon (on a log scale). */
static int
scale_for(double horizon_s)
{
	double		half_s = horizon_s / 2;
	int			best = 0;

	for (int k = 1; k < TSM_RECENT_SCALES; k++)
		if (fabs(log(recent_tau_s[k] / half_s)) < fabs(log(recent_tau_s[best] / half_s)))
			best = k;
	return best;
}

/*
 * The time constant for the horizon the function was called with (its
 * first argument), with a clear error for a null or unusable one.
 */
static int
scale_from_horizon_arg(FunctionCallInfo fcinfo)
{
	Interval   *horizon;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("horizon must not be null"),
				 errhint("Pass the period the sums should stand for, for example '1 hour'.")));
	horizon = PG_GETARG_INTERVAL_P(0);
	/* (an infinite interval, 17 and later, holds the largest fields) */
	if (!(interval_seconds(horizon) > 0) ||
		interval_seconds(horizon) > 1000.0 * 12 * DAYS_PER_MONTH * SECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("horizon must be a positive interval of at most 1000 years"),
				 errhint("Pass the period the sums should stand for, for example '1 hour'.")));
	return scale_for(interval_seconds(horizon));
}

/* Since when the sampler has fed the sums, in seconds; the lock held. */
static double
followed_seconds(TimestampTz now)
{
	return tsm_recent->first_fed == 0 ? 0 :
		(double) (now - tsm_recent->first_fed) / USECS_PER_SEC;
}

/*
 * One row of either function: an oid, a copy's sums at time constant k
 * (decayed to now), the time constant, how long they were followed, for a
 * relation (spcoid valid) the tablespace they were counted in, and when
 * rows were last changed (NULL: not since these sums started).
 */
static void
put_sums_row(ReturnSetInfo *rsinfo, Oid oid, TsmRecentSums *sums, int k,
			 double followed_s, TimestampTz now, Oid spcoid)
{
	Datum		values[TSM_RECENT_COLS];
	bool		nulls[TSM_RECENT_COLS] = {0};
	int			last = OidIsValid(spcoid) ? 7 : 6;

	decay(sums, now);
	values[0] = ObjectIdGetDatum(oid);
	values[1] = Float8GetDatum(sums->blocks_read[k]);
	values[2] = Float8GetDatum(sums->rows_changed[k]);
	values[3] = Float8GetDatum(sums->index_rows[k]);
	values[4] = Float8GetDatum(recent_tau_s[k]);
	values[5] = Float8GetDatum(followed_s);
	values[6] = ObjectIdGetDatum(spcoid);	/* (not in the tablespaces' rows) */
	values[last] = TimestampTzGetDatum(sums->last_written);
	nulls[last] = (sums->last_written == 0);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * tsmove.relation_recent_io(horizon): this database's relations with their
 * decayed sums at the time constant nearest half the horizon.
 */
Datum
tsm_relation_recent_io(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS seq;
	TsmRecentEntry *e;
	TsmRecentEntry *copies;
	double		followed_s;
	int			cap,
				n = 0,
				k;

	tsm_monitor_require_preload();
	k = scale_from_horizon_arg(fcinfo);
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(tsm_recent->lock, LW_SHARED);
	followed_s = followed_seconds(now);
	cap = Max(hash_get_num_entries(tsm_recent_hash), 1);
	copies = palloc(cap * sizeof(TsmRecentEntry));
	hash_seq_init(&seq, tsm_recent_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->key.dbid == MyDatabaseId && n < cap)
			copies[n++] = *e;
	LWLockRelease(tsm_recent->lock);

	for (int i = 0; i < n; i++)
		put_sums_row(rsinfo, copies[i].key.relid, &copies[i].sums, k, followed_s, now,
					 copies[i].spcoid);
	return (Datum) 0;
}

/*
 * tsmove.tablespace_recent_io(horizon): each tablespace's decayed sums (of
 * every database's relations) at the time constant nearest half the
 * horizon.
 */
Datum
tsm_tablespace_recent_io(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	TsmRecentTablespace copies[TSM_MAX_TABLESPACES];
	double		followed_s;
	int			n,
				k;

	tsm_monitor_require_preload();
	k = scale_from_horizon_arg(fcinfo);
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(tsm_recent->lock, LW_SHARED);
	followed_s = followed_seconds(now);
	n = tsm_recent->ntablespaces;
	memcpy(copies, tsm_recent->tablespaces, n * sizeof(TsmRecentTablespace));
	LWLockRelease(tsm_recent->lock);

	for (int i = 0; i < n; i++)
		put_sums_row(rsinfo, copies[i].spcoid, &copies[i].sums, k, followed_s, now,
					 InvalidOid);
	return (Datum) 0;
}
