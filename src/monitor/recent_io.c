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
 * times the last.  tsmove.relation_recent_io(horizon) gives the sums of
 * this database's relations at the time constant nearest half the horizon
 * (the mean age of a reading within a window of that length), and for how
 * long the sampler has fed them (since start-up: they are not kept across
 * a restart, and the advice does not use them until that is one time
 * constant); tsmove.tablespace_recent_io(horizon) their totals per
 * tablespace over every database (each entry remembers the tablespace its
 * relation was last read in).  The advice divides one relation's by its
 * tablespace's total, so the decay cancels out of a steady load, and a
 * quiet database's relation is not given the share of a busy database's
 * reads of the same tablespace.  Three quantities: blocks read from outside shared
 * buffers, rows changed (inserted, updated, deleted), and rows that
 * changed every index (inserted, or updated not HOT: an index's writes).
 *
 * The sampler feeds it (tablespace_io.c, each relation's deltas since its
 * previous sample); the decay is applied when a relation is next fed or
 * read.  A relation whose statistics are dropped is forgotten with them;
 * when the table is full, the least active entries make room.
 * The table is sized as the relation map; relations that do not fit are
 * not followed (they count for nothing in their tablespace's recent sums;
 * after a restart, when the sums are empty, the advice falls back to the
 * cumulative counters: the sums live in shared memory only).
 *
 * Locking: the recent lock, exclusive while the sampler feeds a sample's
 * relations in one go, shared while tsmove.relation_recent_io() copies its
 * database's entries or tsmove.tablespace_recent_io() adds up all.
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
#define TSM_RECENT_COLS 6
#define TSM_RECENT_SPC_COLS 6

/* The time constants, in seconds. */
static const double recent_tau_s[TSM_RECENT_SCALES] = {5, 30, 180, 1080, 6480, 38880};

typedef struct TsmRecentKey
{
	Oid			dbid;
	Oid			relid;
} TsmRecentKey;

typedef struct TsmRecentEntry
{
	TsmRecentKey key;
	Oid			spcoid;			/* the tablespace it was last read in */
	TimestampTz updated;		/* when the sums were last decayed */
	float4		blocks_read[TSM_RECENT_SCALES];
	float4		rows_changed[TSM_RECENT_SCALES];
	float4		index_rows[TSM_RECENT_SCALES];
} TsmRecentEntry;

typedef struct TsmRecentShared
{
	LWLock	   *lock;
	TimestampTz first_fed;		/* the sampler's first sample since start-up */
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
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(TsmRecentKey);
	info.entrysize = sizeof(TsmRecentEntry);
	tsm_recent_hash = tsm_shmem_init_hash("pg_tsmove recent io hash",
										  tsm_relation_map_size, &info, HASH_ELEM | HASH_BLOBS);
}

/* Decay an entry's sums to now. */
static void
decay(TsmRecentEntry *e, TimestampTz now)
{
	double		age_s = (double) (now - e->updated) / USECS_PER_SEC;

	if (age_s <= 0)
		return;
	for (int k = 0; k < TSM_RECENT_SCALES; k++)
	{
		double		f = exp(-age_s / recent_tau_s[k]);

		e->blocks_read[k] *= f;
		e->rows_changed[k] *= f;
		e->index_rows[k] *= f;
	}
	e->updated = now;
}

/* An entry's weight at the longest time constant. */
static double
weight(const TsmRecentEntry *e)
{
	int			last = TSM_RECENT_SCALES - 1;

	return (double) e->blocks_read[last] + e->rows_changed[last] + e->index_rows[last];
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
			decay(e, now);
			if (weight(e) < below)
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
 * tsm_recent_feed
 *		Add one sample's deltas (relations with any) at time now.  The
 *		sampler only; takes the recent lock exclusively, once.
 */
void
tsm_recent_feed(const TsmRecentSample *samples, int n, TimestampTz now)
{
	bool		swept = false;

	LWLockAcquire(tsm_recent->lock, LW_EXCLUSIVE);
	if (tsm_recent->first_fed == 0)
		tsm_recent->first_fed = now;
	for (int i = 0; i < n; i++)
	{
		TsmRecentKey key;
		TsmRecentEntry *e;
		bool		found;

		key.dbid = samples[i].dbid;
		key.relid = samples[i].relid;
		e = hash_search(tsm_recent_hash, &key, HASH_FIND, NULL);
		found = (e != NULL);
		if (e == NULL && table_full() && !swept)
		{
			forget_faded(now);
			swept = true;
		}
		if (e == NULL && !table_full())
			e = hash_search(tsm_recent_hash, &key, HASH_ENTER_NULL, &found);
		if (e == NULL)
			continue;			/* not followed: the table is full */
		if (!found)
		{
			memset(e->blocks_read, 0, sizeof(e->blocks_read));
			memset(e->rows_changed, 0, sizeof(e->rows_changed));
			memset(e->index_rows, 0, sizeof(e->index_rows));
			e->updated = now;
		}
		decay(e, now);
		e->spcoid = samples[i].spcoid;
		for (int k = 0; k < TSM_RECENT_SCALES; k++)
		{
			e->blocks_read[k] += (float4) samples[i].blocks_read;
			e->rows_changed[k] += (float4) samples[i].rows_changed;
			e->index_rows[k] += (float4) samples[i].index_rows;
		}
	}
	LWLockRelease(tsm_recent->lock);
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
	{
		Datum		values[TSM_RECENT_COLS];
		bool		nulls[TSM_RECENT_COLS] = {0};

		decay(&copies[i], now);
		values[0] = ObjectIdGetDatum(copies[i].key.relid);
		values[1] = Float8GetDatum(copies[i].blocks_read[k]);
		values[2] = Float8GetDatum(copies[i].rows_changed[k]);
		values[3] = Float8GetDatum(copies[i].index_rows[k]);
		values[4] = Float8GetDatum(recent_tau_s[k]);
		values[5] = Float8GetDatum(followed_s);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* One tablespace's totals, for tsmove.tablespace_recent_io(). */
typedef struct TsmRecentTotal
{
	Oid			spcoid;
	double		blocks_read;
	double		rows_changed;
	double		index_rows;
} TsmRecentTotal;

/*
 * tsmove.tablespace_recent_io(horizon): per tablespace, the decayed sums of
 * every database's relations last read there, at the time constant nearest
 * half the horizon.  Adds up under the lock (the entries are not copied:
 * there may be many), decaying each to now as it goes.
 */
Datum
tsm_tablespace_recent_io(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	HASH_SEQ_STATUS seq;
	TsmRecentEntry *e;
	TsmRecentTotal totals[TSM_MAX_TABLESPACES];
	double		followed_s;
	int			n = 0,
				k;

	tsm_monitor_require_preload();
	k = scale_from_horizon_arg(fcinfo);
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(tsm_recent->lock, LW_SHARED);
	followed_s = followed_seconds(now);
	hash_seq_init(&seq, tsm_recent_hash);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		double		f = exp(-Max((double) (now - e->updated) / USECS_PER_SEC, 0) / recent_tau_s[k]);
		int			slot;

		for (slot = 0; slot < n; slot++)
			if (totals[slot].spcoid == e->spcoid)
				break;
		if (slot == n)
		{
			if (n == TSM_MAX_TABLESPACES)
				continue;		/* as the monitor, which follows no more */
			totals[n].spcoid = e->spcoid;
			totals[n].blocks_read = totals[n].rows_changed = totals[n].index_rows = 0;
			n++;
		}
		/* decayed to now without writing the shared entry (a shared lock) */
		totals[slot].blocks_read += e->blocks_read[k] * f;
		totals[slot].rows_changed += e->rows_changed[k] * f;
		totals[slot].index_rows += e->index_rows[k] * f;
	}
	LWLockRelease(tsm_recent->lock);

	for (int i = 0; i < n; i++)
	{
		Datum		values[TSM_RECENT_SPC_COLS];
		bool		nulls[TSM_RECENT_SPC_COLS] = {0};

		values[0] = ObjectIdGetDatum(totals[i].spcoid);
		values[1] = Float8GetDatum(totals[i].blocks_read);
		values[2] = Float8GetDatum(totals[i].rows_changed);
		values[3] = Float8GetDatum(totals[i].index_rows);
		values[4] = Float8GetDatum(recent_tau_s[k]);
		values[5] = Float8GetDatum(followed_s);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
