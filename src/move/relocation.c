/*-------------------------------------------------------------------------
 *
 * relocation.c
 *	  The front end that relocates a whole tablespace to a new directory
 *	  while it is in use: ALTER TABLESPACE ... SET LOCATION, online.
 *
 * The tablespace keeps its OID, its name and every relfilenode; only the
 * link pg_tblspc/<oid> changes.  Design (DESIGN.md section 5):
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
 * one to the other ("resolution").  A batch of a file's blocks is read only under
 * AccessShareLock on its relation (taken by tag, without waiting: a busy
 * relation is copied later), after which the worker reads the WAL: a drop
 * or truncation committed before the lock is seen, so no block of a
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
 * The switch, in this order, which is what keeps a change from being lost
 * (until every process has closed its old file descriptors, a page
 * changed after its last copy could be written through one and evicted):
 *	1. AccessExclusiveLock on every relation stored in the tablespace, in
 *	   every database, each within pg_tsmove.switch_lock_timeout, all or
 *	   none (switch_lock); a relation created meanwhile by a transaction
 *	   that has not committed, or a temporary file of a session, postpones
 *	   the switch (switch_check);
 *	2. the worker reads the WAL to its end, copies what is dirty and the
 *	   files copied under the locks, and fsyncs every file (worker.c); now
 *	   every buffer equals its page in the new files, up to hint bits;
 *	3. fsync the new directories; create there the old location's empty
 *	   files (segments a truncation left, which the checkpointer will
 *	   fsync through the link); under TablespaceCreateLock (which DROP
 *	   TABLESPACE takes) and DELAY_CHKPT_START, look again for backups and
 *	   temporary files, check the link still points to the old location,
 *	   create the new link under a temporary name, rename() it over
 *	   pg_tblspc/<oid>, fsync pg_tblspc: from here the link is the truth;
 *	4. PROCSIGNAL_BARRIER_SMGRRELEASE: every process, the checkpointer and
 *	   the bgwriter included, closes its old descriptors (and the worker's
 *	   own, absorbed by hand since interrupts are held from 3 to 4, so that
 *	   no error can release the locks before the barrier);
 *	5. files created in the old location after the check (a CREATE racing
 *	   the rename) are copied; copies of dropped files whose pending unlink
 *	   the checkpointer already did are removed; release the locks;
 *	6. wait for backups that began before the switch and for sessions
 *	   whose temporary files are in the old location; remove the old
 *	   files (finish).
 * Crash: the link is the truth.  Before the rename the new location is
 * scratch; after it the old one is (tsm_recover_relocation).  But crash
 * recovery replays XLOG_TBLSPC_CREATE, which points the link at the
 * location the tablespace was created with: if that record is after the
 * last checkpoint's redo point, a crash after the switch would undo it.
 * So the job looks for the record in the WAL since that checkpoint, and if
 * it is there asks for a checkpoint and switches only once one completed.
 * The switch also waits while a base backup runs, of either kind
 * (relocation_backups.c), and looks again at the rename with checkpoints
 * delayed: a backup that read the tablespace across the switch could miss
 * files.
 * The recovery pass removes a location only if the job's mark proves it is
 * this data directory's (relocation_marks.c): a restored backup or a promoted
 * standby finds the same paths, which may hold another cluster's files.
 *
 * Relfilenode tombstones.  A dropped relation's first segment stays, empty,
 * until the next checkpoint, so that its relfilenode is not reused while
 * the checkpointer still has to unlink it.  The copy keeps the same
 * tombstones (remove() truncates instead of deleting), because after the
 * switch the checkpointer unlinks them through the new link.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "postmaster/bgwriter.h"
#include "utils/backend_progress.h"
#include "utils/backend_status.h"
#include "catalog/catalog.h"
#include "catalog/pg_database.h"
#include "catalog/pg_tablespace.h"
#include "commands/tablespace.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/bufpage.h"
#include "storage/fd.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/procsignal.h"
#include "storage/reinit.h"
#include "storage/smgr.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "move/frontend.h"
#include "move/submit.h"
#include "move/relocation_backups.h"
#include "move/relocation_barrier.h"
#include "move/relocation_dbcatalog.h"
#include "move/relocation_marks.h"

/* How often unresolved files are looked up again while copying. */
#define TSM_RESOLVE_INTERVAL_MS 1000

/* copy_plain_file writes here first; copy_stragglers removes leftovers. */
#define TSM_TEMPORARY_COPY_SUFFIX ".tsmove_tmp"

/* A database with files in the tablespace. */
typedef struct RelocDb
{
	Oid			dbid;
	Oid			default_spc;	/* InvalidOid until looked up */
	bool		exists;
	bool		new_dir_made;
} RelocDb;

/* Resolution: the relation that owns a relfilenode in a database. */
typedef struct RelocRelKey
{
	Oid			dbid;
	TsmRelFileNumber relfilenode;
} RelocRelKey;

typedef struct RelocRel
{
	RelocRelKey key;
	Oid			relid;
	char		relpersistence;
} RelocRel;

/* The sink's state of one file (TsmFile.owner indexes these). */
typedef struct RelocFile
{
	File	   *segs;			/* open segments of the copy, or 0 */
	int			nsegs;
	bool		listed_at_start;	/* present when the job listed the files */
	bool		tombstone;		/* an empty first segment with no relation */
	bool		orphan;			/* no relation and no running transaction
								 * owns it: not moved */
} RelocFile;

