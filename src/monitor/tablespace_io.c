/*-------------------------------------------------------------------------
 *
 * tablespace_io.c
 *	  Per-tablespace I/O: the block device under each tablespace, its
 *	  physical counters as iostat derives them from /proc/diskstats, and
 *	  PostgreSQL's logical block reads and hits summed by tablespace;
 *	  tsmove.tablespace_io_stats() and tsmove.tablespace_io_reset().
 *
 * The sampler (sampler.c) calls tsm_io_sample() every
 * pg_tsmove.sample_interval.  One sample:
 *	1. lists the tablespaces from the data directory (base, global and the
 *	   links or in-place directories under pg_tblspc), so no catalog is
 *	   read and every database's tablespaces are seen;
 *	2. resolves each directory to its block device: stat() -> st_dev ->
 *	   /sys/dev/block/MAJ:MIN, a partition to its disk; a loop device or a
 *	   device-mapper/md device stays itself (it has its own counters and
 *	   queue) and the disks under it are listed (a loop device's backing
 *	   file is resolved the same way); a filesystem without a block device
 *	   (tmpfs, overlay, NFS) gets none, and the reason;
 *	3. reads /proc/diskstats once and derives reads/s, writes/s, kB/s,
 *	   r_await, w_await, average queue size and utilisation over the window
 *	   since the previous sample, exactly as iostat -x does;
 *	4. reads PostgreSQL's cumulative per-relation block counters
 *	   (blocks_fetched, blocks_hit) of every database straight from the
 *	   shared statistics hash, and adds each relation's increase since the
 *	   previous sample to the tablespace the relation map (relation_map.c) says
 *	   it lives in.  Attributing increases, not totals, keeps a relation
 *	   that moves counted where it was read at the time.  A relation the
 *	   map does not know yet keeps its increase pending (the map's refresh
 *	   is requested) and is attributed at the first sample that knows it.
 *
 * Logical counters are those of pg_statio_all_tables/indexes: a backend
 * publishes them when it goes idle (at most once a second), so a long
 * query's blocks appear when it ends, not while it runs.  Physical
 * counters are the device's: every process that uses the device counts.
 *
 * Locking: the sampler builds a sample in local memory and publishes it
 * under the io lock held exclusively; tablespace_io_stats() copies it under
 * the shared lock.  The statistics hash is read as core's own snapshot code
 * does (dshash sequential scan, each entry's LWLock shared), into local
 * memory, before any other lock is taken.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "catalog/pg_tablespace_d.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "lib/dshash.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/pgstat_internal.h"
#include "utils/timestamp.h"

#include "compat.h"
#include "monitor/monitor_internal.h"

PG_FUNCTION_INFO_V1(tsm_tablespace_io_stats);
PG_FUNCTION_INFO_V1(tsm_tablespace_io_reset);

TsmIoShared *tsm_io = NULL;

/* How deep a loop-on-loop or dm-on-loop stack is followed. */
#define TSM_MAX_DEVICE_DEPTH 4

/* ---- sampler-local state ------------------------------------------------ */

/* One relation's counters at the previous sample. */
typedef struct TsmRelKey
{
	Oid			dbid;
	Oid			relid;
} TsmRelKey;

typedef struct TsmRelPrev
{
	TsmRelKey	key;
	int64		fetched;
	int64		hit;
	int64		changed;		/* rows inserted, updated, deleted */
	int64		index_rows;		/* rows inserted, or updated not HOT */
	uint32		seen_in_pass;
} TsmRelPrev;

/* One device's counters at the previous sample. */
typedef struct TsmDevicePrev
{
	char		name[TSM_DEVICE_NAME_LEN];
	TsmDiskStats stats;
	uint32		seen_in_pass;
} TsmDevicePrev;

static HTAB *rel_prev = NULL;
static HTAB *device_prev = NULL;
static uint32 relation_pass = 0;
static uint32 device_pass = 0;
static TimestampTz prev_sample_time = 0;

/* ---- small file helpers ----------------------------------------------- */

