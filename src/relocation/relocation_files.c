/*-------------------------------------------------------------------------
 *
 * relocation_files.c
 *	  Listing and copying the files of a tablespace relocation: the sink
 *	  that writes them under the new location, the lookup of the relation
 *	  that owns each file, prepare and guard of the relocation's front
 *	  end, and the plain copies of files the set does not know.
 *
 * A relocation moves a whole tablespace to a new directory while it is in
 * use: ALTER TABLESPACE ... SET LOCATION, online.  The tablespace keeps its
 * OID, its name and every relfilenode; only the link pg_tblspc/<oid>
 * changes.  Design (DESIGN.md section 5); the four files of the relocation
 * and which calls which are in relocation_internal.h.  This one calls none
 * of the other three.
 *
 * Files.  Everything under <old>/PG_15_<catversion>/<database>/ is listed
 * and copied, in every database, to the same name under the new location,
 * with plain file I/O (the sink below): no WAL, the page images need none
 * (a standby's files are its own; crash safety comes from fsync before the
 * link changes).  Pages are read through shared buffers, so the copy holds
 * changes not yet written.  The mirror (mirror.c) follows the tablespace:
 * changed blocks, new files, truncations and drops; CREATE/DROP DATABASE
 * and DROP TABLESPACE records that name it end the job.
 *
 * Locks.  Files are named by relfilenode; locks name relation OIDs, in each
 * database.  relocation_dbcatalog.c reads each database's pg_class to map
 * one to the other ("resolution").  A batch of a file's blocks is read only
 * under AccessShareLock on its relation (taken by tag, without waiting: a
 * busy relation is copied later), after which the worker reads the WAL: a
 * drop or truncation committed before the lock is seen, so no block of a
 * dropped file is ever loaded into shared buffers.  A file whose relation
 * is not known yet (created by a transaction that has not committed) is
 * not read.  The job holds a session ExclusiveLock on the tablespace
 * object, so a second relocation of it, in any database, is refused.
 *
 * How each file is copied.  Permanent relations: the main fork and the VM
 * are followed block by block (a heap record on block b dirties VM block
 * b / HEAPBLOCKS_PER_PAGE: VM clears carry no block reference of the VM);
 * the FSM is copied once and again whole after a truncation: it holds
 * hints only, and vacuum corrects them.  Unlogged relations: the init fork
 * is copied once (it never changes); the other forks are copied whole
 * under the switch's locks, since their changes are not in the WAL (the
 * job counts those blocks in blocks_under_lock).
 *
 * Relfilenode tombstones.  A dropped relation's first segment stays, empty,
 * until the next checkpoint, so that its relfilenode is not reused while
 * the checkpointer still has to unlink it.  The copy keeps the same
 * tombstones (remove() truncates instead of deleting), because after the
 * switch the checkpointer unlinks them through the new link.
 *
 * What crash recovery would replay.  It replays XLOG_TBLSPC_CREATE, which
 * points the link at the location the tablespace was created with: if that
 * record is after the last checkpoint's redo point, a crash after the
 * switch would undo it.  So prepare looks for the record in the WAL since
 * that checkpoint, and if it is there asks for a checkpoint; the switch
 * waits until one completed (relocation_switch.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "catalog/catalog.h"
#include "catalog/pg_control.h"
#include "catalog/pg_database.h"
#include "catalog/pg_tablespace.h"
#include "commands/tablespace.h"
#include "common/controldata_utils.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgwriter.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/reinit.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "relocation/relocation_dbcatalog.h"
#include "jobs/local_jobs.h"
#include "relocation/relocation_holders.h"
#include "relocation/relocation_internal.h"
#include "relocation/relocation_marks.h"
#include "jobs/submit.h"

/* How often unresolved files are looked up again while copying. */
#define TSM_RESOLVE_INTERVAL_MS 1000

/* tsm_copy_plain_file writes here first; tsm_copy_stragglers removes
 * leftovers. */
#define TSM_TEMPORARY_COPY_SUFFIX ".tsmove_tmp"

static const TsmFileSetOps relocation_sink;

/* ---- the sink: plain files under the new location ---- */

