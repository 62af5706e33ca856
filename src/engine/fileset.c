/*-------------------------------------------------------------------------
 *
 * fileset.c
 *	  The set of files a job moves: each one's copy cursor, source length
 *	  and dirty blocks, and the job's totals that follow from them.
 *
 * blocks_total, blocks_copied and dirty_backlog of the job's progress are
 * kept here, incrementally, so that publishing them never walks the set
 * (a relocation may hold thousands of files):
 *	blocks_total  = sum over live files of Max(nblocks, copy_cursor)
 *	blocks_copied = sum over live files of copy_cursor
 *	dirty_backlog = sum over live files of dirty blocks
 * and, for the catch-up, bulk_left = blocks of live files not copied under
 * the switch's locks that are not copied yet.  Every change of those
 * fields goes through the functions below.
 *
 * Only the worker process sees a file set; no locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "port/pg_bitutils.h"
#include "storage/smgr.h"
#include "utils/memutils.h"

#include "engine/engine.h"

void
tsm_fileset_init(TsmFileSet *fs, TsmJobCtl *ctl, const TsmFileSetOps *ops,
				 void *arg)
{
	HASHCTL		hctl;

	memset(fs, 0, sizeof(*fs));
	fs->ctl = ctl;
	fs->ops = ops;
	fs->arg = arg;
	fs->cxt = CurrentMemoryContext;
	fs->strategy = GetAccessStrategy(BAS_BULKREAD);
	hctl.keysize = sizeof(TsmFileKey);
	hctl.entrysize = sizeof(TsmFile);
	hctl.hcxt = fs->cxt;
	fs->files = hash_create("pg_tsmove files", 64, &hctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* Current length of a file at the source; 0 if the fork does not exist. */
BlockNumber
tsm_source_nblocks(TsmFile *f)
{
	SMgrRelation src = tsm_smgropen(f->key.node);

	if (!smgrexists(src, f->key.fork))
		return 0;
	return smgrnblocks(src, f->key.fork);
}

static TsmFileKey
file_key(TsmRelFileNode node, ForkNumber fork)
{
	TsmFileKey	key;

	memset(&key, 0, sizeof(key));
	key.node = node;
	key.fork = fork;
	return key;
}

/* Add a file, empty and not yet copied; returns the existing one if known. */
TsmFile *
tsm_fileset_add(TsmFileSet *fs, TsmRelFileNode node, ForkNumber fork,
				TsmCopyWhen when, bool permanent)
{
	TsmFileKey	key = file_key(node, fork);
	bool		found;
	TsmFile    *f = hash_search(fs->files, &key, HASH_ENTER, &found);

	if (found)
	{
		/* a relfilenode used again after its drop: a new file */
		if (f->gone)
		{
			f->gone = false;
			f->when = when;
			f->permanent = permanent;
			f->created = false;
			f->relid = InvalidOid;
			tsm_file_set_extent(fs, f, tsm_source_nblocks(f), 0);
		}
		return f;
	}
	memset(((char *) f) + sizeof(TsmFileKey), 0, sizeof(TsmFile) - sizeof(TsmFileKey));
	f->when = when;
	f->permanent = permanent;
	f->standard_page = (fork == MAIN_FORKNUM);
	tsm_file_set_extent(fs, f, tsm_source_nblocks(f), 0);
	if (fs->nfiles == fs->capacity)
	{
		fs->capacity = Max(16, fs->capacity * 2);
		fs->order = fs->order ?
			repalloc(fs->order, sizeof(TsmFile *) * fs->capacity) :
			MemoryContextAlloc(fs->cxt, sizeof(TsmFile *) * fs->capacity);
	}
	fs->order[fs->nfiles++] = f;
	return f;
}

TsmFile *
tsm_fileset_find(TsmFileSet *fs, TsmRelFileNode node, ForkNumber fork)
{
	TsmFileKey	key = file_key(node, fork);

	return hash_search(fs->files, &key, HASH_FIND, NULL);
}

/* Set a file's source length and copy cursor, keeping the totals right. */
void
tsm_file_set_extent(TsmFileSet *fs, TsmFile *f, BlockNumber nblocks,
					BlockNumber cursor)
{
	TsmProgress *p = &fs->ctl->progress;

	p->blocks_total -= Max(f->nblocks, f->copy_cursor);
	p->blocks_copied -= f->copy_cursor;
	if (f->when != TSM_COPY_LOCKED && f->nblocks > f->copy_cursor)
		fs->bulk_left -= f->nblocks - f->copy_cursor;
	f->nblocks = nblocks;
	f->copy_cursor = cursor;
	p->blocks_total += Max(f->nblocks, f->copy_cursor);
	p->blocks_copied += f->copy_cursor;
	if (f->when != TSM_COPY_LOCKED && f->nblocks > f->copy_cursor)
		fs->bulk_left += f->nblocks - f->copy_cursor;
}

/* Change how a file is copied (once its relation is known), keeping the totals right. */
void
tsm_file_set_when(TsmFileSet *fs, TsmFile *f, TsmCopyWhen when, bool permanent)
{
	BlockNumber nblocks = f->nblocks;
	BlockNumber cursor = f->copy_cursor;

	tsm_file_set_extent(fs, f, 0, 0);
	f->when = when;
	f->permanent = permanent;
	tsm_file_set_extent(fs, f, nblocks, cursor);
}

/*
 * Mark a block copied earlier as changed since.  Returns true if it was
 * clean: one more page to copy again.
 */
