/*-------------------------------------------------------------------------
 *
 * monitor_internal.h
 *	  Declarations shared by the files of monitor/ only: per-tablespace I/O
 *	  (tablespace_io.c), the relation -> tablespace map (relation_map.c),
 *	  each relation's recent I/O (recent_io.c),
 *	  co-access (coaccess.c), the load history (history.c), the sampler
 *	  worker (sampler.c), their set-up (monitor.c) and what they all share
 *	  (common.c).  Which of them may call which is in monitor.h; no file
 *	  outside monitor/ includes this one.
 *
 * Shared memory, one struct per part, each guarded by its own LWLock of the
 * "pg_tsmove monitor" tranche:
 *	- TsmIoShared (io lock): one TsmTablespaceIo per tablespace.  Written
 *	  only by the sampler (exclusive) and by tsmove.tablespace_io_reset();
 *	  read by tsmove.tablespace_io (shared).
 *	- the relation map (relmap lock): (database, relation) -> tablespace.
 *	  Written by the short-lived refresh workers (exclusive); read by the
 *	  sampler (shared).
 *	- the co-access pair table (coaccess lock): see coaccess.c's header;
 *	  counters of an existing pair are changed under the shared lock plus
 *	  the pair's spinlock, inserting and evicting take the lock exclusively.
 *	- one TsmBackendSlot per backend: its pending pairs under the slot's
 *	  spinlock (the backend adds, a merge empties), and what it is reading
 *	  now, written only by the backend without a lock (a change counter,
 *	  as PgBackendStatus's st_changecount, lets the sampler copy a
 *	  consistent version).
 *	- the history ring (history lock): appended by the sampler, read by
 *	  tsmove.tablespace_io_history, saved and loaded by the postmaster.
 *	- each relation's and tablespace's recent I/O (recent lock): fed by
 *	  the sampler (exclusive), read by tsmove.relation_recent_io() and
 *	  tsmove.tablespace_recent_io() (shared).
 * No code path holds two of these locks at once.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_MONITOR_INTERNAL_H
#define TSM_MONITOR_INTERNAL_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "port/atomics.h"
#include "storage/lwlock.h"

#include "monitor/monitor.h"
#include "storage/spin.h"

/* Tablespaces the sampler follows; more are ignored (with a log line). */
#define TSM_MAX_TABLESPACES 256
/* Longest block device name kept ("nvme0n1", "dm-12", "loop7"). */
#define TSM_DEVICE_NAME_LEN 32
/* Relations a backend publishes as "being read" for the concurrency ticks. */
#define TSM_PUBLISHED_RELS 16

/* One relation's deltas since the sampler's previous sample (recent_io.c). */
typedef struct TsmRecentSample
{
	Oid			dbid;
	Oid			relid;
	Oid			spcoid;			/* its tablespace now (never 0) */
	int64		blocks_read;	/* from outside shared buffers */
	int64		rows_changed;	/* inserted, updated, deleted */
	int64		index_rows;		/* inserted, or updated not HOT */
} TsmRecentSample;

/* Named locks of the "pg_tsmove monitor" tranche. */
#define TSM_LOCK_IO			0
#define TSM_LOCK_RELMAP		1
#define TSM_LOCK_COACCESS	2
#define TSM_LOCK_HISTORY	3
#define TSM_LOCK_RECENT		4
#define TSM_MONITOR_NLOCKS	5

/* Cumulative counters of one block device, as in /proc/diskstats. */
typedef struct TsmDiskStats
{
	uint64		reads;			/* reads completed */
	uint64		read_sectors;	/* 512-byte sectors read */
	uint64		read_ms;		/* time spent reading (sum over requests) */
	uint64		writes;
	uint64		write_sectors;
	uint64		write_ms;
	uint64		io_ms;			/* time the device had I/O in flight */
	uint64		weighted_ms;	/* sum of (requests in flight x time) */
} TsmDiskStats;

/* What iostat derives from two TsmDiskStats taken seconds apart. */
typedef struct TsmDeviceRates
{
	double		reads_s;
	double		writes_s;
	double		read_kb_s;
	double		write_kb_s;
	double		r_await_ms;
	double		w_await_ms;
	double		queue_size;
	double		util_pct;
} TsmDeviceRates;

/* Logical I/O of a tablespace: blocks requested by PostgreSQL. */
typedef struct TsmLogicalCounts
{
	int64		data_read;		/* tables, TOAST, matviews, sequences:
								 * blocks read from outside shared buffers */
	int64		data_hit;		/* ... found in shared buffers */
	int64		index_read;
	int64		index_hit;
} TsmLogicalCounts;

/* Where a directory's data lives: the block device and what is under it. */
typedef struct TsmDeviceInfo
{
	bool		valid;			/* a block device was found */
	char		name[TSM_DEVICE_NAME_LEN];	/* "vda", "loop0", "dm-1" */
	unsigned int major;
	unsigned int minor;
	bool		rotational_known;
	bool		rotational;
	int			ndisks;			/* physical disks under it (0: memory) */
	char		disks[128];		/* their names, comma-separated */
	char		note[192];		/* why there is no device, or what backs it */
} TsmDeviceInfo;

