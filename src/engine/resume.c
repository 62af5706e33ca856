/*-------------------------------------------------------------------------
 *
 * resume.c
 *	  Resume points of relation moves: what lets a paused move, or one a
 *	  restart or crash interrupted, go on where it was instead of from
 *	  block 0.
 *
 * A resume point is a file, $PGDATA/pg_tsmove/<database>_<job>.resume,
 * holding resume_lsn, the job's new relfilenodes and, for each file of the
 * job, its copy cursor, the source length last seen and the blocks marked
 * dirty and not copied again yet.  The worker (worker.c) makes one right
 * after prepare and then every pg_tsmove.resume_interval, in this order:
 *	1. read the WAL up to resume_lsn (every change before it is in the
 *	   dirty sets);
 *	2. fsync the new files: every block below a cursor is on disk, as
 *	   copied (a checkpoint does not sync them; crash recovery replays only
 *	   the page images after the checkpoint's redo point);
 *	3. write the file under a temporary name, fsync it, rename() it over
 *	   the old one, fsync the directory (durable_rename);
 *	4. move the job's persistent replication slot to resume_lsn, so the
 *	   WAL from there on stays.
 * To resume, the worker loads the file into the job's file set and reads
 * the WAL from resume_lsn again: a block changed after its copy is marked
 * dirty once more (a change already in a copy is marked too: one copy
 * more, never one less).  Blocks written after the resume point are
 * simply written again.
 *
 * The file's content is CRC-checked; a point that does not check out is
 * no point (the move fails, its files dropped).  Only the worker of the
 * job writes its file.  The job's slot is pg_tsmove_<database>_<job>.
 *
 * Orphans: the recovery pass (recovery.c) removes the slots and files of
 * jobs that ended or no longer exist, and, in a database whose pg_tsmove
 * was dropped (the job table with it), also the new relfilenodes the file
 * names: it is then their only record.  The launcher removes the slots
 * and files of databases that no longer exist.
 *
 * Locks: ReplicationSlotControlLock, shared, to list slots.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "port/pg_crc32c.h"
#include "replication/slot.h"
#include "storage/fd.h"

#include "jobs/durable_file.h"
#include "engine/relation_storage.h"
#include "engine/resume.h"

#define TSM_RESUME_DIR "pg_tsmove"
#define TSM_RESUME_MAGIC 0x54534d52	/* "TSMR" */
#define TSM_RESUME_VERSION 1

typedef struct ResumeHeader
{
	uint32		magic;
	uint32		version;
	int64		job_id;
	XLogRecPtr	resume_lsn;
	Oid			target_spc;		/* the new storage: for orphan removal */
	int32		nnew;
	TsmRelFileNumber new_nodes[TSM_MAX_MEMBERS];
	int32		nfiles;
} ResumeHeader;

typedef struct ResumeFileEntry
{
	TsmFileKey	key;
	int32		owner;
	BlockNumber copy_cursor;
	BlockNumber nblocks;
	uint32		ndirtywords;	/* followed by that many uint64 */
} ResumeFileEntry;

static void
resume_path(char *path, Oid dbid, int64 job_id)
{
	snprintf(path, MAXPGPATH, "%s/%u_%lld.resume", TSM_RESUME_DIR, dbid,
			 (long long) job_id);
}

static void
append(StringInfo buf, const void *data, int len)
{
	appendBinaryStringInfo(buf, data, len);
}

/*
 * Write the resume point of the job's files at resume_lsn, durably.  The
 * caller has read the WAL to resume_lsn and fsynced the new files.
 */
