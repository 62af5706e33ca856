/*-------------------------------------------------------------------------
 *
 * engine.h
 *	  The move engine, shared by both front ends: a set of files to move
 *	  (fileset.c), copying their pages through shared buffers (copy.c), and
 *	  mirroring every later change of a copied page from the WAL (mirror.c).
 *
 * A file is one fork of one relfilenode at the source.  Where its pages go
 * is the front end's business, behind the sink callbacks of TsmFileSetOps:
 *	- a relation move (relation_move.c) writes them to a new relfilenode in
 *	  the target tablespace, through smgr, WAL-logged;
 *	- a tablespace relocation (relocation_files.c) writes them to the same
 *	  file name under the new location, with plain file I/O, not
 *	  WAL-logged.
 * The worker (worker.c) drives: it alone calls the copy (copy.c) and the
 * mirror (mirror.c), which reach the front end only through the sink.  The
 * front ends and resume.c fill the file set (fileset.c).  Calls go one way:
 * copy.c calls fileset.c and job_control.c, mirror.c calls fileset.c and
 * settings.c, and fileset.c calls nothing (jobs/jobs.h has the map).
 *
 * The folder engine/ also holds what both front ends use beside the copy:
 * reconcile.c (the pages readers changed in a switch's window: frontend.h),
 * resume.c (resume points, resume.h), relation_storage.c (dropping a
 * relation move's files, relation_storage.h), switch_blockers.c (who blocks
 * a switch, and cancelling them, switch_blockers.h), and frontend.h,
 * the contract between the worker and a front end.  engine/ calls only
 * jobs/; workers/, relation/, relocation/ and api/ call it, and only
 * workers/worker.c calls copy.c and mirror.c.
 *
 * How a file is copied (TsmCopyWhen):
 *	TSM_COPY_TRACKED  copied once in the bulk pass, then every block the
 *					  WAL shows changed after its copy is copied again;
 *	TSM_COPY_ONCE	  copied once in the bulk pass; changes are not WAL-logged
 *					  and need not be followed (a relocated FSM: hints);
 *	TSM_COPY_LOCKED   copied whole under the switch's locks, because its
 *					  changes cannot be seen (unlogged relations, and the FSM
 *					  and VM of a relation move).
 *
 * Locking rule of the engine: no block of a file is read into shared
 * buffers unless its relation is locked (the relation move's session lock,
 * the relocation's per-batch AccessShareLock, or the switch's locks), and
 * the WAL has been read after that lock was taken: a relation dropped or
 * truncated before the lock shows in the WAL, so its blocks are never
 * loaded again (a stale buffer of a dropped relfilenode could later be
 * taken for a new relation's).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_ENGINE_H
#define TSM_ENGINE_H

#include "access/xlogreader.h"
#include "storage/buf.h"
#include "storage/bufmgr.h"
#include "utils/hsearch.h"

#include "jobs/job_control.h"

/*
 * After a switch the old files are freed a step at a time, with a pause
 * between steps, not in one ftruncate() or unlink(): freeing a big file at
 * once can stall the disk for everyone (640 MB: a concurrent fdatasync
 * waited 30-45 ms on an ext4 volume with online discard; in 16 MB steps,
 * 4 ms).  A step is TSM_SHRINK_STEP_BYTES, or more for a file so big that
 * it would take more than TSM_SHRINK_MAX_STEPS steps; the whole file at
 * once when nobody else is working (adaptive pacing saw no transactions),
 * as it would be without pg_tsmove.
 */
#define TSM_SHRINK_STEP_BYTES ((uint64) 16 * 1024 * 1024)
#define TSM_SHRINK_MAX_STEPS 1024
#define TSM_SHRINK_PAUSE_MS 10

static inline uint64
tsm_shrink_step_bytes(uint64 file_bytes, bool others_idle)
{
	if (others_idle)
		return Max(file_bytes, 1);
	return Max(TSM_SHRINK_STEP_BYTES, file_bytes / TSM_SHRINK_MAX_STEPS + 1);
}

