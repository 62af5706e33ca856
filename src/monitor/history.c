/*-------------------------------------------------------------------------
 *
 * history.c
 *	  The per-tablespace load history behind tsmove.tablespace_io_history
 *	  and tsmove.report(): a bounded ring of rows in shared memory, each one
 *	  tablespace over one pg_tsmove.history_interval, kept across a clean
 *	  restart in a file as pg_stat_statements keeps its own.
 *
 * The sampler hands every sampling window to tsm_history_add_window(); the
 * window's logical blocks and device counters are added to an open row per
 * tablespace (sampler-local memory), together with the window's peaks
 * (logical reads/s, device utilisation, queue size).  When the interval
 * has passed (or the tablespace's device changed, as a relocation does, or
 * the sampler stops) the open rows are appended to the ring, overwriting
 * the oldest rows when it is full: pg_tsmove.history_size rows, all
 * tablespaces together.
 *
 * Locking: the history lock, exclusive to append or to load at start-up,
 * shared to read.  Saving at shutdown (postmaster, after every other
 * process has gone) takes no lock.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "monitor/monitor_internal.h"

PG_FUNCTION_INFO_V1(tsm_tablespace_io_history);

typedef struct TsmHistoryShared
{
	LWLock	   *lock;
	int			size;			/* rows the ring holds */
	int			next;			/* where the next row goes */
	int			count;			/* rows in use (<= size) */
	TsmHistoryRow rows[FLEXIBLE_ARRAY_MEMBER];
} TsmHistoryShared;

static TsmHistoryShared *tsm_history = NULL;

/* The sampler's open rows, one per tablespace. */
static TsmHistoryRow open_rows[TSM_MAX_TABLESPACES];
static int	nopen = 0;
static TimestampTz bucket_start = 0;

Size
tsm_history_shmem_size(void)
{
	return add_size(offsetof(TsmHistoryShared, rows),
					mul_size(tsm_history_size, sizeof(TsmHistoryRow)));
}

void
tsm_history_shmem_init(void)
{
	bool		found;

	tsm_history = ShmemInitStruct("pg_tsmove history", tsm_history_shmem_size(), &found);
	if (found)
		return;
	tsm_history->lock = tsm_monitor_lock(TSM_LOCK_HISTORY);
	tsm_history->size = tsm_history_size;
	tsm_history->next = 0;
	tsm_history->count = 0;
}

/* Append rows to the ring.  Caller holds the history lock exclusively. */
static void
append_rows(const TsmHistoryRow *rows, int n)
{
	for (int i = 0; i < n && tsm_history->size > 0; i++)
	{
		tsm_history->rows[tsm_history->next] = rows[i];
		tsm_history->next = (tsm_history->next + 1) % tsm_history->size;
		if (tsm_history->count < tsm_history->size)
			tsm_history->count++;
	}
}

/* Append one open row and forget it. */
static void
close_row(int i, TimestampTz end)
{
	open_rows[i].end = end;
	if (open_rows[i].samples > 0)
	{
		LWLockAcquire(tsm_history->lock, LW_EXCLUSIVE);
		append_rows(&open_rows[i], 1);
		LWLockRelease(tsm_history->lock);
	}
	open_rows[i] = open_rows[--nopen];
}

/*
 * tsm_history_close_bucket
 *		Append every open row, ending at `now`.  Called by the sampler when
 *		the interval is over and when it stops.
 */
void
tsm_history_close_bucket(TimestampTz now)
{
	if (tsm_history == NULL)
		return;
	LWLockAcquire(tsm_history->lock, LW_EXCLUSIVE);
	for (int i = 0; i < nopen; i++)
	{
		open_rows[i].end = now;
		if (open_rows[i].samples > 0)
			append_rows(&open_rows[i], 1);
	}
	LWLockRelease(tsm_history->lock);
	nopen = 0;
	bucket_start = 0;
}