/* Path of one segment of a file, under dir (the old or the new one). */
void
tsm_reloc_segment_path(char *path, const char *dir, TsmFile *f, int segno)
{
	char		segsuffix[16] = "";

	if (segno > 0)
		snprintf(segsuffix, sizeof(segsuffix), ".%d", segno);
	if (f->key.fork == MAIN_FORKNUM)
		snprintf(path, MAXPGPATH, "%s/%u/%u%s", dir, TSM_DB(f->key.node),
				 TSM_REL(f->key.node), segsuffix);
	else
		snprintf(path, MAXPGPATH, "%s/%u/%u_%s%s", dir, TSM_DB(f->key.node),
				 TSM_REL(f->key.node), forkNames[f->key.fork], segsuffix);
}

static RelocDb *
reloc_db(TsmRelocation *st, Oid dbid)
{
	ListCell   *lc;
	RelocDb    *db;
	MemoryContext oldcxt;

	foreach(lc, st->dbs)
	{
		db = (RelocDb *) lfirst(lc);
		if (db->dbid == dbid)
			return db;
	}
	oldcxt = MemoryContextSwitchTo(GetMemoryChunkContext(st));
	db = palloc0(sizeof(RelocDb));
	db->dbid = dbid;
	db->exists = true;
	st->dbs = lappend(st->dbs, db);
	MemoryContextSwitchTo(oldcxt);
	return db;
}

/* The database's directory under the new location, made once. */
void
tsm_reloc_make_db_dir(TsmRelocation *st, Oid dbid)
{
	RelocDb    *db = reloc_db(st, dbid);
	char		path[MAXPGPATH];

	if (db->new_dir_made)
		return;
	snprintf(path, sizeof(path), "%s/%u", st->new_dir, dbid);
	if (MakePGDirectory(path) < 0 && errno != EEXIST)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", path)));
	db->new_dir_made = true;
}

/* The copy's segment segno, opened (and created if create). */
static File
open_segment(TsmFileSet *fs, TsmFile *f, int segno, bool create)
{
	RelocFile  *rf = tsm_reloc_file(fs, f);
	char		path[MAXPGPATH];

	if (segno >= rf->nsegs)
	{
		int			nsegs = Max(segno + 1, rf->nsegs * 2);

		rf->segs = rf->segs ?
			repalloc(rf->segs, sizeof(File) * nsegs) :
			MemoryContextAlloc(fs->cxt, sizeof(File) * nsegs);
		memset(rf->segs + rf->nsegs, 0, sizeof(File) * (nsegs - rf->nsegs));
		rf->nsegs = nsegs;
	}
	if (rf->segs[segno] > 0)
		return rf->segs[segno];
	tsm_reloc_segment_path(path, tsm_reloc_state(fs)->new_dir, f, segno);
	rf->segs[segno] = PathNameOpenFile(path, O_RDWR | PG_BINARY | (create ? O_CREAT : 0));
	if (rf->segs[segno] < 0)
	{
		rf->segs[segno] = 0;
		if (!create && errno == ENOENT)
			return -1;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", path)));
	}
	return rf->segs[segno];
}

void
tsm_reloc_close_segments(RelocFile *rf)
{
	for (int i = 0; i < rf->nsegs; i++)
		if (rf->segs[i] > 0)
		{
			FileClose(rf->segs[i]);
			rf->segs[i] = 0;
		}
}

static void
reloc_create(TsmFileSet *fs, TsmFile *f)
{
	File		file;

	tsm_reloc_make_db_dir(tsm_reloc_state(fs), TSM_DB(f->key.node));
	file = open_segment(fs, f, 0, true);
	if (FileTruncate(file, 0, WAIT_EVENT_DATA_FILE_TRUNCATE) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not truncate file \"%s\": %m", FilePathName(file))));
}

static void
reloc_write(TsmFileSet *fs, TsmFile *f, BlockNumber blkno, char *page,
			bool extend)
{
	File		file = open_segment(fs, f, blkno / RELSEG_SIZE, true);
	off_t		offset = (off_t) (blkno % RELSEG_SIZE) * BLCKSZ;
	int			written;

	tsm_page_set_checksum(page, blkno);
	written = FileWrite(file, page, BLCKSZ, offset, WAIT_EVENT_DATA_FILE_WRITE);
	if (written != BLCKSZ)
	{
		if (written >= 0)
			errno = ENOSPC;		/* a short write: as md.c reports it */
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write block %u in file \"%s\": %m",
						blkno, FilePathName(file)),
				 errhint("Check free disk space at the new location.")));
	}
}