bool
tsm_file_mark_dirty(TsmFileSet *fs, TsmFile *f, BlockNumber blkno)
{
	TsmDirtySet *set = &f->dirty;
	uint32		word = blkno / 64;
	uint64		bit = UINT64CONST(1) << (blkno % 64);

	if (word >= set->nwords)
	{
		uint32		nwords = Max(word + 1, set->nwords * 2);

		if (set->words == NULL)
			set->words = MemoryContextAllocZero(fs->cxt, nwords * sizeof(uint64));
		else
		{
			set->words = repalloc(set->words, nwords * sizeof(uint64));
			memset(set->words + set->nwords, 0,
				   (nwords - set->nwords) * sizeof(uint64));
		}
		set->nwords = nwords;
	}
	if ((set->words[word] & bit) == 0)
	{
		set->words[word] |= bit;
		set->count++;
		fs->ctl->progress.dirty_backlog++;
		return true;
	}
	return false;
}

/* Remove the lowest dirty block from the file's set; false if it is empty. */
bool
tsm_file_take_dirty(TsmFileSet *fs, TsmFile *f, BlockNumber *blkno)
{
	TsmDirtySet *set = &f->dirty;

	if (set->count == 0)
		return false;
	for (uint32 word = 0; word < set->nwords; word++)
	{
		if (set->words[word] != 0)
		{
			int			bit = pg_rightmost_one_pos64(set->words[word]);

			set->words[word] &= ~(UINT64CONST(1) << bit);
			set->count--;
			fs->ctl->progress.dirty_backlog--;
			*blkno = word * 64 + bit;
			return true;
		}
	}
	elog(ERROR, "pg_tsmove dirty set count is %lld but no bit is set",
		 (long long) set->count);
	return false;
}

static void
dirty_clear_from(TsmFileSet *fs, TsmFile *f, BlockNumber from)
{
	TsmDirtySet *set = &f->dirty;

	for (uint32 word = from / 64; word < set->nwords; word++)
	{
		uint64		keep = 0;

		if (word == from / 64 && from % 64 != 0)
			keep = (UINT64CONST(1) << (from % 64)) - 1;
		while ((set->words[word] & ~keep) != 0)
		{
			int			bit = pg_rightmost_one_pos64(set->words[word] & ~keep);

			set->words[word] &= ~(UINT64CONST(1) << bit);
			set->count--;
			fs->ctl->progress.dirty_backlog--;
		}
	}
}

/*
 * The source was truncated to nblocks (the WAL says so): so is the copy,
 * and nothing beyond it is left to copy.
 */
void
tsm_file_truncate(TsmFileSet *fs, TsmFile *f, BlockNumber nblocks)
{
	dirty_clear_from(fs, f, nblocks);
	tsm_file_set_extent(fs, f, Min(f->nblocks, nblocks), Min(f->copy_cursor, nblocks));
	if (f->created)
		fs->ops->truncate(fs, f, nblocks);
}

/* The source was dropped: so is the copy, and nothing is left to copy. */
void
tsm_file_drop(TsmFileSet *fs, TsmFile *f)
{
	if (f->gone)
		return;
	dirty_clear_from(fs, f, 0);
	tsm_file_set_extent(fs, f, 0, 0);
	if (f->created && fs->ops->remove)
		fs->ops->remove(fs, f);
	f->gone = true;
}

/*
 * From now on, note the blocks whose tuples a record moves within their
 * page (mirror.c), forgetting those noted before: a switch attempt's
 * window (reconcile.c).
 */
void
tsm_fileset_track_moved(TsmFileSet *fs)
{
	HASHCTL		hctl;

	if (fs->moved)
		hash_destroy(fs->moved);
	hctl.keysize = sizeof(TsmMovedBlock);
	hctl.entrysize = sizeof(TsmMovedBlock);
	hctl.hcxt = fs->cxt;
	fs->moved = hash_create("pg_tsmove moved blocks", 64, &hctl,
							HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

static void
moved_key(TsmMovedBlock *key, TsmFile *f, BlockNumber blkno)
{
	memset(key, 0, sizeof(*key));
	key->file = f->key;
	key->blkno = blkno;
}

/* A record moved tuples within block blkno of f (if tracked). */
void
tsm_file_mark_moved(TsmFileSet *fs, TsmFile *f, BlockNumber blkno)
{
	TsmMovedBlock key;

	if (fs->moved == NULL)
		return;
	moved_key(&key, f, blkno);
	(void) hash_search(fs->moved, &key, HASH_ENTER, NULL);
}

/* Whether a record moved tuples within block blkno of f since tracked. */
bool
tsm_file_was_moved(TsmFileSet *fs, TsmFile *f, BlockNumber blkno)
{
	TsmMovedBlock key;

	if (fs->moved == NULL)
		return false;
	moved_key(&key, f, blkno);
	return hash_search(fs->moved, &key, HASH_FIND, NULL) != NULL;
}

/*
 * Blocks left to copy before the switch, by the bulk pass or again: the
 * catch-up's measure.  Files copied whole under the switch's locks do not
 * count: that copy does not shrink with time.
 */
int64
tsm_fileset_backlog(TsmFileSet *fs)
{
	return fs->ctl->progress.dirty_backlog + fs->bulk_left;
}

void
tsm_fileset_free(TsmFileSet *fs)
{
	if (fs->files)
		hash_destroy(fs->files);
	if (fs->moved)
		hash_destroy(fs->moved);
	fs->moved = NULL;
	if (fs->order)
		pfree(fs->order);
	if (fs->strategy)
		FreeAccessStrategy(fs->strategy);
	fs->files = NULL;
	fs->order = NULL;
	fs->strategy = NULL;
	fs->nfiles = fs->capacity = 0;
}