/* Heap blocks one visibility map page covers (visibilitymap.c's formula). */
#define TSM_VM_BITS_PER_HEAPBLOCK 2
#define TSM_HEAPBLOCKS_PER_VM_BYTE (BITS_PER_BYTE / TSM_VM_BITS_PER_HEAPBLOCK)
#define TSM_HEAPBLOCKS_PER_VM_PAGE \
	((BLCKSZ - MAXALIGN(SizeOfPageHeaderData)) * TSM_HEAPBLOCKS_PER_VM_BYTE)

typedef enum TsmCopyWhen
{
	TSM_COPY_TRACKED,
	TSM_COPY_ONCE,
	TSM_COPY_LOCKED
} TsmCopyWhen;

/* Blocks of one file that changed after they were copied. */
typedef struct TsmDirtySet
{
	uint64	   *words;
	uint32		nwords;
	int64		count;
} TsmDirtySet;

typedef struct TsmFileKey
{
	TsmRelFileNode node;
	ForkNumber	fork;
} TsmFileKey;

typedef struct TsmFile
{
	TsmFileKey	key;			/* hash key: the source */
	TsmCopyWhen when;
	bool		permanent;		/* WAL-logged relation (BM_PERMANENT buffers) */
	bool		standard_page;	/* pages have pd_lower/pd_upper */
	bool		created;		/* its destination exists */
	bool		gone;			/* dropped at the source */
	BlockNumber copy_cursor;	/* blocks [0, copy_cursor) are copied */
	BlockNumber nblocks;		/* length of the source, last seen */
	TsmDirtySet dirty;
	Oid			relid;			/* its relation, for locks; 0 if unknown */
	int			owner;			/* the front end's own number for it */
} TsmFile;

typedef struct TsmFileSet TsmFileSet;

/* What the front end does for the engine. */
typedef struct TsmFileSetOps
{
	/* the sink: the destination of a file */
	void		(*create) (TsmFileSet *fs, TsmFile *f);
	void		(*write) (TsmFileSet *fs, TsmFile *f, BlockNumber blkno,
						  char *page, bool extend);
	void		(*writeback) (TsmFileSet *fs, TsmFile *f, BlockNumber first,
							  BlockNumber nblocks);
	void		(*truncate) (TsmFileSet *fs, TsmFile *f, BlockNumber nblocks);
	void		(*sync) (TsmFileSet *fs, TsmFile *f);
	void		(*remove) (TsmFileSet *fs, TsmFile *f);


	/* for a set that follows a tablespace (below) */
	void		(*new_file) (TsmFileSet *fs, TsmRelFileNode node, ForkNumber fork);
	void		(*foreign_change) (TsmFileSet *fs, const char *what);
} TsmFileSetOps;

struct TsmFileSet
{
	HTAB	   *files;			/* TsmFileKey -> TsmFile */
	TsmFile   **order;			/* in the order they were added */
	int			nfiles;
	int			capacity;
	TsmJobCtl  *ctl;			/* counters live in ctl->progress */
	int64		bulk_left;		/* blocks of files not copied under the
								 * locks, not copied yet */
	const TsmFileSetOps *ops;
	void	   *arg;			/* the front end's state */

	/*
	 * Tablespace whose new files, truncations and drops the mirror follows
	 * (a relocation): ops->new_file() is asked to add a file it sees for the
	 * first time, ops->foreign_change() to fail on a database- or
	 * tablespace-level change.  InvalidOid (a relation move): only the
	 * set's own files are followed (truncated; dropped fails the job).
	 */
	Oid			follow_tablespace;
	/*
	 * Set by the worker while it copies under a switch that lets readers on
	 * (frontend.h): each page copied is also written to the file it was
	 * read from, if its buffer is dirty (reconcile.c).
	 */
	bool		flush_source;
	/*
	 * Set by the worker under a switch's locks: a sink that WAL-logs a page
	 * may register its fsync with the checkpointer as it writes it, and skip
	 * its own fsync there if no checkpoint began since sync_redo (the
	 * redo pointer before the first such page): a checkpoint that began
	 * later has its redo pointer after the page's record and finds the
	 * request queued (core's bulk_write.c, PG 17, reasons so).  The lock
	 * then covers no fsync of what changed while it was awaited.
	 */
	bool		register_syncs;
	XLogRecPtr	sync_redo;
	/*
	 * From then on, the blocks whose tuples a record moved within their
	 * page (a pruning: TsmMovedBlock), for the reconciliation of that
	 * window; NULL when not tracked (reconcile.c).
	 */
	HTAB	   *moved;
	BufferAccessStrategy strategy;
	MemoryContext cxt;
};