static void
reloc_writeback(TsmFileSet *fs, TsmFile *f, BlockNumber first, BlockNumber nblocks)
{
	while (nblocks > 0)
	{
		int			segno = first / RELSEG_SIZE;
		BlockNumber in_seg = Min(nblocks, RELSEG_SIZE - first % RELSEG_SIZE);

		FileWriteback(open_segment(fs, f, segno, true),
					  (off_t) (first % RELSEG_SIZE) * BLCKSZ,
					  (off_t) in_seg * BLCKSZ, WAIT_EVENT_DATA_FILE_FLUSH);
		first += in_seg;
		nblocks -= in_seg;
	}
}

/*
 * The source was truncated: so is the copy, as md.c truncates, segments
 * past the end kept at length zero.
 */
static void
reloc_truncate(TsmFileSet *fs, TsmFile *f, BlockNumber nblocks)
{
	for (int segno = 0;; segno++)
	{
		BlockNumber segstart = (BlockNumber) segno * RELSEG_SIZE;
		File		file = open_segment(fs, f, segno, false);
		off_t		keep;

		if (file < 0)
			break;
		if (nblocks <= segstart)
			keep = 0;
		else if (nblocks - segstart < RELSEG_SIZE)
			keep = (off_t) (nblocks - segstart) * BLCKSZ;
		else
			continue;
		if (FileSize(file) > keep &&
			FileTruncate(file, keep, WAIT_EVENT_DATA_FILE_TRUNCATE) < 0)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not truncate file \"%s\": %m", FilePathName(file))));
	}
}

static void
reloc_sync(TsmFileSet *fs, TsmFile *f)
{
	RelocFile  *rf = tsm_reloc_file(fs, f);

	for (int i = 0; i < rf->nsegs; i++)
		if (rf->segs[i] > 0 && FileSync(rf->segs[i], WAIT_EVENT_DATA_FILE_SYNC) < 0)
			ereport(data_sync_elevel(ERROR),
					(errcode_for_file_access(),
					 errmsg("could not fsync file \"%s\": %m", FilePathName(rf->segs[i]))));
}

/*
 * The source was dropped: so is the copy, as mdunlink does it: the main
 * fork's first segment is kept, empty, as a tombstone until the
 * checkpointer unlinks it; every other file goes at once.
 */
static void
reloc_remove(TsmFileSet *fs, TsmFile *f)
{
	RelocFile  *rf = tsm_reloc_file(fs, f);
	bool		keep_tombstone = (f->key.fork == MAIN_FORKNUM);
	char		path[MAXPGPATH];

	if (keep_tombstone)
		reloc_truncate(fs, f, 0);
	tsm_reloc_close_segments(rf);
	for (int segno = keep_tombstone ? 1 : 0;; segno++)
	{
		tsm_reloc_segment_path(path, tsm_reloc_state(fs)->new_dir, f, segno);
		if (unlink(path) < 0)
			break;
	}
	rf->tombstone = keep_tombstone;
}

/* ---- files and their relations ---- */

/* How a file is copied, once its relation's persistence is known. */
void
tsm_reloc_classify(TsmFileSet *fs, TsmFile *f, Oid relid, char relpersistence)
{
	bool		permanent = (relpersistence == RELPERSISTENCE_PERMANENT);
	TsmCopyWhen when;

	if (!permanent)
		when = f->key.fork == INIT_FORKNUM ? TSM_COPY_TRACKED : TSM_COPY_LOCKED;
	else
		when = f->key.fork == FSM_FORKNUM ? TSM_COPY_ONCE : TSM_COPY_TRACKED;
	f->relid = relid;
	f->standard_page = (f->key.fork == MAIN_FORKNUM);
	tsm_file_set_when(fs, f, when, permanent);
}