typedef struct TsmRelocation
{
	Oid			spc;
	char	   *spcname;
	char	   *old_location;
	char	   *new_location;
	char	   *old_dir;		/* <location>/TABLESPACE_VERSION_DIRECTORY */
	char	   *new_dir;
	char		link_path[MAXPGPATH];
	List	   *dbs;			/* RelocDb * */
	HTAB	   *rels;			/* RelocRelKey -> RelocRel */
	RelocFile  *files;
	int			nfiles;
	int			files_capacity;
	TransactionId xid_horizon;	/* transactions older may own unresolved
								 * files listed at start */
	XLogRecPtr	start_lsn;		/* when the job listed the files */
	bool		needs_checkpoint;	/* the tablespace's creation is in WAL
									 * that crash recovery would replay */
	TimestampTz last_resolution;
	LOCKTAG    *locked;			/* the switch's locks, in the order taken */
	int			nlocked;
	LOCKTAG    *contended;		/* those a switch attempt timed out on, the
								 * latest first: taken first next time */
	int			ncontended;
	bool		spc_locked;
	bool		new_dir_made;
	bool		barrier_done;
	bool		stragglers_done;
	bool		marks_written;	/* relocation_marks.c, in both locations */
	TimestampTz switched_at;	/* when the link was checked and renamed */
} TsmRelocation;

static const TsmFileSetOps relocation_sink;

/* ---- the sink: plain files under the new location ---- */

static TsmRelocation *
state_of(TsmFileSet *fs)
{
	return (TsmRelocation *) fs->arg;
}

static RelocFile *
rfile(TsmFileSet *fs, TsmFile *f)
{
	return &state_of(fs)->files[f->owner];
}

/* Path of one segment of a file, under dir (the old or the new one). */
static void
segment_path(char *path, const char *dir, TsmFile *f, int segno)
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
static void
make_new_db_dir(TsmRelocation *st, Oid dbid)
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
	RelocFile  *rf = rfile(fs, f);
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
	segment_path(path, state_of(fs)->new_dir, f, segno);
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

static void
close_segments(RelocFile *rf)
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

	make_new_db_dir(state_of(fs), TSM_DB(f->key.node));
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

	PageSetChecksumInplace(page, blkno);
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
	RelocFile  *rf = rfile(fs, f);

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
	RelocFile  *rf = rfile(fs, f);
	bool		keep_tombstone = (f->key.fork == MAIN_FORKNUM);
	char		path[MAXPGPATH];

	if (keep_tombstone)
		reloc_truncate(fs, f, 0);
	close_segments(rf);
	for (int segno = keep_tombstone ? 1 : 0;; segno++)
	{
		segment_path(path, state_of(fs)->new_dir, f, segno);
		if (unlink(path) < 0)
			break;
	}
	rf->tombstone = keep_tombstone;
}

/* ---- files and their relations ---- */

/* How a file is copied, once its relation's persistence is known. */
static void
classify(TsmFileSet *fs, TsmFile *f, Oid relid, char relpersistence)
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
static TsmFile *
add_file(TsmFileSet *fs, TsmRelFileNode node, ForkNumber fork, bool listed)
{
	TsmRelocation *st = state_of(fs);
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
		close_segments(&st->files[f->owner]);
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
	(void) add_file(fs, node, fork, false);
}

static void
reloc_foreign_change(TsmFileSet *fs, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("relocation of tablespace \"%s\" stopped: %s",
					state_of(fs)->spcname, what),
			 errhint("Relocate the tablespace again.")));
}

/*
 * Look up the relations of the files not resolved yet, database by
 * database, in a transaction of the caller's; with all, every database
 * (before the switch takes its locks, so that the locks cover every
 * relation committed by then).
 */
static void
resolve(TsmJob *job, bool all)
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

			if (!HeapTupleIsValid(tuple))
			{
				db->exists = false; /* its files belong to nothing */
				continue;
			}
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
			classify(fs, f, rel->relid, rel->relpersistence);
	}
	st->last_resolution = GetCurrentTimestamp();
}

/*
 * List every file of the tablespace: every database directory under the
 * old location, every relation file in it.  Temporary files are not
 * listed (switch_check waits for them to go away); anything else that is
 * not a relation's file stops the job.
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
			int			oidchars;
			ForkNumber	fork;
			TsmRelFileNode node;
			TsmFile    *f;

			if (strcmp(fe->d_name, ".") == 0 || strcmp(fe->d_name, "..") == 0 ||
				looks_like_temp_rel_name(fe->d_name))
				continue;
			if (!parse_filename_for_nontemp_relation(fe->d_name, &oidchars, &fork))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("unexpected file \"%s/%s\" in tablespace \"%s\"",
								dbpath, fe->d_name, st->spcname),
						 errhint("Remove what PostgreSQL did not create there, then relocate.")));
			TSM_SPC(node) = st->spc;
			TSM_DB(node) = dbid;
			TSM_REL(node) = (TsmRelFileNumber) strtoul(fe->d_name, NULL, 10);
			f = add_file(&job->files, node, fork, true);
			if (fork == MAIN_FORKNUM && f->nblocks == 0)
				st->files[f->owner].tombstone = true;	/* until resolved */
		}
		FreeDir(dbdir);
	}
	FreeDir(dir);
}

/* ---- what crash recovery would replay ---- */

/* The redo point of the last completed checkpoint, from the control file. */
static XLogRecPtr
last_checkpoint_redo(void)
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
	XLogRecPtr	from = last_checkpoint_redo();
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
	first = XLogFindNextRecord(reader, from);
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

