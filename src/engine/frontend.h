/*-------------------------------------------------------------------------
 *
 * frontend.h
 *	  A running job, and the front ends the worker drives it with.
 *
 * worker.c drives every job through the same phases; what differs between
 * moving a relation and relocating a tablespace is behind TsmFrontEnd:
 *
 *	settle			NULL, or: before the mirror starts and anything is
 *					listed, wait for what began before the job was claimed
 *					and could not see it (a relocation: statements holding
 *					the creation guard)
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
 *					that point found it must wait; true with the locks
 *					released, or, with switch_end, still held, and with
 *					interrupts held and ctl.stops_held set from its point
 *					of no return (the worker resumes them once the window
 *					is logged)
 *	switch_end		NULL, or: after switch_commit, with the locks still held
 *					and the pages changed in the window reconciled (below):
 *					end the switch and release the locks
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
 * job->switch_lockmode is the mode of the switch's relation locks.
 * AccessExclusiveLock (a relation move, and a relocation by default)
 * freezes the relations.  ExclusiveLock (a relocation with the
 * experimental pg_tsmove.relocation_switch_admits_readers) stops every
 * writer but lets readers on,
 * and readers still change pages: on-access pruning and, with checksums,
 * hint bits are WAL-logged.  A page so changed after its last copy and
 * written through a descriptor of the old file is missing from the new
 * one, and a page read back may lack it.  So, with such a switch, the
 * worker also writes every dirty buffer of the set to the old files before
 * switch_commit (all before the locks, then each page it copies under
 * them: old and new files then differ only by what readers change), and,
 * after it, with the locks still held and every old descriptor closed,
 * reads the WAL of the window and logs whole each page it changed, as the
 * buffer has it (reconcile.c), so that crash recovery and standbys
 * converge on the primary's pages; then it calls switch_end.
 *
 * The worker gathers each front end's functions into its TsmFrontEnd
 * (workers/worker.c) and is the only one that calls them, as it is the
 * only one that calls the copy (copy.c) and the mirror (mirror.c).  The
 * front ends declare their functions in relation/relation.h and
 * relocation/relocation.h.  A front end calls down only: the file set
 * (fileset.c), the rest of engine/ but the copy and the mirror, and jobs/;
 * never the worker, the engine's copy or mirror, or the other front end.
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_FRONTEND_H
#define TSM_FRONTEND_H

#include "engine/engine.h"
#include "jobs/job_record.h"
#include "engine/switch_blockers.h"

typedef struct TsmJob TsmJob;

typedef enum TsmGuard
{
	TSM_GUARD_SKIP,				/* not now: leave the file for a later batch */
	TSM_GUARD_OK,				/* the job holds its relation already */
	TSM_GUARD_LOCKED			/* locked now: read the WAL before its blocks */
} TsmGuard;

typedef struct TsmFrontEnd
{
	void		(*settle) (TsmJob *job);
	void		(*prepare) (TsmJob *job);
	TsmGuard	(*guard) (TsmJob *job, TsmFile *f);
	bool		(*switch_lock) (TsmJob *job);
	bool		(*switch_check) (TsmJob *job);
	void		(*switch_release) (TsmJob *job);
	bool		(*switch_commit) (TsmJob *job);
	void		(*switch_end) (TsmJob *job);
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
	LOCKMODE	switch_lockmode;	/* of the switch's relation locks (above) */
	bool		flush_under_locks;	/* set by switch_lock: the worker writes
									 * every dirty buffer of the set, under the
									 * locks, before switch_commit (a
									 * relocation's: relocation_holders.c) */
	bool		flushes_before_switch;	/* set by the front end: and writes them
										 * all before each attempt's locks too,
										 * so that few are left for under them */
	TimestampTz lock_granted;	/* of the switch attempt under way */
	TsmSwitchBlock block;		/* since when the switch is blocked
								 * (switch_blockers.c) */
	TsmVacuumYield vacuum_yield;	/* the copy's holds for a VACUUM
									 * (worker.c) */
	bool		switch_committed;	/* the new files are the ones in use */
	MemoryContext cxt;			/* lives as long as the job */
};

#endif							/* TSM_FRONTEND_H */