/* Add a file of the tablespace to the job; unresolved until looked up. */
TsmFile *
tsm_reloc_add_file(TsmFileSet *fs, TsmRelFileNode node, ForkNumber fork, bool listed)
{
	TsmRelocation *st = tsm_reloc_state(fs);
	TsmFile    *known = tsm_fileset_find(fs, node, fork);
	TsmFile    *f;

	if (known != NULL && !known->gone)
		return known;
	f = tsm_fileset_add(fs, node, fork, TSM_COPY_TRACKED, true);
	if (known == NULL)
	{
		/* a new entry of the set: its own RelocFile */
		if (st->nfiles == st->files_capacity)
		{
			st->files_capacity = Max(64, st->files_capacity * 2);
			st->files = st->files ?
				repalloc(st->files, sizeof(RelocFile) * st->files_capacity) :
				MemoryContextAlloc(fs->cxt, sizeof(RelocFile) * st->files_capacity);
		}
		f->owner = st->nfiles++;
		memset(&st->files[f->owner], 0, sizeof(RelocFile));
	}
	else
	{
		/* a relfilenode used again after its drop: same entry, new file */
		tsm_reloc_close_segments(&st->files[f->owner]);
		st->files[f->owner].tombstone = false;
		st->files[f->owner].orphan = false;
	}
	st->files[f->owner].listed_at_start = listed;
	(void) reloc_db(st, TSM_DB(node));
	return f;
}

/* The mirror saw a file of the tablespace that is not in the set. */
static void
reloc_new_file(TsmFileSet *fs, TsmRelFileNode node, ForkNumber fork)
{
	(void) tsm_reloc_add_file(fs, node, fork, false);
}

static void
reloc_foreign_change(TsmFileSet *fs, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("relocation of tablespace \"%s\" stopped: %s",
					tsm_reloc_state(fs)->spcname, what),
			 errhint("Relocate the tablespace again.")));
}

/*
 * Look up the relations of the files not resolved yet, database by
 * database, in a transaction of the caller's; with all, every database
 * (before the switch takes its locks, so that the locks cover every
 * relation committed by then).
 */
void
tsm_reloc_resolve(TsmJob *job, bool all)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;
	ListCell   *lc;

	foreach(lc, st->dbs)
	{
		RelocDb    *db = (RelocDb *) lfirst(lc);
		bool		needed = all;
		TsmDbRelation *rels;
		int			nrels;

		if (!db->exists)
			continue;
		for (int i = 0; i < fs->nfiles && !needed; i++)
			needed = (!fs->order[i]->gone && !OidIsValid(fs->order[i]->relid) &&
					  TSM_DB(fs->order[i]->key.node) == db->dbid);
		if (!needed)
			continue;
		if (!OidIsValid(db->default_spc))
		{
			HeapTuple	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(db->dbid));

			/*
			 * No row (yet): a CREATE DATABASE that has not committed, or one
			 * that failed and left its directory.  Look again next time;
			 * meanwhile its files are unresolved, which postpones the
			 * switch until no transaction that ran at the listing can own
			 * them (switch_check).
			 */
			if (!HeapTupleIsValid(tuple))
				continue;
			db->default_spc = ((Form_pg_database) GETSTRUCT(tuple))->dattablespace;
			ReleaseSysCache(tuple);
		}
		tsm_db_relations_in_tablespace(db->dbid, db->default_spc, st->spc,
									   &rels, &nrels);
		for (int r = 0; r < nrels; r++)
		{
			RelocRelKey key;
			RelocRel   *rel;

			memset(&key, 0, sizeof(key));
			key.dbid = db->dbid;
			key.relfilenode = rels[r].relfilenode;
			rel = hash_search(st->rels, &key, HASH_ENTER, NULL);
			rel->relid = rels[r].relid;
			rel->relpersistence = rels[r].relpersistence;
		}
		if (rels)
			pfree(rels);
	}

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		RelocRelKey key;
		RelocRel   *rel;

		if (f->gone || OidIsValid(f->relid))
			continue;
		memset(&key, 0, sizeof(key));
		key.dbid = TSM_DB(f->key.node);
		key.relfilenode = TSM_REL(f->key.node);
		rel = hash_search(st->rels, &key, HASH_FIND, NULL);
		if (rel)
			tsm_reloc_classify(fs, f, rel->relid, rel->relpersistence);
	}
	st->last_resolution = GetCurrentTimestamp();
}

/*
 * List every file of the tablespace: every database directory under the old
 * location, every relation file in it.  Temporary files are not listed
 * (switch_check, relocation_switch.c, waits for them to go away); anything
 * else that is not a relation's file stops the job.
 */