/* ---- the front end ---- */

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

	StartTransactionCommand();
	SET_LOCKTAG_OBJECT(tag, InvalidOid, TableSpaceRelationId, st->spc, 0);
	if (LockAcquire(&tag, ExclusiveLock, true, true) == LOCKACQUIRE_NOT_AVAIL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("tablespace \"%s\" is being relocated by another job", st->spcname),
				 errhint("Wait for that relocation to end; tsmove.jobs in its database shows it.")));
	st->spc_locked = true;
	if (!SearchSysCacheExists1(TABLESPACEOID, ObjectIdGetDatum(st->spc)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("tablespace \"%s\" was dropped before its relocation started",
						st->spcname)));
	st->old_location = MemoryContextStrdup(job->cxt,
										   tsm_check_relocatable(st->spc, st->spcname,
																 st->new_location));
	other = tsm_active_move_on_tablespace(st->spc);
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
	/* marks first: only they let the recovery pass remove either location */
	st->marks_written = true;
	tsm_relocmark_write(st->new_location, job->row.job_id);
	tsm_relocmark_write(st->old_location, job->row.job_id);
	st->new_dir_made = true;	/* from here on, cleanup removes it */
	if (MakePGDirectory(st->new_dir) < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", st->new_dir)));
	fsync_fname(st->new_location, true);

	/* transactions that may own files of it nobody can resolve yet */
	st->xid_horizon = ReadNextTransactionId();
	st->start_lsn = GetXLogInsertRecPtr();
	st->needs_checkpoint = creation_in_replayed_wal(st->spc, st->start_lsn);
	if (st->needs_checkpoint)
		RequestCheckpoint(CHECKPOINT_FORCE);	/* spread: the copy takes a while */
	StartTransactionCommand();
	list_files(job);
	resolve(job, true);
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

	if (!OidIsValid(f->relid) &&
		TimestampDifferenceExceeds(st->last_resolution, GetCurrentTimestamp(),
								   TSM_RESOLVE_INTERVAL_MS))
		resolve(job, false);
	if (!OidIsValid(f->relid))
		return TSM_GUARD_SKIP;
	SET_LOCKTAG_RELATION(tag, TSM_DB(f->key.node), f->relid);
	if (LockAcquire(&tag, AccessShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return TSM_GUARD_SKIP;
	return TSM_GUARD_LOCKED;
}

static int
locktag_cmp(const void *a, const void *b)
{
	const LOCKTAG *ta = (const LOCKTAG *) a;
	const LOCKTAG *tb = (const LOCKTAG *) b;

	if (ta->locktag_field1 != tb->locktag_field1)
		return ta->locktag_field1 < tb->locktag_field1 ? -1 : 1;
	if (ta->locktag_field2 != tb->locktag_field2)
		return ta->locktag_field2 < tb->locktag_field2 ? -1 : 1;
	return 0;
}

/*
 * Put the relations an earlier attempt timed out on first, the latest
 * first.  Holding some locks while waiting for another invites deadlocks
 * with transactions that use the relations in another order (pgbench
 * updates accounts, tellers, branches, then inserts into history; locked
 * in OID order, history comes first and every attempt deadlocks until
 * lock_timeout ends it).  A transaction that waits for the first lock
 * holds none of the others, so taking the contended relation first makes
 * the attempts converge, whatever order the workload uses.
 */
static void
order_by_contention(TsmRelocation *st)
{
	int			front = 0;

	for (int c = 0; c < st->ncontended; c++)
		for (int i = front; i < st->nlocked; i++)
			if (locktag_cmp(&st->locked[i], &st->contended[c]) == 0)
			{
				LOCKTAG		tag = st->locked[i];

				memmove(&st->locked[front + 1], &st->locked[front],
						sizeof(LOCKTAG) * (i - front));
				st->locked[front++] = tag;
				break;
			}
}

static void
note_contended(TsmJob *job, const LOCKTAG *tag)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	if (st->contended == NULL)
		st->contended = MemoryContextAlloc(job->cxt, sizeof(LOCKTAG) * 8);
	for (int c = 0; c < st->ncontended; c++)
		if (locktag_cmp(&st->contended[c], tag) == 0)
		{
			memmove(&st->contended[1], &st->contended[0], sizeof(LOCKTAG) * c);
			st->contended[0] = *tag;
			return;
		}
	memmove(&st->contended[1], &st->contended[0],
			sizeof(LOCKTAG) * Min(st->ncontended, 7));
	st->contended[0] = *tag;
	st->ncontended = Min(st->ncontended + 1, 8);
}

static void
lock_relation(void *arg, int i)
{
	TsmRelocation *st = (TsmRelocation *) arg;

	(void) LockAcquire(&st->locked[i], AccessExclusiveLock, false, false);
}

/*
 * switch_lock: look up every relation once more, then take
 * AccessExclusiveLock on each, those contended before first, then in
 * (database, OID) order, each within pg_tsmove.switch_lock_timeout; all or
 * none.  As for a relation move, autovacuum that blocks it is cancelled,
 * and so are blocking queries once pg_tsmove.switch_cancel_blockers_after
 * has passed (switch_blockers.c).
 */
bool
tsm_relocation_switch_lock(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;
	int			timeout_ms = tsm_switch_lock_timeout_ms;
	int			failed_at;
	int			n = 0;
	int			laggard;

	StartTransactionCommand();
	resolve(job, true);
	if (st->locked)
		pfree(st->locked);
	st->locked = MemoryContextAlloc(job->cxt, sizeof(LOCKTAG) * Max(1, fs->nfiles));
	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];

		if (!f->gone && OidIsValid(f->relid))
		{
			LOCKTAG		tag;	/* the macro evaluates its target many times */

			SET_LOCKTAG_RELATION(tag, TSM_DB(f->key.node), f->relid);
			st->locked[n++] = tag;
		}
	}
	qsort(st->locked, n, sizeof(LOCKTAG), locktag_cmp);
	st->nlocked = 0;
	for (int i = 0; i < n; i++)
		if (st->nlocked == 0 || locktag_cmp(&st->locked[st->nlocked - 1], &st->locked[i]) != 0)
			st->locked[st->nlocked++] = st->locked[i];

	order_by_contention(st);

	if (tsm_cancel_blocking_queries(&job->block, st->locked, st->nlocked) > 0)
		timeout_ms = Max(timeout_ms, TSM_CANCEL_GRACE_MS);
	else if (tsm_last_blockers_remain(&job->block, st->locked, st->nlocked))
	{
		/* it would fail as the last did, and log its locks for standbys */
		CommitTransactionCommand();
		tsm_ctl_note(&job->ctl, "%s", TSM_NOTE_BLOCKERS_REMAIN);
		return false;
	}
	if (!tsm_barrier_probe(TSM_BARRIER_PROBE_MS, &laggard))
	{
		CommitTransactionCommand();
		if (laggard != 0)
			tsm_ctl_note(&job->ctl, "process %d has not closed its files within %d s (it does not "
						 "answer procsignal barriers): the switch takes no lock until it does",
						 laggard, TSM_BARRIER_PROBE_MS / 1000);
		else
			tsm_ctl_note(&job->ctl, "a process has not closed its files within %d s (it does not "
						 "answer procsignal barriers): the switch takes no lock until it does",
						 TSM_BARRIER_PROBE_MS / 1000);
		return false;
	}
	if (tsm_ctl_lock_all_or_none(lock_relation, st, st->nlocked, timeout_ms, &failed_at))
		return true;
	note_contended(job, &st->locked[failed_at]);
	CommitTransactionCommand();		/* not an abort: it keeps the session lock */
	tsm_switch_attempt_failed(&job->block, st->locked, st->nlocked);
	return false;
}