void
tsm_resume_write(Oid dbid, int64 job_id, XLogRecPtr resume_lsn, TsmFileSet *fs,
				 Oid target_spc, int nnew, const TsmRelFileNumber *new_nodes)
{
	char		path[MAXPGPATH];
	StringInfoData buf;
	ResumeHeader header;
	pg_crc32c	crc;

	initStringInfo(&buf);
	memset(&header, 0, sizeof(header));
	header.magic = TSM_RESUME_MAGIC;
	header.version = TSM_RESUME_VERSION;
	header.job_id = job_id;
	header.resume_lsn = resume_lsn;
	header.target_spc = target_spc;
	header.nnew = Min(nnew, TSM_MAX_MEMBERS);
	memcpy(header.new_nodes, new_nodes, sizeof(TsmRelFileNumber) * header.nnew);
	header.nfiles = fs->nfiles;
	append(&buf, &header, sizeof(header));
	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		ResumeFileEntry entry;

		memset(&entry, 0, sizeof(entry));
		entry.key = f->key;
		entry.owner = f->owner;
		entry.copy_cursor = f->copy_cursor;
		entry.nblocks = f->nblocks;
		entry.ndirtywords = f->dirty.count > 0 ? f->dirty.nwords : 0;
		append(&buf, &entry, sizeof(entry));
		if (entry.ndirtywords > 0)
			append(&buf, f->dirty.words, sizeof(uint64) * entry.ndirtywords);
	}
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, buf.data, buf.len);
	FIN_CRC32C(crc);
	append(&buf, &crc, sizeof(crc));

	if (MakePGDirectory(TSM_RESUME_DIR) < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", TSM_RESUME_DIR)));
	resume_path(path, dbid, job_id);
	tsm_write_file_durably(path, buf.data, buf.len);
	pfree(buf.data);
}

/*
 * Load the job's resume point into fs, whose files must already be in it
 * (the same files, by key); returns resume_lsn, or InvalidXLogRecPtr if
 * there is no usable point (none, or it does not check out).
 */
/*
 * The content of a resume point file, checked; NULL if there is none or it
 * does not check out.  *header gets its header.
 */
static char *
resume_load(const char *path, int64 job_id, ResumeHeader *header)
{
	int			fd;
	struct stat st;
	char	   *data;
	pg_crc32c	crc;
	pg_crc32c	stored;

	fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_size < sizeof(ResumeHeader) + sizeof(pg_crc32c))
	{
		CloseTransientFile(fd);
		return NULL;
	}
	data = palloc(st.st_size);
	if (read(fd, data, st.st_size) != st.st_size)
	{
		CloseTransientFile(fd);
		pfree(data);
		return NULL;
	}
	CloseTransientFile(fd);

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, data, st.st_size - sizeof(pg_crc32c));
	FIN_CRC32C(crc);
	memcpy(&stored, data + st.st_size - sizeof(pg_crc32c), sizeof(stored));
	memcpy(header, data, sizeof(*header));
	if (!EQ_CRC32C(crc, stored) || header->magic != TSM_RESUME_MAGIC ||
		header->version != TSM_RESUME_VERSION || header->job_id != job_id ||
		header->nnew < 0 || header->nnew > TSM_MAX_MEMBERS)
	{
		ereport(LOG,
				(errmsg("pg_tsmove: ignoring resume point \"%s\": it does not check out", path)));
		pfree(data);
		return NULL;
	}
	return data;
}

XLogRecPtr
tsm_resume_read(Oid dbid, int64 job_id, TsmFileSet *fs)
{
	char		path[MAXPGPATH];
	char	   *data;
	char	   *p;
	ResumeHeader header;

	resume_path(path, dbid, job_id);
	data = resume_load(path, job_id, &header);
	if (data == NULL)
		return InvalidXLogRecPtr;

	p = data + sizeof(header);
	for (int i = 0; i < header.nfiles; i++)
	{
		ResumeFileEntry entry;
		TsmFile    *f;

		memcpy(&entry, p, sizeof(entry));
		p += sizeof(entry);
		f = tsm_fileset_find(fs, entry.key.node, entry.key.fork);
		if (f == NULL || f->owner != entry.owner)
		{
			ereport(LOG,
					(errmsg("pg_tsmove: ignoring resume point \"%s\": its files are not the job's", path)));
			pfree(data);
			return InvalidXLogRecPtr;
		}
		tsm_file_set_extent(fs, f, entry.nblocks, entry.copy_cursor);
		for (uint32 w = 0; w < entry.ndirtywords; w++)
		{
			uint64		word;

			memcpy(&word, p + w * sizeof(uint64), sizeof(word));
			for (int bit = 0; word != 0 && bit < 64; bit++)
				if (word & (UINT64CONST(1) << bit))
					tsm_file_mark_dirty(fs, f, w * 64 + bit);
		}
		p += sizeof(uint64) * entry.ndirtywords;
	}
	pfree(data);
	return header.resume_lsn;
}