static void
list_files(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	DIR		   *dir = AllocateDir(st->old_dir);
	struct dirent *de;

	while ((de = ReadDir(dir, st->old_dir)) != NULL)
	{
		char		dbpath[MAXPGPATH];
		Oid			dbid;
		DIR		   *dbdir;
		struct dirent *fe;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			strcmp(de->d_name, PG_TEMP_FILES_DIR) == 0)
			continue;
		dbid = (Oid) strtoul(de->d_name, NULL, 10);
		if (!OidIsValid(dbid) || strspn(de->d_name, "0123456789") != strlen(de->d_name))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("unexpected file \"%s/%s\" in tablespace \"%s\"",
							st->old_dir, de->d_name, st->spcname),
					 errhint("Remove what PostgreSQL did not create there, then relocate.")));
		(void) reloc_db(st, dbid);
		snprintf(dbpath, sizeof(dbpath), "%s/%s", st->old_dir, de->d_name);
		dbdir = AllocateDir(dbpath);
		while ((fe = ReadDir(dbdir, dbpath)) != NULL)
		{
			TsmRelFileNumber number;
			unsigned	segno;
			ForkNumber	fork;
			TsmRelFileNode node;
			TsmFile    *f;

			if (strcmp(fe->d_name, ".") == 0 || strcmp(fe->d_name, "..") == 0 ||
				looks_like_temp_rel_name(fe->d_name))
				continue;
			if (!tsm_parse_relation_file_name(fe->d_name, &number, &fork, &segno))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("unexpected file \"%s/%s\" in tablespace \"%s\"",
								dbpath, fe->d_name, st->spcname),
						 errhint("Remove what PostgreSQL did not create there, then relocate.")));
			TSM_SPC(node) = st->spc;
			TSM_DB(node) = dbid;
			TSM_REL(node) = number;
			f = tsm_reloc_add_file(&job->files, node, fork, true);
			if (fork == MAIN_FORKNUM && f->nblocks == 0)
				st->files[f->owner].tombstone = true;	/* until resolved */
		}
		FreeDir(dbdir);
	}
	FreeDir(dir);
}

/* ---- what crash recovery would replay ---- */

/* The redo point of the last completed checkpoint, from the control file. */
XLogRecPtr
tsm_last_checkpoint_redo(void)
{
	ControlFileData *control;
	bool		crc_ok;
	XLogRecPtr	redo;

	LWLockAcquire(ControlFileLock, LW_SHARED);
	control = get_controlfile(DataDir, &crc_ok);
	LWLockRelease(ControlFileLock);
	if (!crc_ok)
		ereport(ERROR,
				(errmsg("calculated CRC checksum does not match value stored in file")));
	redo = control->checkPointCopy.redo;
	pfree(control);
	return redo;
}

/*
 * Whether XLOG_TBLSPC_CREATE of spc lies in the WAL from the last
 * checkpoint's redo point to upto: crash recovery would replay it, and
 * point the tablespace's link back where it was created.
 */
static bool
creation_in_replayed_wal(Oid spc, XLogRecPtr upto)
{
	XLogRecPtr	from = tsm_last_checkpoint_redo();
	XLogReaderState *reader;
	XLogRecPtr	first;
	bool		found = false;

	reader = XLogReaderAllocate(wal_segment_size, NULL,
								XL_ROUTINE(.page_read = &read_local_xlog_page_no_wait,
										   .segment_open = &wal_segment_open,
										   .segment_close = &wal_segment_close),
								palloc0(sizeof(ReadLocalXLogPageNoWaitPrivate)));
	if (reader == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory"),
				 errdetail("Failed while allocating a WAL reading processor.")));
	first = tsm_find_next_record(reader, from);
	if (!XLogRecPtrIsInvalid(first))
	{
		XLogBeginRead(reader, first);
		while (!found && reader->EndRecPtr < upto)
		{
			char	   *errormsg = NULL;

			if (XLogReadRecord(reader, &errormsg) == NULL)
				break;
			found = (XLogRecGetRmid(reader) == RM_TBLSPC_ID &&
					 (XLogRecGetInfo(reader) & ~XLR_INFO_MASK) == XLOG_TBLSPC_CREATE &&
					 ((xl_tblspc_create_rec *) XLogRecGetData(reader))->ts_id == spc);
			CHECK_FOR_INTERRUPTS();
		}
	}
	XLogReaderFree(reader);
	return found;
}