/* One tablespace, as the sampler last saw it. */
typedef struct TsmTablespaceIo
{
	Oid			spcoid;
	char		path[MAXPGPATH];	/* the directory the sampler stat()s */
	TsmDeviceInfo device;
	int64		free_bytes;		/* statvfs of path, -1 if unknown */
	int64		fs_bytes;

	/* the last window: between the two most recent samples */
	TimestampTz window_start;
	TimestampTz window_end;
	TsmLogicalCounts window;
	bool		rates_valid;	/* the device had two samples */
	TsmDeviceRates rates;

	/* since tsmove.tablespace_io_reset() (or the first sample) */
	TsmLogicalCounts total;
	TsmDiskStats device_total;	/* deltas of the device's counters */
} TsmTablespaceIo;

typedef struct TsmIoShared
{
	LWLock	   *lock;
	TimestampTz stats_reset;
	TimestampTz last_sample;
	int			sampler_pid;
	int64		unattributed_blocks;	/* waiting for the relation map */
	bool		reset_requested;	/* the sampler zeroes its totals */
	int			ntablespaces;
	TsmTablespaceIo tablespaces[TSM_MAX_TABLESPACES];
} TsmIoShared;

/* One history row: one tablespace over one history interval. */
typedef struct TsmHistoryRow
{
	TimestampTz start;
	TimestampTz end;
	Oid			spcoid;
	char		device[TSM_DEVICE_NAME_LEN];
	int32		samples;		/* sampler windows in the interval */
	bool		device_valid;
	TsmLogicalCounts logical;	/* sums over the interval */
	double		peak_read_blocks_s; /* highest window: data + index read/s */
	TsmDiskStats device_delta;	/* the device's counters over the interval */
	double		peak_util_pct;
	double		peak_queue_size;
} TsmHistoryRow;

/* common.c: the GUCs' variables (tsm_monitor_init defines the GUCs), locks */
extern bool tsm_track_coaccess;
extern int	tsm_sample_interval_ms;
extern int	tsm_coaccess_sample_interval_ms;
extern int	tsm_coaccess_max_pairs;
extern int	tsm_history_interval_s;
extern int	tsm_history_size;
extern int	tsm_relation_map_size;
extern int	tsm_relation_map_refresh_s;
extern bool tsm_save_monitoring;
extern bool tsm_monitor_ready;
extern LWLock *tsm_monitor_lock(int which);
extern void tsm_monitor_require_preload(void);

/* tablespace_io.c */
extern TsmIoShared *tsm_io;
extern Size tsm_io_shmem_size(void);
extern bool tsm_io_shmem_init(void);
extern void tsm_resolve_device(const char *path, TsmDeviceInfo *info);
extern void tsm_io_sample(TimestampTz now);
extern void tsm_io_sampler_exit(void);
extern bool tsm_io_write(FILE *file);
extern bool tsm_io_read(FILE *file);

/* relation_map.c */
extern Size tsm_relmap_shmem_size(void);
extern void tsm_relmap_shmem_init(void);
extern bool tsm_relmap_lookup(Oid dbid, Oid relid, Oid *spcoid, bool *is_index);
extern int64 tsm_relmap_count(void);
extern bool tsm_relmap_full(void);
extern void tsm_relmap_begin_pass(void);
extern void tsm_relmap_request(Oid dbid, bool unmapped);
extern void tsm_relmap_schedule(TimestampTz now);

/* recent_io.c */
extern Size tsm_recent_shmem_size(void);
extern void tsm_recent_shmem_init(void);
extern void tsm_recent_feed(const TsmRecentSample *samples, int n, TimestampTz now,
							const Oid *tablespaces, int ntablespaces);
extern void tsm_recent_forget(const TsmRecentSample *gone, int n);

/* coaccess.c */
extern Size tsm_coaccess_shmem_size(void);
extern void tsm_coaccess_shmem_init(void);
extern void tsm_coaccess_install_hooks(void);
extern void tsm_coaccess_sample_concurrency(TimestampTz now);
extern void tsm_coaccess_merge_pending(void);
extern void tsm_coaccess_status(int64 *pairs, int64 *evictions,
								TimestampTz *reset_at);
extern bool tsm_coaccess_write(FILE *file);
extern bool tsm_coaccess_read(FILE *file);

/* history.c */
extern Size tsm_history_shmem_size(void);
extern void tsm_history_shmem_init(void);
extern void tsm_history_add_window(TimestampTz window_start, TimestampTz now,
								   TsmTablespaceIo *spcs, int nspcs,
								   const TsmDiskStats *device_deltas);
extern void tsm_history_close_bucket(TimestampTz now);
extern void tsm_history_status(int64 *rows, TimestampTz *oldest);
extern bool tsm_history_write(FILE *file);
extern bool tsm_history_read(FILE *file);

/* sampler.c */
extern void tsm_register_sampler(void);

#endif							/* TSM_MONITOR_INTERNAL_H */
