/*-------------------------------------------------------------------------
 *
 * relocation_internal.h
 *	  What the four files of a tablespace relocation share, and nothing
 *	  outside them includes: the job's state, and the helpers one of them
 *	  offers the others.
 *
 * The relocation (DESIGN.md section 5), one file a role; a file calls only
 * those listed below it:
 *	relocation_finish.c		after the switch, remove the old files; after
 *							an error, clean up (tsm_relocation_finish,
 *							tsm_relocation_cleanup)
 *	relocation_switch.c		lock every relation, check, repoint the link,
 *							release the old files (tsm_relocation_switch_*)
 *	relocation_recovery.c	finish or undo a relocation a crash interrupted
 *							(tsm_recover_relocation)
 *	relocation_files.c		list, resolve and copy the files: the sink,
 *							prepare and guard, plain copies
 *							(tsm_relocation_prepare, tsm_relocation_guard)
 * and, below all four, the helpers only the relocation uses:
 * relocation_standby.c (a hot standby's switch), relocation_backups.c,
 * relocation_barrier.c, relocation_dbcatalog.c and relocation_marks.c.  The worker (worker.c) calls the front end's
 * functions; the recovery worker (recovery.c) tsm_recover_relocation().
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_INTERNAL_H
#define TSM_RELOCATION_INTERNAL_H

#include "storage/fd.h"
#include "storage/lock.h"

#include "relocation/relocation.h"

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
	int			short_copies;	/* old files longer than their copies: keep them */
	bool		marks_written;	/* relocation_marks.c, in both locations */
	TimestampTz switched_at;	/* when the link was checked and renamed */
	int			barrier_laggard;	/* the process the last probe named, or 0 */
	TimestampTz barrier_laggard_since;	/* the first probe in a row naming it */
	TimestampTz barrier_laggard_last;	/* the last probe naming it */
	bool		may_terminate;	/* the submitter is still a superuser */
	int			holders_left[8];	/* those that kept the last attempt from
									 * switching (TSM_MAX_HOLDERS_KEPT) */
	LocalTransactionId holders_left_lxid[8];	/* the transaction each ran */
	int			nholders_left;
	bool		proc_untold;	/* /proc failed to tell once: the whole
								 * barrier from then on */
	char	   *holders_dir;	/* old_dir, canonical: the switch waits only
								 * for the processes that hold a file under
								 * it (relocation_holders.c); NULL: for the
								 * whole barrier */
	bool		on_standby;		/* a hot standby's own copy (local job):
								 * relocation_standby.c */
	bool		replay_paused;	/* its switch holds replay paused */
	bool		replay_was_paused;	/* by someone else: not resumed */
} TsmRelocation;

/* The relocation's state, and the sink's state of a file of its set. */
static inline TsmRelocation *
tsm_reloc_state(TsmFileSet *fs)
{
	return (TsmRelocation *) fs->arg;
}

static inline RelocFile *
tsm_reloc_file(TsmFileSet *fs, TsmFile *f)
{
	return &tsm_reloc_state(fs)->files[f->owner];
}

/* relocation_files.c */
extern void tsm_reloc_segment_path(char *path, const char *dir, TsmFile *f,
								   int segno);
extern void tsm_reloc_make_db_dir(TsmRelocation *st, Oid dbid);
extern void tsm_reloc_close_segments(RelocFile *rf);
extern void tsm_reloc_classify(TsmFileSet *fs, TsmFile *f, Oid relid,
							   char relpersistence);
extern TsmFile *tsm_reloc_add_file(TsmFileSet *fs, TsmRelFileNode node,
								   ForkNumber fork, bool listed);
extern void tsm_reloc_resolve(TsmJob *job, bool all);
extern XLogRecPtr tsm_last_checkpoint_redo(void);
extern void tsm_copy_plain_file(const char *from, const char *to);
extern int	tsm_copy_stragglers(const char *old_dir, const char *new_dir);

/* relocation_switch.c */
extern void tsm_reloc_release_old_descriptors(TsmRelocation *st);

/* relocation_standby.c */
extern void tsm_standby_check_not_promoted(TsmRelocation *st);
extern bool tsm_standby_pause_replay(TsmJob *job);
extern void tsm_standby_check_window(TsmRelocation *st);
extern void tsm_standby_before_crash(void);
extern void tsm_standby_end_pause(TsmRelocation *st);
extern void tsm_standby_resume_replay(void);

#endif							/* TSM_RELOCATION_INTERNAL_H */