/* ---- prepare and guard, the front end's first phases ---- */

/*
 * settle: statements that took the creation guard before this job was
 * claimed did not see it (relocation_guard.c): wait for their transactions
 * before the mirror starts (a CREATE DATABASE's WAL would end the job),
 * before prepare's checks (it may make the tablespace its default) and
 * before any file is listed.
 */
void
tsm_relocation_settle(TsmJob *job)
{
	/* a standby runs no statement that creates storage */
	if (!tsm_job_is_local(job->row.job_id))
		tsm_guard_drain(&job->ctl);
}

/*
 * prepare: lock the tablespace against a second relocation, check again,
 * record the old location in the job row, create the new version
 * directory, list the files and look up their relations.
 */
void
tsm_relocation_prepare(TsmJob *job)
{
	TsmRelocation *st = palloc0(sizeof(TsmRelocation));
	HASHCTL		hctl;
	LOCKTAG		tag;
	int64		other;

	job->state = st;
	st->spc = job->row.target_spc;
	st->spcname = job->row.relname;
	st->new_location = job->row.new_location;
	snprintf(st->link_path, sizeof(st->link_path), "pg_tblspc/%u", st->spc);
	hctl.keysize = sizeof(RelocRelKey);
	hctl.entrysize = sizeof(RelocRel);
	hctl.hcxt = job->cxt;
	st->rels = hash_create("pg_tsmove relocated relations", 256, &hctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	tsm_fileset_init(&job->files, &job->ctl, &relocation_sink, st);
	job->files.follow_tablespace = st->spc;


	tsm_job_start_transaction();
	/*
	 * On a standby (a local job: relocation_standby.c) no lock above
	 * RowExclusiveLock can be taken; the launcher runs one local job at a
	 * time, and replay moves no relation of the primary's here.
	 */
	st->on_standby = tsm_job_is_local(job->row.job_id);
	if (st->on_standby)
		tsm_standby_check_not_promoted(st);
	else
	{
		SET_LOCKTAG_OBJECT(tag, InvalidOid, TableSpaceRelationId, st->spc, 0);
		if (LockAcquire(&tag, ExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("tablespace \"%s\" is being relocated by another job", st->spcname),
					 errhint("Wait for that relocation to end; tsmove.jobs in its database shows it.")));
		st->spc_locked = true;
	}
	if (!SearchSysCacheExists1(TABLESPACEOID, ObjectIdGetDatum(st->spc)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("tablespace \"%s\" was dropped before its relocation started",
						st->spcname)));
	st->old_location = MemoryContextStrdup(job->cxt,
										   tsm_check_relocatable(st->spc, st->spcname,
																 st->new_location));
	other = st->on_standby ? 0 : tsm_active_move_on_tablespace(st->spc);
	if (other != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("cannot relocate tablespace \"%s\" while job %lld moves a relation into or out of it",
						st->spcname, (long long) other),
				 errhint("Wait for that move to end, then relocate.")));
	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_record_old_location(job->row.job_id, st->old_location);
	PopActiveSnapshot();
	CommitTransactionCommand();

	st->old_dir = psprintf("%s/%s", st->old_location, TABLESPACE_VERSION_DIRECTORY);
	st->new_dir = psprintf("%s/%s", st->new_location, TABLESPACE_VERSION_DIRECTORY);
	/*
	 * A switch that waits only for the processes holding old files writes
	 * the dirty buffers under its locks (relocation_holders.c): write them
	 * before each attempt too, so that few are left for then.
	 */
	job->flushes_before_switch = !st->on_standby && job->switch_lockmode == AccessExclusiveLock &&
		tsm_old_file_holders_known();
	/* marks first: only they let the recovery pass remove either location */
	st->marks_written = true;
	tsm_relocmark_write(st->new_location, job->row.job_id);
	tsm_relocmark_write(st->old_location, job->row.job_id);
	st->new_dir_made = true;	/* from here on, cleanup removes it
								 * (relocation_finish.c) */
	if (MakePGDirectory(st->new_dir) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", st->new_dir)));
	fsync_fname(st->new_location, true);

	/* transactions that may own files of it nobody can resolve yet */
	st->xid_horizon = ReadNextTransactionId();
	st->start_lsn = st->on_standby ? GetXLogReplayRecPtr(NULL) : GetXLogInsertRecPtr();
	st->needs_checkpoint = creation_in_replayed_wal(st->spc, st->start_lsn);
	if (st->needs_checkpoint)
		RequestCheckpoint(CHECKPOINT_FORCE);	/* spread: the copy takes a while */
	tsm_job_start_transaction();
	list_files(job);
	tsm_reloc_resolve(job, true);
	CommitTransactionCommand();
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld relocates tablespace \"%s\" from \"%s\" to \"%s\": %d files, %lld blocks",
					(long long) job->row.job_id, st->spcname, st->old_location,
					st->new_location, job->files.nfiles,
					(long long) job->ctl.progress.blocks_total)));
}