static bool
holds_lock_on(TsmRelocation *st, TsmFile *f)
{
	LOCKTAG		tag;

	SET_LOCKTAG_RELATION(tag, TSM_DB(f->key.node), f->relid);
	for (int i = 0; i < st->nlocked; i++)
		if (locktag_cmp(&st->locked[i], &tag) == 0)
			return true;
	return false;
}

/* Whether a temporary file of a session is in the tablespace now. */
static bool
temporary_files_present(TsmRelocation *st, char *what, Size len)
{
	char		path[MAXPGPATH];
	DIR		   *dir;
	struct dirent *de;
	bool		found = false;

	snprintf(path, sizeof(path), "%s/%s", st->old_dir, PG_TEMP_FILES_DIR);
	if (access(path, F_OK) == 0 && !directory_is_empty(path))
	{
		snprintf(what, len, "temporary files in \"%s\"", path);
		return true;
	}
	dir = AllocateDir(st->old_dir);
	while (!found && (de = ReadDir(dir, st->old_dir)) != NULL)
	{
		DIR		   *dbdir;
		struct dirent *fe;

		if (strspn(de->d_name, "0123456789") != strlen(de->d_name) || de->d_name[0] == '\0')
			continue;
		snprintf(path, sizeof(path), "%s/%s", st->old_dir, de->d_name);
		dbdir = AllocateDir(path);
		while (!found && (fe = ReadDir(dbdir, path)) != NULL)
			if (looks_like_temp_rel_name(fe->d_name))
			{
				snprintf(what, len, "temporary relation file \"%s/%s\"", path, fe->d_name);
				found = true;
			}
		FreeDir(dbdir);
	}
	FreeDir(dir);
	return found;
}

/*
 * Relation files in the old location that are not in the set: forks made
 * without WAL (an FSM or VM extended, an unlogged relation's main fork).
 * Under the locks they join the files copied whole.  Returns false, with a
 * note, if one belongs to no relation this job has locked.
 */
static bool
adopt_unlisted_files(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	ListCell   *lc;

	foreach(lc, st->dbs)
	{
		RelocDb    *db = (RelocDb *) lfirst(lc);
		char		dbpath[MAXPGPATH];
		DIR		   *dbdir;
		struct dirent *fe;
		bool		ok = true;

		snprintf(dbpath, sizeof(dbpath), "%s/%u", st->old_dir, db->dbid);
		if (!db->exists || access(dbpath, F_OK) != 0)
			continue;
		dbdir = AllocateDir(dbpath);
		while (ok && (fe = ReadDir(dbdir, dbpath)) != NULL)
		{
			int			oidchars;
			ForkNumber	fork;
			TsmRelFileNode node;
			TsmFile    *f;
			RelocRelKey key;
			RelocRel   *rel;

			if (!parse_filename_for_nontemp_relation(fe->d_name, &oidchars, &fork) ||
				strchr(fe->d_name, '.') != NULL)
				continue;
			TSM_SPC(node) = st->spc;
			TSM_DB(node) = db->dbid;
			TSM_REL(node) = (TsmRelFileNumber) strtoul(fe->d_name, NULL, 10);
			f = tsm_fileset_find(&job->files, node, fork);
			if (f != NULL && !f->gone)
				continue;
			memset(&key, 0, sizeof(key));
			key.dbid = db->dbid;
			key.relfilenode = TSM_REL(node);
			rel = hash_search(st->rels, &key, HASH_FIND, NULL);
			if (f != NULL && f->gone && rel == NULL)
				continue;		/* a dropped file's tombstone: known */
			f = add_file(&job->files, node, fork, false);
			if (rel == NULL)
				ok = false;
			else
			{
				classify(&job->files, f, rel->relid, rel->relpersistence);
				tsm_file_set_when(&job->files, f, TSM_COPY_LOCKED, f->permanent);
				ok = holds_lock_on(st, f);
			}
			if (!ok)
				tsm_ctl_note(&job->ctl,
							 "waiting for the transaction that created file \"%s/%s\" to end",
							 dbpath, fe->d_name);
		}
		FreeDir(dbdir);
		if (!ok)
			return false;
	}
	return true;
}

/*
 * switch_check, with the locks held and the WAL read to its end: every
 * file must belong to a relation this job locked (or be a tombstone or an
 * orphan no running transaction can own), no session may have temporary
 * files in the tablespace, and the link must still point where it did.
 */
