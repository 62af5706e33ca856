/*-------------------------------------------------------------------------
 *
 * frontend.h
 *	  A running job, and the front ends the worker drives it with.
 *
 * worker.c drives every job through the same phases; what differs between
 * moving a relation and relocating a tablespace is behind TsmFrontEnd:
 *
 *	prepare			take what the job holds for its whole life, list its
 *					files in the file set, record in the job row what a crash
 *					would leave behind, create the destination
 *	guard			before a batch of one file's blocks is read, in the
 *					batch's transaction: lock its relation if the job does
 *					not hold it yet (TSM_GUARD_LOCKED: the worker then reads
 *					the WAL before reading blocks), or say not now
 *	switch_lock		take the switch's locks, each within
 *					pg_tsmove.switch_lock_timeout; false if one was not
 *					granted (nothing held then), with a note if the reason
 *					was not a lock
 *	switch_check	with the locks held and the WAL read to its end: whether
 *					the switch can go on; may add files to copy under the
 *					locks; false, with a note, to try again later
 *	switch_release	give the locks back after switch_check said no
 *	switch_commit	make the new files the ones in use; from its point of
 *					no return on, job->switch_committed is true; false, with
 *					a note and the locks released, if a last look before
 *					that point found it must wait
 *	finish			after the switch: warm the cache, remove the old files
 *					(or shrink them, for drop_old to remove)
 *	drop_old		NULL, or: in the transaction that records the job as
 *					done, schedule the removal of the old files at its
 *					commit
 *	cleanup			after an error: remove what prepare created unless the
 *					switch committed (and the old files if it did),
 *					release what the job holds
 *
 * Between switch_check and switch_commit the worker flushes the WAL, reads
 * it to the end, copies every dirty and pending block and the files copied
 * under the locks, and fsyncs the destination.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_FRONTEND_H
#define TSM_FRONTEND_H

#include "move/engine.h"
#include "move/job_record.h"
#include "move/switch_blockers.h"

typedef struct TsmJob TsmJob;

typedef enum TsmGuard
{
	TSM_GUARD_SKIP,				/* not now: leave the file for a later batch */
	TSM_GUARD_OK,				/* the job holds its relation already */
	TSM_GUARD_LOCKED			/* locked now: read the WAL before its blocks */
} TsmGuard;

typedef struct TsmFrontEnd
{
	void		(*prepare) (TsmJob *job);
	TsmGuard	(*guard) (TsmJob *job, TsmFile *f);
	bool		(*switch_lock) (TsmJob *job);
	bool		(*switch_check) (TsmJob *job);
	void		(*switch_release) (TsmJob *job);
	bool		(*switch_commit) (TsmJob *job);
	void		(*finish) (TsmJob *job);
	void		(*drop_old) (TsmJob *job);
	void		(*cleanup) (TsmJob *job);
} TsmFrontEnd;

struct TsmJob
{
	TsmClaimedJob row;			/* what the job row says */
	TsmJobCtl	ctl;
	TsmFileSet	files;
	TsmMirror	mirror;
	bool		needs_mirror;	/* false: nothing can change while it copies */
	bool		resumable;		/* resume points are made (a relation move) */
	XLogRecPtr	resume_lsn;		/* resuming: where the mirror reads from */
	TimestampTz last_resume_point;
	const TsmFrontEnd *front;
	void	   *state;			/* the front end's */
	TimestampTz lock_granted;	/* of the switch attempt under way */
	TsmSwitchBlock block;		/* since when the switch is blocked
								 * (switch_blockers.c) */
	bool		switch_committed;	/* the new files are the ones in use */
	MemoryContext cxt;			/* lives as long as the job */
};

/* The two front ends. */
extern const TsmFrontEnd tsm_relation_move;
extern const TsmFrontEnd tsm_tablespace_relocation;

/* job_api.c: checks shared with the worker and tablespace_api.c */
extern void tsm_check_server_can_move(bool online);
extern double tsm_rate_argument(FunctionCallInfo fcinfo, int argno);
extern TsmMoveMode tsm_mode_argument(const char *name, bool *known);
extern void tsm_note_submission(void);
extern int64 tsm_insert_move(Relation rel, Oid target_spc, TsmMoveMode mode,
							 double rate, int64 parent_job, const char *skip_reason);
extern int64 tsm_active_relocation_of(Oid spc);
extern void tsm_check_movable(Relation rel, Oid target_spc, TsmMoveMode mode);
extern void tsm_check_move_privileges(Oid relid, const char *relname,
									  Oid target_spc, Oid role);
extern TsmWorkerSlot *tsm_find_slot_for_job(int64 job_id);
extern void tsm_check_no_relocation_of(Oid spc, const char *what);
extern int64 tsm_active_move_on_tablespace(Oid spc);

/* worker.c */
extern void tsm_worker_session_settings(void);

/* relation_switch.c: the relation move's switch and warming */
extern bool tsm_relation_switch_lock(TsmJob *job);
extern bool tsm_relation_switch_check(TsmJob *job);
extern void tsm_relation_switch_release(TsmJob *job);
extern bool tsm_relation_switch_commit(TsmJob *job);
extern void tsm_relation_warm(TsmJob *job);

/* relation_move.c, for relation_switch.c */
typedef struct TsmRelMember
{
	Oid			relid;
	char		relpersistence;
	bool		standard_pages; /* heap or btree: pages have pd_lower/upper */
	TsmRelFileNode old_node;
	TsmRelFileNode new_node;
	BlockNumber resumed_length; /* resuming: blocks of the new main fork
								 * found on disk, overwritten, not extended */
	BlockNumber *warm_blocks;	/* blocks of the old file in shared buffers */
	int			nwarm;
} TsmRelMember;

typedef struct TsmRelMove
{
	int			nmembers;		/* the relation, its TOAST table and index */
	TsmRelMember members[TSM_MAX_MEMBERS];
	char	   *target_name;
	bool		session_locked;
} TsmRelMove;

extern void tsm_drop_storage(TsmRelFileNode node);
extern void tsm_drop_storage_set(Oid spc, const TsmRelFileNumber *relfilenumbers, int n);

/* relocation.c */
extern char *tsm_check_relocatable(Oid spc, const char *spcname,
								   const char *new_location);
extern void tsm_recover_relocation(const TsmUnfinishedJob *job);

#endif							/* TSM_FRONTEND_H */