/*
 * guard: lock the file's relation for this batch (AccessShareLock, by tag,
 * without waiting), then the worker reads the WAL.  A file whose relation
 * is not known yet, or is locked exclusively by someone, is left for later.
 */
TsmGuard
tsm_relocation_guard(TsmJob *job, TsmFile *f)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	LOCKTAG		tag;

	if (st->on_standby)
		tsm_standby_check_not_promoted(st);
	if (!OidIsValid(f->relid) &&
		TimestampDifferenceExceeds(st->last_resolution, GetCurrentTimestamp(),
								   TSM_RESOLVE_INTERVAL_MS))
		tsm_reloc_resolve(job, false);
	if (!OidIsValid(f->relid))
		return TSM_GUARD_SKIP;
	SET_LOCKTAG_RELATION(tag, TSM_DB(f->key.node), f->relid);
	if (LockAcquire(&tag, AccessShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return TSM_GUARD_SKIP;
	return TSM_GUARD_LOCKED;
}

/* ---- plain copies of files the set does not know ---- */

/*
 * Copy a whole file with plain I/O; for files the set does not know.  The
 * copy is written under a temporary name and renamed when complete and
 * synced, so that a copy a crash or a full disk cut short is never taken
 * for the file (tsm_copy_stragglers skips names that exist).
 */
void
tsm_copy_plain_file(const char *from, const char *to)
{
	char	   *buf = palloc(BLCKSZ * 16);
	int			src = OpenTransientFile(from, O_RDONLY | PG_BINARY);
	int			dst;
	ssize_t		n;
	char		tmp[MAXPGPATH];

	if (src < 0)
	{
		if (errno == ENOENT)
		{
			pfree(buf);
			return;				/* gone meanwhile */
		}
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not open file \"%s\": %m", from)));
	}
	snprintf(tmp, sizeof(tmp), "%s%s", to, TSM_TEMPORARY_COPY_SUFFIX);
	dst = OpenTransientFile(tmp, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
	if (dst < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp)));
	while ((n = read(src, buf, BLCKSZ * 16)) > 0)
	{
		errno = 0;
		if (write(dst, buf, n) != n)
		{
			if (errno == 0)
				errno = ENOSPC;
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not write file \"%s\": %m", tmp),
					 errhint("Check free disk space at the new location.")));
		}
	}
	if (n < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not read file \"%s\": %m", from)));
	if (pg_fsync(dst) != 0)
		ereport(data_sync_elevel(ERROR),
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", tmp)));
	CloseTransientFile(dst);
	CloseTransientFile(src);
	(void) durable_rename(tmp, to, ERROR);
	pfree(buf);
}

/*
 * Remove the temporary copies (tsm_copy_plain_file) that a crash or an error
 * left in a database directory of the new location.
 */
static void
remove_temporary_copies(const char *db_dir)
{
	DIR		   *dir = AllocateDir(db_dir);
	struct dirent *de;
	size_t		suffix = strlen(TSM_TEMPORARY_COPY_SUFFIX);

	while ((de = ReadDirExtended(dir, db_dir, LOG)) != NULL)
	{
		size_t		len = strlen(de->d_name);
		char		path[MAXPGPATH];

		if (len <= suffix || strcmp(de->d_name + len - suffix, TSM_TEMPORARY_COPY_SUFFIX) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", db_dir, de->d_name);
		if (unlink(path) < 0 && errno != ENOENT)
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("could not remove file \"%s\": %m", path)));
	}
	FreeDir(dir);
}