/* First line of a small (sysfs) file, without its newline; false if none. */
static bool
read_first_line(const char *path, char *buf, size_t len)
{
	FILE	   *f = AllocateFile(path, "r");
	bool		ok;

	if (f == NULL)
		return false;
	ok = (fgets(buf, len, f) != NULL);
	FreeFile(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

static bool
path_exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Append name to a comma-separated list unless it is there already. */
static void
add_disk(TsmDeviceInfo *info, const char *name)
{
	char		padded[sizeof(info->disks) + 2];
	char		needle[TSM_DEVICE_NAME_LEN + 2];

	snprintf(padded, sizeof(padded), ",%s,", info->disks);
	snprintf(needle, sizeof(needle), ",%s,", name);
	if (strstr(padded, needle) != NULL)
		return;
	if (info->disks[0] != '\0')
		strlcat(info->disks, ",", sizeof(info->disks));
	strlcat(info->disks, name, sizeof(info->disks));
	info->ndisks++;
}

static void resolve_devnum(unsigned int maj, unsigned int min,
						   TsmDeviceInfo *info, int depth);

/*
 * The filesystem of an anonymous device number (major 0: tmpfs, overlay,
 * btrfs, NFS...), from /proc/self/mountinfo.  A filesystem whose source is
 * a block device (btrfs on one disk) resolves to it; any other gets a note.
 */
static void
resolve_anonymous(unsigned int maj, unsigned int min, TsmDeviceInfo *info,
				  int depth)
{
	FILE	   *f = AllocateFile("/proc/self/mountinfo", "r");
	char		line[4096];
	char		want[32];

	snprintf(want, sizeof(want), "%u:%u", maj, min);
	if (f == NULL)
	{
		snprintf(info->note, sizeof(info->note),
				 "device %s is not a block device and /proc/self/mountinfo is unreadable", want);
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL)
	{
		/* "36 35 0:27 / /dev/shm rw,relatime shared:5 - tmpfs tmpfs rw,..." */
		char		devnum[32];
		char		mountpoint[MAXPGPATH];
		char		fstype[64] = "";
		char		source[MAXPGPATH] = "";
		char	   *tail = strstr(line, " - ");

		if (tail == NULL ||
			sscanf(line, "%*s %*s %31s %*s %1023s", devnum, mountpoint) != 2 ||
			strcmp(devnum, want) != 0)
			continue;
		(void) sscanf(tail + 3, "%63s %1023s", fstype, source);
		FreeFile(f);

		if (strncmp(source, "/dev/", 5) == 0 && depth < TSM_MAX_DEVICE_DEPTH)
		{
			struct stat st;

			if (stat(source, &st) == 0 && S_ISBLK(st.st_mode))
			{
				resolve_devnum(major(st.st_rdev), minor(st.st_rdev), info, depth + 1);
				return;
			}
		}
		if (strcmp(fstype, "tmpfs") == 0 || strcmp(fstype, "ramfs") == 0)
			snprintf(info->note, sizeof(info->note),
					 "%s on %s: in memory, no block device", fstype, mountpoint);
		else
			snprintf(info->note, sizeof(info->note),
					 "%s filesystem %s on %s: not a single block device",
					 fstype[0] ? fstype : "unknown", source[0] ? source : "?", mountpoint);
		return;
	}
	FreeFile(f);
	snprintf(info->note, sizeof(info->note),
			 "device %s is not a block device and is not in /proc/self/mountinfo", want);
}

/*
 * The disks under block device `name`: a loop device's backing file is
 * resolved like a tablespace directory; a device-mapper or md device lists
 * its slaves; anything else is a disk itself.
 */
static void
collect_disks(const char *name, TsmDeviceInfo *info, int depth)
{
	char		path[MAXPGPATH];
	char		backing[MAXPGPATH];
	DIR		   *dir;
	struct dirent *de;
	bool		any_slave = false;

	snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", name);
	if (read_first_line(path, backing, sizeof(backing)))
	{
		TsmDeviceInfo under;
		struct stat st;
		char	   *deleted = strstr(backing, " (deleted)");

		if (deleted)
			*deleted = '\0';
		memset(&under, 0, sizeof(under));
		if (depth >= TSM_MAX_DEVICE_DEPTH)
			snprintf(under.note, sizeof(under.note), "stacked too deep");
		else if (stat(backing, &st) != 0)
			snprintf(under.note, sizeof(under.note), "backing file not found");
		else if (major(st.st_dev) == 0)
			resolve_anonymous(major(st.st_dev), minor(st.st_dev), &under, depth + 1);
		else
			resolve_devnum(major(st.st_dev), minor(st.st_dev), &under, depth + 1);

		if (under.valid)
		{
			char	   *list = pstrdup(under.disks);
			char	   *save = NULL;

			for (char *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save))
				add_disk(info, d);
			snprintf(info->note, sizeof(info->note),
					 "loop device backed by %s on %s", backing, under.name);
		}
		else
			snprintf(info->note, sizeof(info->note),
					 "loop device backed by %s (%s)", backing, under.note);
		return;
	}

	snprintf(path, sizeof(path), "/sys/block/%s/slaves", name);
	dir = AllocateDir(path);
	while (dir != NULL && (de = ReadDirExtended(dir, path, DEBUG1)) != NULL)
	{
		char		devfile[MAXPGPATH];
		char		numbers[32];
		unsigned int smaj,
					smin;
		TsmDeviceInfo under;

		if (de->d_name[0] == '.')
			continue;
		snprintf(devfile, sizeof(devfile), "/sys/class/block/%s/dev", de->d_name);
		if (!read_first_line(devfile, numbers, sizeof(numbers)) ||
			sscanf(numbers, "%u:%u", &smaj, &smin) != 2)
			continue;
		memset(&under, 0, sizeof(under));
		if (depth < TSM_MAX_DEVICE_DEPTH)
			resolve_devnum(smaj, smin, &under, depth + 1);
		if (under.valid)
		{
			char	   *list = pstrdup(under.disks);
			char	   *save = NULL;

			for (char *d = strtok_r(list, ",", &save); d; d = strtok_r(NULL, ",", &save))
				add_disk(info, d);
		}
		any_slave = true;
	}
	if (dir != NULL)
		FreeDir(dir);
	if (any_slave)
	{
		snprintf(info->note, sizeof(info->note), "%s over %s",
				 strncmp(name, "md", 2) == 0 ? "md array" : "device-mapper device",
				 info->disks[0] ? info->disks : "unknown devices");
		return;
	}
	add_disk(info, name);
}

/* Describe block device maj:min, a partition as its whole disk. */
static void
resolve_devnum(unsigned int maj, unsigned int min, TsmDeviceInfo *info,
			   int depth)
{
	char		link[64];
	char		real[PATH_MAX];	/* realpath() needs PATH_MAX */
	char		path[MAXPGPATH];
	char		value[32];
	char	   *base;

	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", maj, min);
	if (realpath(link, real) == NULL)
	{
		snprintf(info->note, sizeof(info->note),
				 "block device %u:%u has no entry in /sys/dev/block", maj, min);
		return;
	}
	snprintf(path, sizeof(path), "%s/partition", real);
	if (path_exists(path))
	{
		char	   *slash = strrchr(real, '/');

		if (slash != NULL)
			*slash = '\0';		/* the disk's directory holds the partition's */
		snprintf(path, sizeof(path), "%s/dev", real);
		if (read_first_line(path, value, sizeof(value)))
			(void) sscanf(value, "%u:%u", &maj, &min);
	}
	base = strrchr(real, '/');
	base = base ? base + 1 : real;

	info->valid = true;
	strlcpy(info->name, base, sizeof(info->name));
	info->major = maj;
	info->minor = min;
	snprintf(path, sizeof(path), "/sys/block/%s/queue/rotational", info->name);
	if (read_first_line(path, value, sizeof(value)))
	{
		info->rotational_known = true;
		info->rotational = (strcmp(value, "1") == 0);
	}
	collect_disks(info->name, info, depth);
}

/*
 * tsm_resolve_device
 *		The block device holding directory `path`, and what is under it.
 *
 * Never errors: what cannot be resolved is explained in info->note.
 */
void
tsm_resolve_device(const char *path, TsmDeviceInfo *info)
{
	struct stat st;

	memset(info, 0, sizeof(*info));
	if (stat(path, &st) != 0)
	{
		snprintf(info->note, sizeof(info->note), "could not stat \"%s\": %s",
				 path, strerror(errno));
		return;
	}
	if (major(st.st_dev) == 0)
		resolve_anonymous(major(st.st_dev), minor(st.st_dev), info, 0);
	else
		resolve_devnum(major(st.st_dev), minor(st.st_dev), info, 0);
}

/* ---- /proc/diskstats ---------------------------------------------------- */

typedef struct TsmDiskLine
{
	char		name[TSM_DEVICE_NAME_LEN];
	TsmDiskStats stats;
} TsmDiskLine;

/* Every line of /proc/diskstats; *n is set to their number. */
static TsmDiskLine *
read_diskstats(int *n)
{
	FILE	   *f = AllocateFile("/proc/diskstats", "r");
	int			cap = 64;
	TsmDiskLine *lines = palloc(cap * sizeof(TsmDiskLine));
	char		buf[512];

	*n = 0;
	if (f == NULL)
		return lines;
	while (fgets(buf, sizeof(buf), f) != NULL)
	{
		unsigned int maj,
					min;
		char		name[TSM_DEVICE_NAME_LEN + 1];
		unsigned long long v[11];

		/* major minor name, then the 11 classic fields (newer kernels add more) */
		if (sscanf(buf, "%u %u %32s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
				   &maj, &min, name, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
				   &v[6], &v[7], &v[8], &v[9], &v[10]) != 14)
			continue;
		if (*n == cap)
		{
			cap *= 2;
			lines = repalloc(lines, cap * sizeof(TsmDiskLine));
		}
		strlcpy(lines[*n].name, name, TSM_DEVICE_NAME_LEN);
		lines[*n].stats.reads = v[0];
		lines[*n].stats.read_sectors = v[2];
		lines[*n].stats.read_ms = v[3];
		lines[*n].stats.writes = v[4];
		lines[*n].stats.write_sectors = v[6];
		lines[*n].stats.write_ms = v[7];
		/* v[8] is the number of requests in flight now */
		lines[*n].stats.io_ms = v[9];
		lines[*n].stats.weighted_ms = v[10];
		(*n)++;
	}
	FreeFile(f);
	return lines;
}

/* cur - prev, field by field; a counter that went backwards restarts at 0. */
static TsmDiskStats
diskstats_delta(const TsmDiskStats *cur, const TsmDiskStats *prev)
{
	TsmDiskStats d;

#define TSM_DELTA(f) d.f = (cur->f >= prev->f) ? cur->f - prev->f : cur->f
	TSM_DELTA(reads);
	TSM_DELTA(read_sectors);
	TSM_DELTA(read_ms);
	TSM_DELTA(writes);
	TSM_DELTA(write_sectors);
	TSM_DELTA(write_ms);
	TSM_DELTA(io_ms);
	TSM_DELTA(weighted_ms);
#undef TSM_DELTA
	return d;
}

/* iostat -x over `seconds`: r/s, w/s, rkB/s, wkB/s, r_await, w_await, aqu-sz, %util. */
static TsmDeviceRates
diskstats_rates(const TsmDiskStats *d, double seconds)
{
	TsmDeviceRates r;
	double		ms = seconds * 1000.0;

	r.reads_s = d->reads / seconds;
	r.writes_s = d->writes / seconds;
	r.read_kb_s = d->read_sectors / 2.0 / seconds;
	r.write_kb_s = d->write_sectors / 2.0 / seconds;
	r.r_await_ms = d->reads ? (double) d->read_ms / d->reads : 0.0;
	r.w_await_ms = d->writes ? (double) d->write_ms / d->writes : 0.0;
	r.queue_size = d->weighted_ms / ms;
	r.util_pct = Min(100.0, d->io_ms * 100.0 / ms);
	return r;
}

/* ---- the tablespaces of the data directory ------------------------------- */

/* Fill spcs[] with every tablespace's oid and directory; returns how many. */
static int
list_tablespaces(TsmTablespaceIo *spcs, int max)
{
	int			n = 0;
	DIR		   *dir;
	struct dirent *de;

	spcs[n].spcoid = DEFAULTTABLESPACE_OID;
	snprintf(spcs[n++].path, MAXPGPATH, "%s/base", DataDir);
	spcs[n].spcoid = GLOBALTABLESPACE_OID;
	snprintf(spcs[n++].path, MAXPGPATH, "%s/global", DataDir);

	dir = AllocateDir("pg_tblspc");
	while ((de = ReadDir(dir, "pg_tblspc")) != NULL)
	{
		char	   *end;
		unsigned long oid = strtoul(de->d_name, &end, 10);

		if (*end != '\0' || oid == 0 || oid > UINT_MAX)
			continue;
		if (n == max)
		{
			ereport(LOG,
					(errmsg("pg_tsmove follows only the first %d tablespaces", max)));
			break;
		}
		spcs[n].spcoid = (Oid) oid;
		/* stat() follows the link; an in-place tablespace is the directory */
		snprintf(spcs[n++].path, MAXPGPATH, "%s/pg_tblspc/%s", DataDir, de->d_name);
	}
	FreeDir(dir);
	return n;
}

static int
find_tablespace(TsmTablespaceIo *spcs, int n, Oid spcoid)
{
	for (int i = 0; i < n; i++)
		if (spcs[i].spcoid == spcoid)
			return i;
	return -1;
}

/* ---- logical I/O from the shared statistics ---------------------------- */

typedef struct TsmRelCounters
{
	TsmRelKey	key;
	int64		fetched;
	int64		hit;
	int64		changed;
	int64		index_rows;
} TsmRelCounters;

/*
 * blocks_fetched/blocks_hit and the rows changed of every relation of
 * every database, copied from the shared statistics hash as
 * pgstat_build_snapshot() does.
 */
static TsmRelCounters *
read_relation_counters(int *n)
{
	dshash_seq_status hstat;
	PgStatShared_HashEntry *p;
	int			cap = 1024;
	TsmRelCounters *out = palloc(cap * sizeof(TsmRelCounters));

	*n = 0;
	dshash_seq_init(&hstat, pgStatLocal.shared_hash, false);
	while ((p = dshash_seq_next(&hstat)) != NULL)
	{
		PgStatShared_Relation *rel;

		if (p->key.kind != PGSTAT_KIND_RELATION || p->dropped)
			continue;
		rel = (PgStatShared_Relation *) dsa_get_address(pgStatLocal.dsa, p->body);
		if (*n == cap)
		{
			cap *= 2;
			out = repalloc(out, cap * sizeof(TsmRelCounters));
		}
		out[*n].key.dbid = p->key.dboid;
		out[*n].key.relid = TSM_PGSTAT_KEY_OBJECT(p->key);
		LWLockAcquire(&rel->header.lock, LW_SHARED);
		out[*n].fetched = rel->stats.blocks_fetched;
		out[*n].hit = rel->stats.blocks_hit;
		out[*n].changed = rel->stats.tuples_inserted + rel->stats.tuples_updated +
			rel->stats.tuples_deleted;
		out[*n].index_rows = rel->stats.tuples_inserted + rel->stats.tuples_updated -
			rel->stats.tuples_hot_updated;
		LWLockRelease(&rel->header.lock);
		(*n)++;
	}
	dshash_seq_term(&hstat);
	return out;
}

/*
 * Add each relation's blocks since the previous sample to its tablespace
 * in spcs[].window, and its blocks and rows to its recent I/O
 * (recent_io.c).  Returns the blocks still waiting for the relation map.
 */
static int64
attribute_logical_io(TsmTablespaceIo *spcs, int nspcs, bool baseline, TimestampTz now)
{
	int			n;
	TsmRelCounters *counters = read_relation_counters(&n);
	TsmRecentSample *recent = palloc(Max(n, 1) * sizeof(TsmRecentSample));
	int			nrecent = 0;
	HASH_SEQ_STATUS seq;
	TsmRelPrev *prev;
	int64		unattributed = 0;

	tsm_relmap_begin_pass();
	relation_pass++;
	for (int i = 0; i < n; i++)
	{
		bool		found;
		int64		dfetched,
					dhit,
					dchanged,
					dindex;
		Oid			spcoid;
		bool		is_index = false;
		int			slot;

		prev = hash_search(rel_prev, &counters[i].key, HASH_ENTER, &found);
		prev->seen_in_pass = relation_pass;
		if (!found)
		{
			/* the first sample is the baseline; later, a new relation */
			prev->fetched = baseline ? counters[i].fetched : 0;
			prev->hit = baseline ? counters[i].hit : 0;
			prev->changed = baseline ? counters[i].changed : 0;
			prev->index_rows = baseline ? counters[i].index_rows : 0;
		}
		dfetched = counters[i].fetched - prev->fetched;
		dhit = counters[i].hit - prev->hit;
		dchanged = counters[i].changed - prev->changed;
		dindex = counters[i].index_rows - prev->index_rows;
		if (dfetched < 0 || dhit < 0 || dchanged < 0 || dindex < 0)
		{
			/* pg_stat_reset() and friends: counting restarted from zero */
			dfetched = counters[i].fetched;
			dhit = counters[i].hit;
			dchanged = counters[i].changed;
			dindex = Max(counters[i].index_rows, 0);
		}
		if (dfetched == 0 && dhit == 0 && dchanged == 0 && dindex == 0)
			continue;

		tsm_relmap_request(counters[i].key.dbid, false);
		if (!tsm_relmap_lookup(counters[i].key.dbid, counters[i].key.relid,
							   &spcoid, &is_index))
		{
			if (OidIsValid(counters[i].key.dbid))
			{
				/* keep prev: the blocks wait until the map knows the relation */
				tsm_relmap_request(counters[i].key.dbid, true);
				unattributed += dfetched;
				continue;
			}
			spcoid = GLOBALTABLESPACE_OID;	/* shared catalogs live there */
		}
		prev->fetched = counters[i].fetched;
		prev->hit = counters[i].hit;
		prev->changed = counters[i].changed;
		prev->index_rows = counters[i].index_rows;
		if (dfetched - dhit > 0 || dchanged > 0 || dindex > 0)
		{
			recent[nrecent].dbid = counters[i].key.dbid;
			recent[nrecent].relid = counters[i].key.relid;
			recent[nrecent].spcoid = spcoid;
			recent[nrecent].blocks_read = Max(dfetched - dhit, 0);
			recent[nrecent].rows_changed = dchanged;
			recent[nrecent].index_rows = dindex;
			nrecent++;
		}
		slot = find_tablespace(spcs, nspcs, spcoid);
		if (slot < 0)
			continue;			/* a tablespace dropped since */
		if (is_index)
		{
			spcs[slot].window.index_read += dfetched - dhit;
			spcs[slot].window.index_hit += dhit;
		}
		else
		{
			spcs[slot].window.data_read += dfetched - dhit;
			spcs[slot].window.data_hit += dhit;
		}
	}

	/* after the loop: it held the relmap lock (no two monitor locks at once) */
	{
		Oid		   *followed = palloc(Max(nspcs, 1) * sizeof(Oid));

		for (int i = 0; i < nspcs; i++)
			followed[i] = spcs[i].spcoid;
		tsm_recent_feed(recent, nrecent, now, followed, nspcs);
		pfree(followed);
	}

	/* forget relations whose statistics were dropped, here and there */
	pfree(recent);
	recent = palloc(Max(hash_get_num_entries(rel_prev), 1) * sizeof(TsmRecentSample));
	nrecent = 0;
	hash_seq_init(&seq, rel_prev);
	while ((prev = hash_seq_search(&seq)) != NULL)
		if (prev->seen_in_pass != relation_pass)
		{
			recent[nrecent].dbid = prev->key.dbid;
			recent[nrecent++].relid = prev->key.relid;
			hash_search(rel_prev, &prev->key, HASH_REMOVE, NULL);
		}
	tsm_recent_forget(recent, nrecent);
	pfree(recent);
	pfree(counters);
	return unattributed;
}

/* ---- one sample -------------------------------------------------------- */

static void
init_sampler_state(void)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(TsmRelKey);
	ctl.entrysize = sizeof(TsmRelPrev);
	ctl.hcxt = TopMemoryContext;
	rel_prev = hash_create("pg_tsmove relation counters", 1024, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = TSM_DEVICE_NAME_LEN;
	ctl.entrysize = sizeof(TsmDevicePrev);
	ctl.hcxt = TopMemoryContext;
	device_prev = hash_create("pg_tsmove device counters", 32, &ctl,
							  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/*
 * Device counters of this sample: for each tablespace whose device is
 * known, the device's counters since the previous sample (deltas[i]) and
 * the iostat rates they give.  Devices are counted once however many
 * tablespaces share them.
 */
static void
sample_devices(TsmTablespaceIo *spcs, int nspcs, TsmDiskStats *deltas,
			   bool have_window, double seconds)
{
	int			ndisk;
	TsmDiskLine *disk = read_diskstats(&ndisk);
	HASH_SEQ_STATUS seq;
	TsmDevicePrev *dev;

	device_pass++;
	for (int d = 0; d < ndisk; d++)
	{
		bool		wanted = false;
		bool		found;
		TsmDiskStats delta;

		for (int i = 0; i < nspcs && !wanted; i++)
			wanted = spcs[i].device.valid &&
				strcmp(spcs[i].device.name, disk[d].name) == 0;
		if (!wanted)
			continue;
		dev = hash_search(device_prev, disk[d].name, HASH_ENTER, &found);
		dev->seen_in_pass = device_pass;
		if (found && have_window)
		{
			delta = diskstats_delta(&disk[d].stats, &dev->stats);
			for (int i = 0; i < nspcs; i++)
			{
				if (!spcs[i].device.valid ||
					strcmp(spcs[i].device.name, disk[d].name) != 0)
					continue;
				deltas[i] = delta;
				spcs[i].rates = diskstats_rates(&delta, seconds);
				spcs[i].rates_valid = true;
			}
		}
		dev->stats = disk[d].stats;
	}
	hash_seq_init(&seq, device_prev);
	while ((dev = hash_seq_search(&seq)) != NULL)
		if (dev->seen_in_pass != device_pass)
			hash_search(device_prev, dev->name, HASH_REMOVE, NULL);
	pfree(disk);
}

/*
 * tsm_io_sample
 *		Take one sample and publish it; called by the sampler only.
 *
 * Takes the io lock exclusively to publish (after the statistics hash and
 * the relation map have been read and released), then hands the window
 * to the history.  Allocates in CurrentMemoryContext, which the caller
 * resets after each sample.
 */
void
tsm_io_sample(TimestampTz now)
{
	TsmTablespaceIo *spcs = palloc0(TSM_MAX_TABLESPACES * sizeof(TsmTablespaceIo));
	TsmDiskStats *deltas = palloc0(TSM_MAX_TABLESPACES * sizeof(TsmDiskStats));
	int			nspcs;
	bool		baseline = (rel_prev == NULL);
	bool		have_window;
	double		seconds;
	int64		unattributed;

	if (baseline)
		init_sampler_state();
	have_window = !baseline && prev_sample_time > 0 && now > prev_sample_time;
	seconds = have_window ? (now - prev_sample_time) / 1000000.0 : 0.0;

	nspcs = list_tablespaces(spcs, TSM_MAX_TABLESPACES);
	for (int i = 0; i < nspcs; i++)
	{
		TsmTablespaceIo *s = &spcs[i];
		struct statvfs fs;

		tsm_resolve_device(s->path, &s->device);
		s->free_bytes = -1;
		s->fs_bytes = -1;
		if (statvfs(s->path, &fs) == 0)
		{
			s->free_bytes = (int64) fs.f_bavail * fs.f_frsize;
			s->fs_bytes = (int64) fs.f_blocks * fs.f_frsize;
		}
		s->window_start = have_window ? prev_sample_time : 0;
		s->window_end = now;
	}
	sample_devices(spcs, nspcs, deltas, have_window, seconds);

	unattributed = attribute_logical_io(spcs, nspcs, baseline, now);
	if (!have_window)
	{
		for (int i = 0; i < nspcs; i++)
			memset(&spcs[i].window, 0, sizeof(TsmLogicalCounts));
	}

	/* publish: carry each tablespace's totals over and add this window */
	LWLockAcquire(tsm_io->lock, LW_EXCLUSIVE);
	for (int i = 0; i < nspcs; i++)
	{
		int			old = find_tablespace(tsm_io->tablespaces, tsm_io->ntablespaces,
										  spcs[i].spcoid);

		if (old >= 0)
		{
			spcs[i].total = tsm_io->tablespaces[old].total;
			spcs[i].device_total = tsm_io->tablespaces[old].device_total;
		}
		spcs[i].total.data_read += spcs[i].window.data_read;
		spcs[i].total.data_hit += spcs[i].window.data_hit;
		spcs[i].total.index_read += spcs[i].window.index_read;
		spcs[i].total.index_hit += spcs[i].window.index_hit;
		spcs[i].device_total.reads += deltas[i].reads;
		spcs[i].device_total.read_sectors += deltas[i].read_sectors;
		spcs[i].device_total.writes += deltas[i].writes;
		spcs[i].device_total.write_sectors += deltas[i].write_sectors;
	}
	memcpy(tsm_io->tablespaces, spcs, nspcs * sizeof(TsmTablespaceIo));
	tsm_io->ntablespaces = nspcs;
	tsm_io->last_sample = now;
	tsm_io->unattributed_blocks = unattributed;
	tsm_io->sampler_pid = MyProcPid;
	LWLockRelease(tsm_io->lock);

	if (have_window)
		tsm_history_add_window(prev_sample_time, now, spcs, nspcs, deltas);
	prev_sample_time = now;
}

/* The sampler is exiting: readers should not wait for it. */
void
tsm_io_sampler_exit(void)
{
	if (tsm_io == NULL)
		return;
	LWLockAcquire(tsm_io->lock, LW_EXCLUSIVE);
	tsm_io->sampler_pid = 0;
	LWLockRelease(tsm_io->lock);
}

/* ---- shared memory ----------------------------------------------------- */

Size
tsm_io_shmem_size(void)
{
	return sizeof(TsmIoShared);
}

/* Create or attach TsmIoShared; returns whether it existed already. */
bool
tsm_io_shmem_init(void)
{
	bool		found;

	tsm_io = ShmemInitStruct("pg_tsmove tablespace io", sizeof(TsmIoShared), &found);
	if (found)
		return true;
	memset(tsm_io, 0, sizeof(TsmIoShared));
	tsm_io->lock = tsm_monitor_lock(TSM_LOCK_IO);
	tsm_io->stats_reset = GetCurrentTimestamp();
	return false;
}

/*
 * Write the totals of every tablespace to the monitoring file (postmaster,
 * at shutdown: no lock).  Returns false on a write error.
 */
bool
tsm_io_write(FILE *file)
{
	int32		n = tsm_io->ntablespaces;

	if (fwrite(&tsm_io->stats_reset, sizeof(TimestampTz), 1, file) != 1 ||
		fwrite(&n, sizeof(int32), 1, file) != 1)
		return false;
	for (int i = 0; i < n; i++)
	{
		TsmTablespaceIo *s = &tsm_io->tablespaces[i];

		if (fwrite(&s->spcoid, sizeof(Oid), 1, file) != 1 ||
			fwrite(&s->total, sizeof(TsmLogicalCounts), 1, file) != 1 ||
			fwrite(&s->device_total, sizeof(TsmDiskStats), 1, file) != 1)
			return false;
	}
	return true;
}

/*
 * Read the totals back (postmaster, at start-up).  The tablespaces have no
 * device and no window until the sampler's first sample, which carries
 * the totals on by tablespace OID.
 */
bool
tsm_io_read(FILE *file)
{
	int32		n;

	if (fread(&tsm_io->stats_reset, sizeof(TimestampTz), 1, file) != 1 ||
		fread(&n, sizeof(int32), 1, file) != 1 || n < 0 || n > TSM_MAX_TABLESPACES)
		return false;
	for (int i = 0; i < n; i++)
	{
		TsmTablespaceIo *s = &tsm_io->tablespaces[i];

		memset(s, 0, sizeof(*s));
		if (fread(&s->spcoid, sizeof(Oid), 1, file) != 1 ||
			fread(&s->total, sizeof(TsmLogicalCounts), 1, file) != 1 ||
			fread(&s->device_total, sizeof(TsmDiskStats), 1, file) != 1)
			return false;
		snprintf(s->device.note, sizeof(s->device.note), "not sampled since the restart");
		tsm_io->ntablespaces = i + 1;
	}
	return true;
}

/* ---- SQL functions ----------------------------------------------------- */

#define TSM_IO_COLS 33

/*
 * tsmove.tablespace_io_stats() RETURNS SETOF record
 *		One row per tablespace directory the sampler saw at its last sample:
 *		device, logical rates of the last window and totals, device rates
 *		and totals.  Thin data behind the tsmove.tablespace_io view.
 *
 * Takes the io lock shared while copying.  Granted to pg_monitor.
 */
Datum
tsm_tablespace_io_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TsmTablespaceIo *copy;
	int			n;
	TimestampTz reset;

	tsm_monitor_require_preload();
	InitMaterializedSRF(fcinfo, 0);

	copy = palloc(sizeof(TsmTablespaceIo) * TSM_MAX_TABLESPACES);
	LWLockAcquire(tsm_io->lock, LW_SHARED);
	n = tsm_io->ntablespaces;
	memcpy(copy, tsm_io->tablespaces, n * sizeof(TsmTablespaceIo));
	reset = tsm_io->stats_reset;
	LWLockRelease(tsm_io->lock);

	for (int i = 0; i < n; i++)
	{
		TsmTablespaceIo *s = &copy[i];
		Datum		values[TSM_IO_COLS];
		bool		nulls[TSM_IO_COLS];
		int			c = 0;
		bool		have_window = (s->window_start != 0);
		double		seconds = have_window ?
			(s->window_end - s->window_start) / 1000000.0 : 0.0;
		char		numbers[32];

		memset(nulls, 0, sizeof(nulls));
		values[c++] = ObjectIdGetDatum(s->spcoid);
		values[c++] = CStringGetTextDatum(s->path);
		/* device */
		if (s->device.valid)
		{
			snprintf(numbers, sizeof(numbers), "%u:%u", s->device.major, s->device.minor);
			values[c++] = CStringGetTextDatum(s->device.name);
			values[c++] = CStringGetTextDatum(numbers);
			values[c++] = CStringGetTextDatum(s->device.disks);
		}
		else
		{
			nulls[c++] = true;
			nulls[c++] = true;
			nulls[c++] = true;
		}
		if (s->device.note[0])
			values[c++] = CStringGetTextDatum(s->device.note);
		else
			nulls[c++] = true;
		if (s->device.rotational_known)
			values[c++] = BoolGetDatum(s->device.rotational);
		else
			nulls[c++] = true;
		if (s->free_bytes >= 0)
		{
			values[c++] = Int64GetDatum(s->free_bytes);
			values[c++] = Int64GetDatum(s->fs_bytes);
		}
		else
		{
			nulls[c++] = true;
			nulls[c++] = true;
		}
		/* the window */
		if (have_window)
		{
			values[c++] = TimestampTzGetDatum(s->window_start);
			values[c++] = TimestampTzGetDatum(s->window_end);
			values[c++] = Float8GetDatum(seconds);
			values[c++] = Float8GetDatum(s->window.data_read / seconds);
			values[c++] = Float8GetDatum(s->window.data_hit / seconds);
			values[c++] = Float8GetDatum(s->window.index_read / seconds);
			values[c++] = Float8GetDatum(s->window.index_hit / seconds);
		}
		else
		{
			for (int k = 0; k < 7; k++)
				nulls[c++] = true;
		}
		values[c++] = Int64GetDatum(s->total.data_read);
		values[c++] = Int64GetDatum(s->total.data_hit);
		values[c++] = Int64GetDatum(s->total.index_read);
		values[c++] = Int64GetDatum(s->total.index_hit);
		/* the device */
		if (s->rates_valid)
		{
			values[c++] = Float8GetDatum(s->rates.reads_s);
			values[c++] = Float8GetDatum(s->rates.writes_s);
			values[c++] = Float8GetDatum(s->rates.read_kb_s);
			values[c++] = Float8GetDatum(s->rates.write_kb_s);
			values[c++] = Float8GetDatum(s->rates.r_await_ms);
			values[c++] = Float8GetDatum(s->rates.w_await_ms);
			values[c++] = Float8GetDatum(s->rates.queue_size);
			values[c++] = Float8GetDatum(s->rates.util_pct);
		}
		else
		{
			for (int k = 0; k < 8; k++)
				nulls[c++] = true;
		}
		if (s->device.valid)
		{
			values[c++] = Int64GetDatum((int64) s->device_total.reads);
			values[c++] = Int64GetDatum((int64) s->device_total.writes);
			values[c++] = Int64GetDatum((int64) (s->device_total.read_sectors / 2));
			values[c++] = Int64GetDatum((int64) (s->device_total.write_sectors / 2));
		}
		else
		{
			for (int k = 0; k < 4; k++)
				nulls[c++] = true;
		}
		values[c++] = TimestampTzGetDatum(reset);
		Assert(c == TSM_IO_COLS);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * tsmove.tablespace_io_reset() RETURNS timestamptz
 *		Zero the totals of tsmove.tablespace_io; returns the reset time.
 *
 * Takes the io lock exclusively.  Revoked from PUBLIC.
 */
Datum
tsm_tablespace_io_reset(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();

	tsm_monitor_require_preload();
	LWLockAcquire(tsm_io->lock, LW_EXCLUSIVE);
	for (int i = 0; i < tsm_io->ntablespaces; i++)
	{
		memset(&tsm_io->tablespaces[i].total, 0, sizeof(TsmLogicalCounts));
		memset(&tsm_io->tablespaces[i].device_total, 0, sizeof(TsmDiskStats));
	}
	tsm_io->stats_reset = now;
	LWLockRelease(tsm_io->lock);
	PG_RETURN_TIMESTAMPTZ(now);
}