/*
 * tsm_history_add_window
 *		Add one sampling window [window_start, now) of every tablespace to
 *		the open rows; close them when pg_tsmove.history_interval is over.
 *		deltas[i] are the device counters of spcs[i] over the window.
 */
void
tsm_history_add_window(TimestampTz window_start, TimestampTz now,
					   TsmTablespaceIo *spcs, int nspcs,
					   const TsmDiskStats *deltas)
{
	double		seconds = (now - window_start) / 1000000.0;

	if (tsm_history == NULL || tsm_history->size == 0 || seconds <= 0)
		return;
	if (bucket_start == 0)
		bucket_start = window_start;

	for (int s = 0; s < nspcs; s++)
	{
		TsmTablespaceIo *spc = &spcs[s];
		TsmHistoryRow *row = NULL;
		const char *device = spc->device.valid ? spc->device.name : "";
		double		read_s;

		for (int i = 0; i < nopen; i++)
			if (open_rows[i].spcoid == spc->spcoid)
			{
				/* a relocated tablespace starts a new row on its new device */
				if (strcmp(open_rows[i].device, device) != 0)
					close_row(i, window_start);
				else
					row = &open_rows[i];
				break;
			}
		if (row == NULL)
		{
			if (nopen == TSM_MAX_TABLESPACES)
				continue;
			row = &open_rows[nopen++];
			memset(row, 0, sizeof(*row));
			row->start = window_start;
			row->spcoid = spc->spcoid;
			strlcpy(row->device, device, sizeof(row->device));
		}
		row->samples++;
		row->logical.data_read += spc->window.data_read;
		row->logical.data_hit += spc->window.data_hit;
		row->logical.index_read += spc->window.index_read;
		row->logical.index_hit += spc->window.index_hit;
		read_s = (spc->window.data_read + spc->window.index_read) / seconds;
		row->peak_read_blocks_s = Max(row->peak_read_blocks_s, read_s);
		if (spc->rates_valid)
		{
			row->device_valid = true;
			row->device_delta.reads += deltas[s].reads;
			row->device_delta.read_sectors += deltas[s].read_sectors;
			row->device_delta.read_ms += deltas[s].read_ms;
			row->device_delta.writes += deltas[s].writes;
			row->device_delta.write_sectors += deltas[s].write_sectors;
			row->device_delta.write_ms += deltas[s].write_ms;
			row->device_delta.io_ms += deltas[s].io_ms;
			row->device_delta.weighted_ms += deltas[s].weighted_ms;
			row->peak_util_pct = Max(row->peak_util_pct, spc->rates.util_pct);
			row->peak_queue_size = Max(row->peak_queue_size, spc->rates.queue_size);
		}
	}

	/* dropped tablespaces: their rows end with their last window */
	for (int i = nopen - 1; i >= 0; i--)
	{
		bool		present = false;

		for (int s = 0; s < nspcs && !present; s++)
			present = (spcs[s].spcoid == open_rows[i].spcoid);
		if (!present)
			close_row(i, window_start);
	}

	if (now - bucket_start >= (int64) tsm_history_interval_s * USECS_PER_SEC)
		tsm_history_close_bucket(now);
}

/* Rows held and the start of the oldest; takes the history lock shared. */
void
tsm_history_status(int64 *rows, TimestampTz *oldest)
{
	LWLockAcquire(tsm_history->lock, LW_SHARED);
	*rows = tsm_history->count;
	*oldest = 0;
	if (tsm_history->count > 0)
	{
		int			first = (tsm_history->next - tsm_history->count + tsm_history->size)
			% tsm_history->size;

		*oldest = tsm_history->rows[first].start;
	}
	LWLockRelease(tsm_history->lock);
}

/* ---- persistence (postmaster only) ------------------------------------ */

