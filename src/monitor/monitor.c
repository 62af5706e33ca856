/*-------------------------------------------------------------------------
 *
 * monitor.c
 *	  Set-up of pg_tsmove's monitoring: its GUCs, its shared memory, its
 *	  file (history, co-access pairs and totals kept across a clean
 *	  restart), and tsmove.monitor_info().  The top of monitor/: it may
 *	  call every other file there, and none calls it (monitor.h).
 *
 * _PG_init (pg_tsmove.c) calls tsm_monitor_init(), which defines the
 * run-time GUCs always and, when the library is being preloaded, the
 * shared-memory sizes, and installs the executor hooks (coaccess.c); at
 * its end, tsm_monitor_register_workers() registers the sampler
 * (sampler.c).  The GUCs' variables live in common.c, which the parts
 * read.  pg_tsmove.c's shmem_request and shmem_startup hooks call
 * tsm_monitor_shmem_request() and tsm_monitor_shmem_startup().
 *
 * The file is pg_stat/pg_tsmove_monitor.stat.  As pg_stat_statements does,
 * the postmaster writes it when it exits cleanly (an on_shmem_exit
 * callback, after every other process has gone, so no lock is needed),
 * and reads and removes it when it creates shared memory; after a crash
 * there is no file and monitoring starts afresh.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <unistd.h>

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "monitor/monitor_internal.h"

PG_FUNCTION_INFO_V1(tsm_monitor_info);

#define TSM_MONITOR_FILE	PGSTAT_STAT_PERMANENT_DIRECTORY "/pg_tsmove_monitor.stat"
#define TSM_MONITOR_FILE_MAGIC	0x544d4f4e	/* "TMON" */
#define TSM_MONITOR_FILE_FORMAT 1

static void tsm_monitor_load_file(void);
static void tsm_monitor_save_file(int code, Datum arg);

/* Read only by SQL (tsmove.advise_candidates()), through current_setting(). */
static char *device_disks;

/*
 * pg_tsmove.device_disks: "device:N, device:N", the disks behind devices
 * the kernel cannot see through (a hardware RAID, a cloud volume).
 */
static bool
check_device_disks(char **newval, void **extra, GucSource source)
{
	char	   *raw;
	List	   *items;
	ListCell   *lc;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	raw = pstrdup(*newval);
	if (!SplitIdentifierString(raw, ',', &items))
	{
		GUC_check_errdetail("The list is not a comma-separated list of device:disks entries.");
		return false;
	}
	foreach(lc, items)
	{
		const char *item = lfirst(lc);
		const char *colon = strrchr(item, ':');
		char	   *end;
		long		n;

		n = colon ? strtol(colon + 1, &end, 10) : 0;
		if (colon == NULL || colon == item || colon[1] == '\0' || *end != '\0' ||
			n < 1 || n > 1024)
		{
			GUC_check_errdetail("\"%s\" is not a device name and a number of disks (1 to 1024), as in \"sdb:4\".",
								item);
			return false;
		}
	}
	return true;
}

/*
 * tsm_monitor_init
 *		Define the monitoring GUCs; when preloading, install the executor
 *		hooks and register the sampler.  Called from _PG_init.
 */