/* A block of a file whose tuples moved within the page (fs->moved). */
typedef struct TsmMovedBlock
{
	TsmFileKey	file;
	BlockNumber blkno;
} TsmMovedBlock;

/* The WAL reader that turns changes of copied blocks into dirty blocks. */
typedef struct TsmMirror
{
	XLogReaderState *reader;
	XLogRecPtr	start_lsn;		/* changes from here on are seen */
	XLogRecPtr	next_lsn;		/* start of the next record to decode, or
								 * invalid until the first one is found */
	TimestampTz last_slot_advance;
	char		slot_name[NAMEDATALEN];
	bool		persistent;		/* the slot stays at the last resume point */
	bool		slot_created;
	bool		started;
} TsmMirror;

/* fileset.c */
extern void tsm_fileset_init(TsmFileSet *fs, TsmJobCtl *ctl,
							 const TsmFileSetOps *ops, void *arg);
extern TsmFile *tsm_fileset_add(TsmFileSet *fs, TsmRelFileNode node,
								ForkNumber fork, TsmCopyWhen when, bool permanent);
extern TsmFile *tsm_fileset_find(TsmFileSet *fs, TsmRelFileNode node,
								 ForkNumber fork);
extern void tsm_file_set_extent(TsmFileSet *fs, TsmFile *f,
								BlockNumber nblocks, BlockNumber cursor);
extern void tsm_file_set_when(TsmFileSet *fs, TsmFile *f, TsmCopyWhen when,
							  bool permanent);
extern bool tsm_file_mark_dirty(TsmFileSet *fs, TsmFile *f, BlockNumber blkno);
extern bool tsm_file_take_dirty(TsmFileSet *fs, TsmFile *f, BlockNumber *blkno);
extern void tsm_file_truncate(TsmFileSet *fs, TsmFile *f, BlockNumber nblocks);
extern void tsm_file_drop(TsmFileSet *fs, TsmFile *f);
extern void tsm_fileset_track_moved(TsmFileSet *fs);
extern void tsm_file_mark_moved(TsmFileSet *fs, TsmFile *f, BlockNumber blkno);
extern bool tsm_file_was_moved(TsmFileSet *fs, TsmFile *f, BlockNumber blkno);
extern int64 tsm_fileset_backlog(TsmFileSet *fs);
extern void tsm_fileset_free(TsmFileSet *fs);
extern BlockNumber tsm_source_nblocks(TsmFile *f);

/* copy.c */
extern bool tsm_read_page(TsmFileSet *fs, TsmFile *f, BlockNumber blkno,
						  char *page);
extern int64 tsm_copy_file(TsmFileSet *fs, TsmFile *f, int64 max_blocks,
						   bool include_dirty, bool throttled);
extern void tsm_copy_file_whole(TsmFileSet *fs, TsmFile *f);
extern void tsm_fileset_sync(TsmFileSet *fs);

/* reconcile.c */
extern void tsm_fileset_flush_buffers(TsmFileSet *fs);
extern int64 tsm_reconcile_file(TsmFileSet *fs, TsmFile *f);

/* mirror.c */
extern void tsm_mirror_start(TsmMirror *mirror, MemoryContext cxt,
							 const char *slot_name, bool persistent,
							 XLogRecPtr resume_lsn);
extern void tsm_mirror_drain(TsmMirror *mirror, TsmFileSet *fs);
extern XLogRecPtr tsm_mirror_position(TsmMirror *mirror);
extern void tsm_mirror_keep_from(TsmMirror *mirror, XLogRecPtr lsn);
extern void tsm_mirror_stop(TsmMirror *mirror, bool keep_slot);

#endif							/* TSM_ENGINE_H */