/* Write the rows, oldest first.  Returns false on a write error. */
bool
tsm_history_write(FILE *file)
{
	int32		count = tsm_history->count;
	int			first = tsm_history->size > 0 ?
		(tsm_history->next - count + tsm_history->size) % tsm_history->size : 0;

	if (fwrite(&count, sizeof(int32), 1, file) != 1)
		return false;
	for (int i = 0; i < count; i++)
		if (fwrite(&tsm_history->rows[(first + i) % tsm_history->size],
				   sizeof(TsmHistoryRow), 1, file) != 1)
			return false;
	return true;
}

/* Read the rows back; the newest ones are kept if the ring got smaller. */
bool
tsm_history_read(FILE *file)
{
	int32		count;

	if (fread(&count, sizeof(int32), 1, file) != 1 || count < 0)
		return false;
	for (int i = 0; i < count; i++)
	{
		TsmHistoryRow row;

		if (fread(&row, sizeof(row), 1, file) != 1)
			return false;
		append_rows(&row, 1);
	}
	return true;
}

/* ---- SQL --------------------------------------------------------------- */

#define TSM_HISTORY_COLS 21

/*
 * tsmove.tablespace_io_history() RETURNS SETOF record
 *		Every history row, oldest first: interval, tablespace oid, device,
 *		samples, logical blocks (data/index read/hit), the highest window's
 *		logical reads/s, the device's counters over the interval and its
 *		peaks.  Thin data behind the tsmove.tablespace_io_history view.
 *
 * Copies the ring under the history lock held shared.  Granted to
 * pg_monitor.
 */
Datum
tsm_tablespace_io_history(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TsmHistoryRow *rows;
	int			count;

	tsm_monitor_require_preload();
	InitMaterializedSRF(fcinfo, 0);

	LWLockAcquire(tsm_history->lock, LW_SHARED);
	count = tsm_history->count;
	rows = palloc(sizeof(TsmHistoryRow) * Max(count, 1));
	for (int i = 0; i < count; i++)
	{
		int			first = (tsm_history->next - count + tsm_history->size) % tsm_history->size;

		rows[i] = tsm_history->rows[(first + i) % tsm_history->size];
	}
	LWLockRelease(tsm_history->lock);

	for (int i = 0; i < count; i++)
	{
		TsmHistoryRow *r = &rows[i];
		Datum		values[TSM_HISTORY_COLS];
		bool		nulls[TSM_HISTORY_COLS] = {0};
		int			c = 0;

		values[c++] = TimestampTzGetDatum(r->start);
		values[c++] = TimestampTzGetDatum(r->end);
		values[c++] = ObjectIdGetDatum(r->spcoid);
		if (r->device[0])
			values[c++] = CStringGetTextDatum(r->device);
		else
			nulls[c++] = true;
		values[c++] = Int32GetDatum(r->samples);
		values[c++] = Int64GetDatum(r->logical.data_read);
		values[c++] = Int64GetDatum(r->logical.data_hit);
		values[c++] = Int64GetDatum(r->logical.index_read);
		values[c++] = Int64GetDatum(r->logical.index_hit);
		values[c++] = Float8GetDatum(r->peak_read_blocks_s);
		if (r->device_valid)
		{
			values[c++] = Int64GetDatum((int64) r->device_delta.reads);
			values[c++] = Int64GetDatum((int64) r->device_delta.writes);
			values[c++] = Int64GetDatum((int64) (r->device_delta.read_sectors / 2));
			values[c++] = Int64GetDatum((int64) (r->device_delta.write_sectors / 2));
			values[c++] = Int64GetDatum((int64) r->device_delta.read_ms);
			values[c++] = Int64GetDatum((int64) r->device_delta.write_ms);
			values[c++] = Int64GetDatum((int64) r->device_delta.io_ms);
			values[c++] = Int64GetDatum((int64) r->device_delta.weighted_ms);
			values[c++] = Float8GetDatum(r->peak_util_pct);
			values[c++] = Float8GetDatum(r->peak_queue_size);
		}
		else
		{
			for (int k = 0; k < 10; k++)
				nulls[c++] = true;
		}
		values[c++] = BoolGetDatum(r->device_valid);
		Assert(c == TSM_HISTORY_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