bool
tsm_relocation_switch_check(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;
	char		what[MAXPGPATH + 64];
	bool		old_ones_done = TransactionIdPrecedesOrEquals(st->xid_horizon,
															  GetOldestActiveTransactionId());
	char	   *link;

	link = tsm_read_tablespace_link(st->spc, st->spcname);
	if (strcmp(link, st->old_location) != 0 ||
		!SearchSysCacheExists1(TABLESPACEOID, ObjectIdGetDatum(st->spc)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("tablespace \"%s\" was dropped or its link changed during the relocation",
						st->spcname)));

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		RelocFile  *rf = rfile(fs, f);

		if (f->gone || rf->orphan)
			continue;
		if (!smgrexists(tsm_smgropen(f->key.node), f->key.fork))
		{
			/* gone at the source without a drop we saw: unlinked tombstone */
			tsm_file_drop(fs, f);
			continue;
		}
		if (OidIsValid(f->relid))
		{
			if (!holds_lock_on(st, f))
			{
				tsm_ctl_note(&job->ctl, "relation %u of database %u appeared after the locks were taken; retrying",
							 f->relid, TSM_DB(f->key.node));
				return false;
			}
			continue;
		}
		if (rf->listed_at_start && old_ones_done)
		{
			/*
			 * Nothing that runs now can own it: the transaction that made it
			 * ended, committed or not, before any file was listed.  An empty
			 * main fork is a dropped relation's tombstone, copied as such;
			 * anything else is an orphan, which stays behind.
			 */
			if (f->key.fork == MAIN_FORKNUM && f->nblocks == 0 && rf->tombstone)
				continue;
			rf->orphan = true;
			tsm_file_drop(fs, f);	/* never copied: nothing to remove */
			ereport(LOG,
					(errmsg("pg_tsmove: file %u (fork %d) of database %u in tablespace \"%s\" belongs to no relation; it is not relocated",
							TSM_REL(f->key.node), f->key.fork, TSM_DB(f->key.node), st->spcname)));
			continue;
		}
		tsm_ctl_note(&job->ctl,
					 "waiting for the transaction that created relfilenode %u in database %u to end",
					 TSM_REL(f->key.node), TSM_DB(f->key.node));
		return false;
	}
	if (st->needs_checkpoint && last_checkpoint_redo() < st->start_lsn)
	{
		tsm_ctl_note(&job->ctl, "waiting for a checkpoint: the tablespace was created after the last one, "
					 "and crash recovery would replay its creation with the old location");
		return false;
	}
	st->needs_checkpoint = false;
	if (tsm_backup_running(NULL, what, sizeof(what)))
	{
		tsm_ctl_note(&job->ctl, "waiting for %s to end: a backup must not read the tablespace across the switch",
					 what);
		return false;
	}
	if (temporary_files_present(st, what, sizeof(what)))
	{
		tsm_ctl_note(&job->ctl, "waiting for %s to go away (sessions using the tablespace for temporary objects)",
					 what);
		return false;
	}
	return adopt_unlisted_files(job);
}

/* A commit, not an abort: that would release the session lock too. */
void
tsm_relocation_switch_release(TsmJob *job)
{
	CommitTransactionCommand();
}

/*
 * Copy a whole file with plain I/O; for files the set does not know.  The
 * copy is written under a temporary name and renamed when complete and
 * synced, so that a copy a crash or a full disk cut short is never taken
 * for the file (copy_stragglers skips names that exist).
 */
static void
copy_plain_file(const char *from, const char *to)
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
 * Remove the temporary copies (copy_plain_file) that a crash or an error
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

/*
 * Copy what is in the old version directory and not in the new one:
 * files a CREATE made there between the switch's check and the rename
 * (their transaction had no visible relation to lock).  Temporary files
 * are not copied.  Used after the switch, and by the recovery pass after
 * a crash that followed the rename.
 */
static void
copy_stragglers(const char *old_dir, const char *new_dir)
{
	DIR		   *dir = AllocateDir(old_dir);
	struct dirent *de;

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
			int			oidchars;
			ForkNumber	fork;

			if (!parse_filename_for_nontemp_relation(fe->d_name, &oidchars, &fork))
				continue;
			snprintf(from, sizeof(from), "%s/%s", old_db, fe->d_name);
			snprintf(to, sizeof(to), "%s/%s", new_db, fe->d_name);
			if (access(to, F_OK) == 0)
				continue;
			ereport(LOG,
					(errmsg("pg_tsmove: copying \"%s\", created in the old location during the switch",
							from)));
			copy_plain_file(from, to);
		}
		FreeDir(dbdir);
		fsync_fname(new_db, true);
	}
	FreeDir(dir);
}

/*
 * Tombstones of files dropped during the job whose pending unlink the
 * checkpointer did before the rename: the old one is gone, so the copy
 * goes too (otherwise it would hold the relfilenode forever).
 */
static void
remove_unlinked_tombstones(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];
		RelocFile  *rf = rfile(fs, f);
		char		old_path[MAXPGPATH];
		char		new_path[MAXPGPATH];

		if (f->key.fork != MAIN_FORKNUM || !rf->tombstone ||
			!(f->gone || !OidIsValid(f->relid)))
			continue;
		segment_path(old_path, st->old_dir, f, 0);
		segment_path(new_path, st->new_dir, f, 0);
		if (access(old_path, F_OK) != 0 && errno == ENOENT)
			(void) unlink(new_path);
	}
}

/*
 * Every process closes the descriptors it has of the old files.  The
 * worker absorbs the barrier itself: its interrupts may be held.
 */
static void
release_old_descriptors(TsmRelocation *st)
{
	uint64		generation = EmitProcSignalBarrier(PROCSIGNAL_BARRIER_SMGRRELEASE);

	ProcessProcSignalBarrier();
	WaitForProcSignalBarrier(generation);
	st->barrier_done = true;
}