/* Whether the job has a resume point file. */
bool
tsm_resume_exists(Oid dbid, int64 job_id)
{
	char		path[MAXPGPATH];

	resume_path(path, dbid, job_id);
	return access(path, F_OK) == 0;
}

/* Remove the job's resume point, if any. */
void
tsm_resume_forget(Oid dbid, int64 job_id)
{
	char		path[MAXPGPATH];

	resume_path(path, dbid, job_id);
	if (unlink(path) < 0 && errno != ENOENT)
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
}

/* The name of the persistent replication slot of a job. */
void
tsm_resume_slot_name(char *name, Oid dbid, int64 job_id)
{
	snprintf(name, NAMEDATALEN, "pg_tsmove_%u_%lld", dbid, (long long) job_id);
}

/*
 * Whether name is the name of a job's slot; if so, its database and job.
 */
bool
tsm_resume_parse_slot_name(const char *name, Oid *dbid, int64 *job_id)
{
	unsigned int db;
	long long	job;
	int			consumed = 0;

	if (sscanf(name, "pg_tsmove_%u_%lld%n", &db, &job, &consumed) != 2 ||
		name[consumed] != '\0')
		return false;
	*dbid = db;
	*job_id = job;
	return true;
}

/* The names of the inactive pg_tsmove slots, with what they retain. */
typedef struct ResumeSlot
{
	char		name[NAMEDATALEN];
	Oid			dbid;
	int64		job_id;
	uint64		retained;		/* bytes of WAL */
} ResumeSlot;

static List *
inactive_job_slots(void)
{
	List	   *slots = NIL;
	XLogRecPtr	insert = GetXLogInsertRecPtr();

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (int i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *slot = &ReplicationSlotCtl->replication_slots[i];
		ResumeSlot	rs;
		bool		active;

		if (!slot->in_use)
			continue;
		SpinLockAcquire(&slot->mutex);
		strlcpy(rs.name, NameStr(slot->data.name), NAMEDATALEN);
		active = tsm_slot_active(slot);
		rs.retained = XLogRecPtrIsInvalid(slot->data.restart_lsn) ? 0 :
			insert - slot->data.restart_lsn;
		SpinLockRelease(&slot->mutex);
		if (!active && tsm_resume_parse_slot_name(rs.name, &rs.dbid, &rs.job_id))
		{
			ResumeSlot *copy = palloc(sizeof(ResumeSlot));

			*copy = rs;
			slots = lappend(slots, copy);
		}
	}
	LWLockRelease(ReplicationSlotControlLock);
	return slots;
}

/*
 * Drop a job's slot if it exists and nobody uses it; log it.  Only slots
 * of jobs no worker can take up again come here, so none is acquired
 * between the look and the drop.
 */
static void
drop_job_slot(const char *name, const char *why)
{
	ReplicationSlot *slot;
	bool		idle = false;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		idle = !tsm_slot_active(slot);
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	if (!idle)
		return;
	tsm_drop_slot(name);
	ereport(LOG,
			(errmsg("pg_tsmove: dropped replication slot \"%s\": %s", name, why)));
}

/*
 * In the recovery worker of database dbid, in a transaction: remove the
 * slots and resume point files of jobs that are not unfinished (ended,
 * purged, or never there), by is_unfinished, or of every job if pg_tsmove
 * is not installed here (is_unfinished NULL); then also the new storage a
 * file names, which nothing else records any more.
 */