/* Whether relation file number has an init fork (it is unlogged) in db_dir. */
static bool
has_init_fork(const char *db_dir, TsmRelFileNumber number)
{
	char		path[MAXPGPATH];

	snprintf(path, sizeof(path), "%s/%u_%s", db_dir, number, forkNames[INIT_FORKNUM]);
	return access(path, F_OK) == 0;
}

/*
 * Copy what is in the old version directory and not in the new one: files
 * made there between the switch's last look and the rename by code the
 * creation guard does not see (relocation_guard.c; no SQL statement can).
 * Temporary files are not copied.  Used after the switch, and by the
 * recovery pass after a crash that followed the rename.
 *
 * A name in both is not decided from the name alone: if the new copy of a
 * main or init fork is shorter than the old file (crash recovery may have
 * recreated a file that raced the rename through the new link, zero-filled
 * below the pages it replayed), the old file may hold the only copy of its
 * data.  Such files are left alone and counted: the caller must then keep
 * the old location.  Returns their number.  A shorter FSM or VM is left
 * as it is: read as zeros past its end, it only lost hints (a VACUUM during
 * the copy leaves them short in the new location); so is an unlogged
 * relation's main fork, which crash recovery resets.
 */
int
tsm_copy_stragglers(const char *old_dir, const char *new_dir)
{
	DIR		   *dir = AllocateDir(old_dir);
	struct dirent *de;
	int			short_copies = 0;

	while ((de = ReadDirExtended(dir, old_dir, LOG)) != NULL)
	{
		char		old_db[MAXPGPATH];
		char		new_db[MAXPGPATH];
		DIR		   *dbdir;
		struct dirent *fe;

		if (strspn(de->d_name, "0123456789") != strlen(de->d_name) || de->d_name[0] == '\0')
			continue;
		snprintf(old_db, sizeof(old_db), "%s/%s", old_dir, de->d_name);
		snprintf(new_db, sizeof(new_db), "%s/%s", new_dir, de->d_name);
		if (MakePGDirectory(new_db) < 0 && errno != EEXIST)
			ereport(ERROR,
					(errcode_for_file_access(),
					 errmsg("could not create directory \"%s\": %m", new_db)));
		remove_temporary_copies(new_db);
		dbdir = AllocateDir(old_db);
		while ((fe = ReadDirExtended(dbdir, old_db, LOG)) != NULL)
		{
			char		from[MAXPGPATH];
			char		to[MAXPGPATH];
			TsmRelFileNumber number;
			unsigned	segno;
			ForkNumber	fork;
			struct stat old_st,
						new_st;

			if (!tsm_parse_relation_file_name(fe->d_name, &number, &fork, &segno))
				continue;
			snprintf(from, sizeof(from), "%s/%s", old_db, fe->d_name);
			snprintf(to, sizeof(to), "%s/%s", new_db, fe->d_name);
			if (stat(to, &new_st) == 0)
			{
				/*
				 * A shorter FSM or VM only loses hints (free space,
				 * all-visible bits); an unlogged relation's main fork is
				 * reset from its init fork by crash recovery.
				 */
				if ((fork == INIT_FORKNUM ||
					 (fork == MAIN_FORKNUM && !has_init_fork(new_db, number))) &&
					stat(from, &old_st) == 0 && new_st.st_size < old_st.st_size)
				{
					ereport(WARNING,
							(errmsg("pg_tsmove: \"%s\" (%lld bytes) is longer than its copy \"%s\" (%lld bytes); the old location is kept",
									from, (long long) old_st.st_size, to, (long long) new_st.st_size)));
					short_copies++;
				}
				continue;
			}
			ereport(LOG,
					(errmsg("pg_tsmove: copying \"%s\", created in the old location during the switch",
							from)));
			tsm_copy_plain_file(from, to);
		}
		FreeDir(dbdir);
		fsync_fname(new_db, true);
	}
	FreeDir(dir);
	return short_copies;
}

static const TsmFileSetOps relocation_sink = {
	.create = reloc_create,
	.write = reloc_write,
	.writeback = reloc_writeback,
	.truncate = reloc_truncate,
	.sync = reloc_sync,
	.remove = reloc_remove,
	.new_file = reloc_new_file,
	.foreign_change = reloc_foreign_change,
};