/*
 * Under the locks, before the rename: the empty segments past the end of
 * each relation this job holds locked, which a truncation (VACUUM) of a
 * relation of more than one segment leaves behind, are created in the new
 * location too: the checkpointer may still hold fsync requests for them,
 * which it carries out through the link, and a missing one PANICs it.
 * Only segments of relations the job has locked: anyone may be writing to
 * another file, and a copy made now would hide its writes until the
 * barrier (copy_stragglers copies those after it).
 */
static void
create_inactive_segments(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	TsmFileSet *fs = &job->files;

	for (int i = 0; i < fs->nfiles; i++)
	{
		TsmFile    *f = fs->order[i];

		if (f->gone || !OidIsValid(f->relid) || !holds_lock_on(st, f))
			continue;
		for (int segno = 1;; segno++)
		{
			char		old_path[MAXPGPATH];
			char		new_path[MAXPGPATH];
			struct stat sb;

			segment_path(old_path, st->old_dir, f, segno);
			if (stat(old_path, &sb) < 0)
				break;
			segment_path(new_path, st->new_dir, f, segno);
			if (sb.st_size == 0 && access(new_path, F_OK) < 0)
				copy_plain_file(old_path, new_path);
		}
	}
}

/*
 * switch_commit: with the locks held and the copy complete and synced,
 * repoint the link, make every process let go of the old files, copy
 * what raced the rename, and release the locks.  False, with the locks
 * released, if a backup or a temporary file appeared since switch_check.
 */
bool
tsm_relocation_switch_commit(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	char		tmp_link[MAXPGPATH];
	char		what[MAXPGPATH + 64];
	ListCell   *lc;
	char	   *link;

	foreach(lc, st->dbs)
	{
		RelocDb    *db = (RelocDb *) lfirst(lc);
		char		path[MAXPGPATH];

		make_new_db_dir(st, db->dbid);
		snprintf(path, sizeof(path), "%s/%u", st->new_dir, db->dbid);
		fsync_fname(path, true);
	}
	fsync_fname(st->new_dir, true);
	fsync_fname(st->new_location, true);
	create_inactive_segments(job);
	tsm_ctl_debug_pause(&job->ctl, "switching");

	/*
	 * TablespaceCreateLock keeps DROP TABLESPACE (which takes it) from
	 * removing the link under us.  From the rename to the barrier no error
	 * may release the locks (a page changed meanwhile could be written
	 * through an old descriptor): interrupts are held, and what can fail
	 * there is the fsync of pg_tblspc, which PANICs as core's fsyncs do.
	 */
	LWLockAcquire(TablespaceCreateLock, LW_EXCLUSIVE);

	/*
	 * The last look for backups, seconds after switch_check's.  From here
	 * to the rename checkpoints wait (DELAY_CHKPT_START, cleared by an
	 * abort too): a backup that starts now lists pg_tblspc only after its
	 * start checkpoint, so it reads the new link; one that started before
	 * is seen here (relocation_backups.c), and the switch waits for it to end.
	 */
	Assert((MyProc->delayChkptFlags & DELAY_CHKPT_START) == 0);
	MyProc->delayChkptFlags |= DELAY_CHKPT_START;
	pg_memory_barrier();		/* the flag is seen before we read who backs up */
	if (tsm_backup_running(NULL, what, sizeof(what)) ||
		temporary_files_present(st, what, sizeof(what)))
	{
		MyProc->delayChkptFlags &= ~DELAY_CHKPT_START;
		LWLockRelease(TablespaceCreateLock);
		tsm_ctl_note(&job->ctl, "%s appeared just before the switch; retrying", what);
		tsm_relocation_switch_release(job);
		return false;
	}
	st->switched_at = GetCurrentTimestamp();
	tsm_ctl_debug_pause(&job->ctl, "renaming");
	link = tsm_read_tablespace_link(st->spc, st->spcname);
	snprintf(tmp_link, sizeof(tmp_link), "%s.tsmove", st->link_path);
	(void) unlink(tmp_link);
	if (strcmp(link, st->old_location) != 0 || symlink(st->new_location, tmp_link) < 0)
	{
		int			save_errno = errno;

		LWLockRelease(TablespaceCreateLock);
		errno = save_errno;
		if (strcmp(link, st->old_location) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the link of tablespace \"%s\" changed during the relocation",
							st->spcname)));
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create symbolic link \"%s\": %m", tmp_link)));
	}
	HOLD_INTERRUPTS();
	if (rename(tmp_link, st->link_path) < 0)
	{
		int			save_errno = errno;

		RESUME_INTERRUPTS();
		(void) unlink(tmp_link);
		LWLockRelease(TablespaceCreateLock);
		errno = save_errno;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not rename \"%s\" to \"%s\": %m", tmp_link, st->link_path)));
	}
	job->switch_committed = true;
	(void) fsync_fname_ext("pg_tblspc", true, false, PANIC);
	MyProc->delayChkptFlags &= ~DELAY_CHKPT_START;
	LWLockRelease(TablespaceCreateLock);
	release_old_descriptors(st);
	RESUME_INTERRUPTS();

	tsm_ctl_debug_pause(&job->ctl, "warming");
	copy_stragglers(st->old_dir, st->new_dir);
	remove_unlinked_tombstones(job);
	st->stragglers_done = true;

	PushActiveSnapshot(GetTransactionSnapshot());
	tsm_jobrec_set_state(job->row.job_id, TSM_WARMING, NULL);
	PopActiveSnapshot();
	CommitTransactionCommand();
	job->ctl.progress.switch_ms = (double) (GetCurrentTimestamp() - job->lock_granted) / 1000.0;
	tsm_ctl_set_state(&job->ctl, TSM_WARMING);
	return true;
}

static void
close_all_files(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	for (int i = 0; i < st->nfiles; i++)
		close_segments(&st->files[i]);
}