void
tsm_monitor_init(void)
{
	DefineCustomBoolVariable("pg_tsmove.track_coaccess",
							 "Whether executions and concurrent reads are recorded as co-access between relations.",
							 "Off: the executor hooks do nothing and no concurrency ticks are taken; "
							 "tablespace I/O is still sampled.",
							 &tsm_track_coaccess,
							 true,
							 PGC_SUSET, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.sample_interval",
							"Time between two samples of tablespace I/O (0 = no sampling).",
							"Rates in tsmove.tablespace_io cover the window between the last two samples.",
							&tsm_sample_interval_ms,
							10000, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.coaccess_sample_interval",
							"Time between two looks at which relations sessions are reading (0 = none).",
							"Each look that finds two relations read by different sessions adds a "
							"concurrent tick to their pair in tsmove.coaccess.",
							&tsm_coaccess_sample_interval_ms,
							100, 0, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.history_interval",
							"Length of one row of the tablespace load history.",
							NULL,
							&tsm_history_interval_s,
							60, 1, 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.relation_map_refresh",
							"How often the tablespace of each relation of an active database is read again.",
							"A relation moved by any means is attributed to its new tablespace within this time.",
							&tsm_relation_map_refresh_s,
							30, 1, 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("pg_tsmove.device_disks",
							   "Disks behind block devices the kernel sees as one, as device:disks pairs.",
							   "For a hardware RAID or a volume striped outside this machine, as \"sdb:4\": "
							   "tsmove.advise() weighs co-access by the disks under the source and "
							   "never moves onto fewer, and takes a named device to stand on disks of its own "
							   "(not those the kernel finds under it). Devices not named count the disks the kernel shows.",
							   &device_disks,
							   "",
							   PGC_SIGHUP, 0,
							   check_device_disks, NULL, NULL);

	DefineCustomBoolVariable("pg_tsmove.save_monitoring",
							 "Whether the load history and co-access pairs are kept across a clean restart.",
							 NULL,
							 &tsm_save_monitoring,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	/*
	 * Sizes of shared memory can only be set at server start: a library
	 * loaded later (CREATE EXTENSION without preloading) must not define
	 * them, as pg_stat_statements does not.
	 */
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("pg_tsmove.coaccess_max_pairs",
							"Pairs of relations the co-access table holds.",
							"When it is full, the least-used pairs are evicted.",
							&tsm_coaccess_max_pairs,
							5000, 100, 1000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.history_size",
							"Rows of tablespace load history kept, all tablespaces together (0 = none).",
							"One row per tablespace per pg_tsmove.history_interval; the oldest are overwritten.",
							&tsm_history_size,
							10080, 0, 10000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.relation_map_size",
							"Relations whose tablespace the sampler can know, all databases together.",
							"Only relations whose blocks were ever accessed are kept; blocks of others "
							"are not attributed to a tablespace.",
							&tsm_relation_map_size,
							20000, 1000, 10000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	tsm_coaccess_install_hooks();
}

/*
 * tsm_monitor_register_workers
 *		Register the sampler.  Called at the end of _PG_init, after the
 *		launcher, so that where max_worker_processes is tight the launcher,
 *		which cleans up after crashes, gets its slot first.
 */
void
tsm_monitor_register_workers(void)
{
	tsm_register_sampler();
}

void
tsm_monitor_shmem_request(void)
{
	Size		size = tsm_io_shmem_size();

	size = add_size(size, tsm_relmap_shmem_size());
	size = add_size(size, tsm_coaccess_shmem_size());
	size = add_size(size, tsm_history_shmem_size());
	size = add_size(size, tsm_recent_shmem_size());
	RequestAddinShmemSpace(size);
	RequestNamedLWLockTranche("pg_tsmove monitor", TSM_MONITOR_NLOCKS);
}

/*
 * tsm_monitor_shmem_startup
 *		Create or attach the monitoring structures; in the postmaster, load
 *		the file left by the last clean shutdown and arrange to write it at
 *		the next one.
 */
void
tsm_monitor_shmem_startup(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	found = tsm_io_shmem_init();
	tsm_relmap_shmem_init();
	tsm_coaccess_shmem_init();
	tsm_history_shmem_init();
	tsm_recent_shmem_init();
	LWLockRelease(AddinShmemInitLock);
	tsm_monitor_ready = true;

	if (!IsUnderPostmaster)
		on_shmem_exit(tsm_monitor_save_file, (Datum) 0);
	if (!found)
		tsm_monitor_load_file();
}

/* ---- the file ---------------------------------------------------------- */

/* Read the file of the last clean shutdown, if any, and remove it. */
static void
tsm_monitor_load_file(void)
{
	FILE	   *file = AllocateFile(TSM_MONITOR_FILE, PG_BINARY_R);
	uint32		header[4];

	if (file == NULL)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not read file \"%s\": %m", TSM_MONITOR_FILE)));
		return;
	}
	if (fread(header, sizeof(header), 1, file) != 1 ||
		header[0] != TSM_MONITOR_FILE_MAGIC ||
		header[1] != TSM_MONITOR_FILE_FORMAT ||
		header[2] != PG_VERSION_NUM / 100 ||
		header[3] != sizeof(TsmHistoryRow) ||
		!tsm_io_read(file) ||
		!tsm_coaccess_read(file) ||
		!tsm_history_read(file))
		ereport(LOG,
				(errmsg("ignoring the rest of pg_tsmove's monitoring file \"%s\": it is damaged or from another version",
						TSM_MONITOR_FILE)));
	FreeFile(file);
	unlink(TSM_MONITOR_FILE);
}