void
tsm_resume_remove_orphans(Oid dbid, bool (*is_unfinished) (int64 job_id))
{
	ListCell   *lc;
	DIR		   *dir;
	struct dirent *de;
	char		prefix[32];

	foreach(lc, inactive_job_slots())
	{
		ResumeSlot *rs = lfirst(lc);

		if (rs->dbid == dbid && (is_unfinished == NULL || !is_unfinished(rs->job_id)))
			drop_job_slot(rs->name, is_unfinished ? "its job has ended" :
						  "pg_tsmove is no longer installed in its database");
	}

	snprintf(prefix, sizeof(prefix), "%u_", dbid);
	dir = AllocateDir(TSM_RESUME_DIR);
	while (dir != NULL && (de = ReadDir(dir, TSM_RESUME_DIR)) != NULL)
	{
		long long	job;
		int			consumed = 0;
		char		path[MAXPGPATH];
		ResumeHeader header;
		char	   *data;

		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 ||
			sscanf(de->d_name + strlen(prefix), "%lld.resume%n", &job, &consumed) != 1 ||
			de->d_name[strlen(prefix) + consumed] != '\0')
			continue;
		if (is_unfinished != NULL && is_unfinished(job))
			continue;
		resume_path(path, dbid, job);
		data = (is_unfinished == NULL) ? resume_load(path, job, &header) : NULL;
		Assert(dbid == MyDatabaseId);
		if (data != NULL)
			tsm_drop_storage_set(header.target_spc, header.new_nodes, header.nnew);
		if (data != NULL && header.nnew > 0)
			(void) GetCurrentTransactionId();	/* the commit record drops them */
		tsm_resume_forget(dbid, job);
		ereport(LOG,
				(errmsg("pg_tsmove: removed the resume point of job %lld of database %u%s",
						job, dbid, data != NULL ? ", and its new files" : "")));
	}
	if (dir != NULL)
		FreeDir(dir);
}

/*
 * In the launcher: remove the slots and resume point files of databases
 * not in dbids (dropped), and return the databases in which a job's slot
 * waits with more WAL than pg_tsmove.max_retained_wal, for a recovery pass
 * to fail that job.
 */
List *
tsm_resume_check_slots(List *dbids)
{
	List	   *over_limit = NIL;
	ListCell   *lc;
	uint64		limit = (uint64) tsm_max_retained_wal_mb * 1024 * 1024;

	foreach(lc, inactive_job_slots())
	{
		ResumeSlot *rs = lfirst(lc);

		if (!list_member_oid(dbids, rs->dbid))
		{
			drop_job_slot(rs->name, "its database no longer exists");
			tsm_resume_forget(rs->dbid, rs->job_id);
		}
		else if (rs->retained > limit)
			over_limit = list_append_unique_oid(over_limit, rs->dbid);
	}
	return over_limit;
}

/* Whether the job's slot exists and keeps no more WAL than allowed; why not. */
bool
tsm_resume_slot_usable(Oid dbid, int64 job_id, const char **why)
{
	char		name[NAMEDATALEN];
	ReplicationSlot *slot;
	XLogRecPtr	restart_lsn = InvalidXLogRecPtr;
	bool		invalidated = false;

	tsm_resume_slot_name(name, dbid, job_id);
	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	slot = SearchNamedReplicationSlot(name, false);
	if (slot != NULL)
	{
		SpinLockAcquire(&slot->mutex);
		restart_lsn = slot->data.restart_lsn;
		invalidated = tsm_slot_invalidated(slot);
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(ReplicationSlotControlLock);
	if (slot == NULL)
		*why = "its replication slot is gone";
	else if (invalidated || XLogRecPtrIsInvalid(restart_lsn))
		*why = "its replication slot lost its WAL (max_slot_wal_keep_size)";
	else if (GetXLogInsertRecPtr() - restart_lsn > (uint64) tsm_max_retained_wal_mb * 1024 * 1024)
		*why = "its replication slot kept more than pg_tsmove.max_retained_wal";
	else
		return true;
	return false;
}

/* Drop the job's slot, if nobody uses it. */
void
tsm_resume_drop_slot(Oid dbid, int64 job_id)
{
	char		name[NAMEDATALEN];

	tsm_resume_slot_name(name, dbid, job_id);
	drop_job_slot(name, "its job has ended");
}