static void
release_tablespace_lock(TsmRelocation *st)
{
	LOCKTAG		tag;

	if (!st->spc_locked)
		return;
	SET_LOCKTAG_OBJECT(tag, InvalidOid, TableSpaceRelationId, st->spc, 0);
	LockRelease(&tag, ExclusiveLock, true);
	st->spc_locked = false;
}

/* Remove the old version directory, now that nothing uses it. */
static void
remove_old_files(TsmRelocation *st)
{
	if (!rmtree(st->old_dir, true))
		ereport(WARNING,
				(errmsg("pg_tsmove could not remove all of \"%s\"", st->old_dir),
				 errhint("Remove it by hand: the tablespace no longer uses it.")));
	fsync_fname(st->old_location, true);
}

/*
 * Add the regular files under dir, and under its subdirectories, to
 * *files; not the temporary files of sessions (pgsql_tmp), which a query
 * may still be reading: shrunk, it would read short, with no error.
 */
static void
list_old_files(const char *dir, bool recurse, List **files)
{
	DIR		   *d = AllocateDir(dir);
	struct dirent *de;

	while ((de = ReadDirExtended(d, dir, LOG)) != NULL)
	{
		char	   *path;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
			strcmp(de->d_name, PG_TEMP_FILES_DIR) == 0)
			continue;
		path = psprintf("%s/%s", dir, de->d_name);
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && recurse)
			list_old_files(path, false, files);
		else if (S_ISREG(st.st_mode))
			*files = lappend(*files, path);
	}
	FreeDir(d);
}

/*
 * Free the old files' space a step at a time before they are removed
 * (engine.h, "shrink"): nothing uses them any more.  Best effort: what is
 * not shrunk is removed at once.  No descriptor is held across a sleep,
 * which a cancel can end with an error.
 */
static void
shrink_old_files(TsmJob *job, const char *old_dir)
{
	List	   *files = NIL;
	ListCell   *lc;

	list_old_files(old_dir, true, &files);
	foreach(lc, files)
	{
		const char *path = lfirst(lc);
		struct stat st;
		uint64		step;
		off_t		size;

		if (stat(path, &st) < 0 || (uint64) st.st_size <= TSM_SHRINK_STEP_BYTES)
			continue;
		step = tsm_shrink_step_bytes(st.st_size, tsm_ctl_others_idle(&job->ctl));
		for (size = st.st_size; size > 0;)
		{
			size = (uint64) size > step ? size - step : 0;
			if (truncate(path, size) < 0)
				break;
			tsm_ctl_sleep(&job->ctl, TSM_SHRINK_PAUSE_MS);
		}
	}
	list_free_deep(files);
}

/*
 * The pid of a live process that owns a temporary file or file set in the
 * old location's pgsql_tmp (named pgsql_tmp<pid>.<n>), or 0.
 */
static int
old_temporary_file_owner(TsmRelocation *st)
{
	char		path[MAXPGPATH];
	DIR		   *dir;
	struct dirent *de;
	int			owner = 0;

	snprintf(path, sizeof(path), "%s/%s", st->old_dir, PG_TEMP_FILES_DIR);
	dir = AllocateDir(path);
	while (owner == 0 && dir != NULL && (de = ReadDirExtended(dir, path, DEBUG1)) != NULL)
	{
		int			pid;

		if (sscanf(de->d_name, PG_TEMP_FILE_PREFIX "%d.", &pid) == 1 && pid > 0 &&
			(kill(pid, 0) == 0 || errno == EPERM))
			owner = pid;
	}
	if (dir != NULL)
		FreeDir(dir);
	return owner;
}

/*
 * Before the old files go: wait for every backup that began before the
 * switch (none can, as switch_commit checks, unless it started in a way
 * relocation_backups.c cannot see), and for the sessions whose temporary
 * files are still in the old location (created just before the rename: they read
 * them through descriptors they hold; no new one goes there).
 */
static bool
old_files_in_use(TsmRelocation *st, char *what, Size len)
{
	TimestampTz oldest;
	char		backup[MAXPGPATH + 64];
	int			owner;

	if (tsm_backup_running(&oldest, backup, sizeof(backup)) && oldest <= st->switched_at)
	{
		snprintf(what, len, "%s, which began before the switch", backup);
		return true;
	}
	if ((owner = old_temporary_file_owner(st)) != 0)
	{
		snprintf(what, len, "process %d, which has temporary files in \"%s\"", owner, st->old_dir);
		return true;
	}
	return false;
}

static void
wait_for_old_files_users(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;
	char		what[2 * MAXPGPATH];

	while (old_files_in_use(st, what, sizeof(what)))
	{
		tsm_ctl_note(&job->ctl, "waiting for %s, to end before removing the old files", what);
		tsm_ctl_sleep(&job->ctl, 1000);
	}
}

/* Remove the job's marks from both locations. */
static void
remove_marks(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	if (!st->marks_written)
		return;
	tsm_relocmark_remove(st->new_location, job->row.job_id);
	tsm_relocmark_remove(st->old_location, job->row.job_id);
	st->marks_written = false;
}

/* finish: the shared buffers stay valid (relfilenodes are unchanged); remove the old files. */
void
tsm_relocation_finish(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	close_all_files(job);
	wait_for_old_files_users(job);
	tsm_ctl_note(&job->ctl, "%s", "removing the old files");
	tsm_ctl_debug_pause(&job->ctl, "shrinking");
	shrink_old_files(job, st->old_dir);
	remove_old_files(st);
	remove_marks(job);
	release_tablespace_lock(st);
	ereport(LOG,
			(errmsg("pg_tsmove: job %lld relocated tablespace \"%s\" to \"%s\": %lld blocks, "
					"%lld re-copied, %lld copied under the lock, locks held %.1f ms",
					(long long) job->row.job_id, st->spcname, st->new_location,
					(long long) job->ctl.progress.blocks_total,
					(long long) job->ctl.progress.blocks_recopied,
					(long long) job->ctl.progress.blocks_under_lock,
					job->ctl.progress.switch_ms)));
}