/*
 * on_shmem_exit callback of the postmaster: write the monitoring file,
 * unless exiting after a crash.
 */
static void
tsm_monitor_save_file(int code, Datum arg)
{
	FILE	   *file;
	uint32		header[4] = {TSM_MONITOR_FILE_MAGIC, TSM_MONITOR_FILE_FORMAT,
	PG_VERSION_NUM / 100, sizeof(TsmHistoryRow)};

	if (code != 0 || !tsm_monitor_ready)
		return;
	if (!tsm_save_monitoring)
	{
		unlink(TSM_MONITOR_FILE);
		return;
	}
	file = AllocateFile(TSM_MONITOR_FILE ".tmp", PG_BINARY_W);
	if (file == NULL)
		goto error;
	if (fwrite(header, sizeof(header), 1, file) != 1 ||
		!tsm_io_write(file) ||
		!tsm_coaccess_write(file) ||
		!tsm_history_write(file))
		goto error;
	if (FreeFile(file) != 0)
	{
		file = NULL;
		goto error;
	}
	(void) durable_rename(TSM_MONITOR_FILE ".tmp", TSM_MONITOR_FILE, LOG);
	return;

error:
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not write file \"%s\": %m", TSM_MONITOR_FILE ".tmp")));
	if (file)
		FreeFile(file);
	unlink(TSM_MONITOR_FILE ".tmp");
}

/* ---- SQL --------------------------------------------------------------- */

#define TSM_STATUS_COLS 14

/*
 * tsmove.monitor_info() RETURNS record
 *		The state of the monitoring machinery: the sampler's pid and last
 *		sample, co-access pairs held / allowed / evicted and their reset,
 *		relations mapped / allowed, blocks not yet attributed, history rows
 *		held / allowed and the oldest.
 *
 * Takes each part's lock shared in turn.  Granted to pg_monitor.
 */
Datum
tsm_monitor_info(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[TSM_STATUS_COLS];
	bool		nulls[TSM_STATUS_COLS] = {0};
	int			c = 0;
	int			sampler_pid;
	TimestampTz last_sample;
	int64		unattributed;
	int64		pairs,
				evictions,
				history_rows;
	TimestampTz reset_at,
				oldest;

	tsm_monitor_require_preload();
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	LWLockAcquire(tsm_io->lock, LW_SHARED);
	sampler_pid = tsm_io->sampler_pid;
	last_sample = tsm_io->last_sample;
	unattributed = tsm_io->unattributed_blocks;
	LWLockRelease(tsm_io->lock);
	tsm_coaccess_status(&pairs, &evictions, &reset_at);
	tsm_history_status(&history_rows, &oldest);

	if (sampler_pid != 0)
		values[c++] = Int32GetDatum(sampler_pid);
	else
		nulls[c++] = true;
	if (last_sample != 0)
		values[c++] = TimestampTzGetDatum(last_sample);
	else
		nulls[c++] = true;
	values[c++] = BoolGetDatum(tsm_track_coaccess);
	values[c++] = Int64GetDatum(pairs);
	values[c++] = Int32GetDatum(tsm_coaccess_max_pairs);
	values[c++] = Int64GetDatum(evictions);
	values[c++] = TimestampTzGetDatum(reset_at);
	values[c++] = Int64GetDatum(tsm_relmap_count());
	values[c++] = Int32GetDatum(tsm_relation_map_size);
	values[c++] = BoolGetDatum(tsm_relmap_full());
	values[c++] = Int64GetDatum(unattributed);
	values[c++] = Int64GetDatum(history_rows);
	values[c++] = Int32GetDatum(tsm_history_size);
	if (oldest != 0)
		values[c++] = TimestampTzGetDatum(oldest);
	else
		nulls[c++] = true;
	Assert(c == TSM_STATUS_COLS);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}