/*
 * cleanup: before the rename, the new location is scratch: remove it.
 * After it, finish what the switch left: the old files are removed only
 * once everything created there is copied.
 */
void
tsm_relocation_cleanup(TsmJob *job)
{
	TsmRelocation *st = (TsmRelocation *) job->state;

	if (st == NULL)
		return;
	close_all_files(job);
	if (job->switch_committed)
	{
		char		what[2 * MAXPGPATH];

		if (!st->barrier_done)
			release_old_descriptors(st);
		if (!st->stragglers_done)
			copy_stragglers(st->old_dir, st->new_dir);
		/* cancelled while finish waited: the old files stay for their users */
		if (old_files_in_use(st, what, sizeof(what)))
		{
			ereport(WARNING,
					(errmsg("pg_tsmove left \"%s\" in place: %s, may still read it", st->old_dir, what),
					 errhint("Remove it by hand once that has ended: the tablespace no longer uses it.")));
			remove_marks(job);
			release_tablespace_lock(st);
			return;
		}
		remove_old_files(st);
	}
	else if (st->new_dir_made && !rmtree(st->new_dir, true))
		ereport(WARNING,
				(errmsg("pg_tsmove could not remove all of \"%s\"", st->new_dir),
				 errhint("Remove it by hand: the relocation failed and nothing uses it.")));
	remove_marks(job);
	release_tablespace_lock(st);
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

/*
 * The recovery pass's part: a relocation interrupted by a crash or an
 * immediate shutdown.  The link is the truth: if it points to the new
 * location, the switch happened, and the old files go (after copying what
 * raced the rename); otherwise the new location is scratch.  But a
 * location is removed only if its mark proves it is this data directory's
 * and this job's (relocation_marks.c): in a restored backup or a promoted
 * standby the same paths may hold another cluster's live files.  Runs in
 * the recovery transaction; marks the job.
 */
void
tsm_recover_relocation(const TsmUnfinishedJob *job)
{
	char		link_path[MAXPGPATH];
	char		target[MAXPGPATH];
	int			len;
	char	   *old_dir;
	char	   *new_dir;

	if (job->old_location == NULL || job->new_location == NULL)
	{
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 "interrupted before it created any file");
		return;
	}
	old_dir = psprintf("%s/%s", job->old_location, TABLESPACE_VERSION_DIRECTORY);
	new_dir = psprintf("%s/%s", job->new_location, TABLESPACE_VERSION_DIRECTORY);
	snprintf(link_path, sizeof(link_path), "pg_tblspc/%u", job->target_spc);
	len = readlink(link_path, target, sizeof(target) - 1);
	if (len >= 0)
		target[len] = '\0';

	if (len >= 0 && strcmp(target, job->new_location) == 0 &&
		tsm_relocmark_is_ours(job->old_location, job->job_id))
	{
		copy_stragglers(old_dir, new_dir);
		if (!rmtree(old_dir, true))
			ereport(WARNING,
					(errmsg("pg_tsmove could not remove all of \"%s\"", old_dir)));
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 "the server stopped after the switch; the old files were removed at restart");
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had relocated its tablespace when the server stopped; removed \"%s\"",
						(long long) job->job_id, old_dir)));
	}
	else if (len >= 0 && strcmp(target, job->new_location) == 0 &&
			 tsm_relocmark_is_ours(job->new_location, job->job_id))
	{
		/* the live side is ours: what raced the rename goes there; copying removes nothing */
		copy_stragglers(old_dir, new_dir);
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 psprintf("the server stopped after the switch; \"%s\" was left as it is: "
									  "its mark does not name this data directory", old_dir));
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had relocated its tablespace; \"%s\" does not carry this data directory's mark, left as it is",
						(long long) job->job_id, old_dir)));
	}
	else if (len >= 0 && strcmp(target, job->new_location) == 0)
	{
		tsm_jobrec_set_state(job->job_id, TSM_DONE,
							 psprintf("the server stopped after the switch; \"%s\" was left as it is: "
									  "nothing proves that this data directory wrote it "
									  "(a restored backup or a promoted standby?)", old_dir));
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld had relocated its tablespace; \"%s\" is not this data directory's, left as it is",
						(long long) job->job_id, old_dir)));
	}
	else if (len >= 0 && strcmp(target, job->old_location) == 0 &&
			 tsm_relocmark_is_ours(job->new_location, job->job_id))
	{
		if (access(new_dir, F_OK) == 0 && !rmtree(new_dir, true))
			ereport(WARNING,
					(errmsg("pg_tsmove could not remove all of \"%s\"", new_dir)));
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 "interrupted by a server crash or shutdown; its new files were removed");
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted before its switch; removed \"%s\"",
						(long long) job->job_id, new_dir)));
	}
	else
	{
		tsm_jobrec_set_state(job->job_id, TSM_FAILED,
							 psprintf("interrupted; \"%s\" and \"%s\" were left as they are: the tablespace "
									  "link points to the first, and nothing proves that this data "
									  "directory wrote the other (a restored backup or a promoted standby?)",
									  len >= 0 ? target : "(no link)",
									  len >= 0 && strcmp(target, job->old_location) == 0 ?
									  new_dir : old_dir));
		ereport(LOG,
				(errmsg("pg_tsmove: job %lld was interrupted; nothing proves its directories are this data directory's, left them as they are",
						(long long) job->job_id)));
		return;
	}
	if (tsm_relocmark_is_ours(job->old_location, job->job_id))
		tsm_relocmark_remove(job->old_location, job->job_id);
	if (tsm_relocmark_is_ours(job->new_location, job->job_id))
		tsm_relocmark_remove(job->new_location, job->job_id);
}
