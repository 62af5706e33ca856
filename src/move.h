/*-------------------------------------------------------------------------
 *
 * move.h
 *	  The in-memory state of one running move, shared by the worker's files:
 *	  worker.c (phases, throttle), copy.c (new storage, page copies),
 *	  mirror.c (WAL reader, dirty blocks) and switch.c (the switch, warming);
 *	  and the checks job.c shares with the worker.
 *
 * Only the worker process sees a TsmJob; what other backends see is
 * published to its TsmWorkerSlot by tsm_publish_progress().
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_MOVE_H
#define TSM_MOVE_H

#include "pg_tsmove.h"

#include "access/xlogreader.h"
#include "storage/bufmgr.h"

/* Blocks of one file that changed after they were copied. */
typedef struct TsmDirtySet
{
	uint64	   *words;
	uint32		nwords;
	int64		count;
} TsmDirtySet;

/* One file set that moves: the relation, its TOAST table or TOAST index. */
typedef struct TsmMember
{
	Oid			relid;
	bool		standard_pages; /* heap or btree: pages have pd_lower/upper */
	TsmRelFileNode old_node;
	TsmRelFileNode new_node;
	BlockNumber copy_cursor;	/* blocks [0, copy_cursor) are copied */
	BlockNumber nblocks;		/* length of the old main fork, last seen */
	TsmDirtySet dirty;
	BlockNumber *warm_blocks;	/* blocks of the old file in shared buffers */
	int			nwarm;
} TsmMember;

/* The WAL reader that turns changes of copied blocks into dirty blocks. */
typedef struct TsmMirror
{
	XLogReaderState *reader;
	XLogRecPtr	start_lsn;		/* changes from here on are seen */
	XLogRecPtr	next_lsn;		/* start of the next record to decode, or
								 * invalid until the first one is found */
	TimestampTz last_slot_advance;
	bool		slot_created;
} TsmMirror;

typedef struct TsmJob
{
	int64		job_id;
	Oid			relid;
	char	   *relname;
	Oid			source_spc;		/* real tablespace OIDs, never 0 */
	Oid			target_spc;
	char	   *target_name;
	Oid			submitted_by;	/* the worker acts as this role */
	TsmRelFileNumber submitted_relfilenode;	/* what move() saw */
	bool		online;			/* false: quiesce mode */
	int			nmembers;
	TsmMember	members[TSM_MAX_MEMBERS];
	bool		storage_created;
	bool		switch_committed;	/* the switch's commit record is written:
									 * the new files are the relation's */
	bool		session_locked;
	TsmMirror	mirror;
	BufferAccessStrategy strategy;
	MemoryContext cxt;			/* lives as long as the job */

	/* throttle */
	double		max_rate_mb;
	TimestampTz budget_start;
	int64		budget_spent;

	/* counters */
	int64		blocks_recopied;
	int64		bytes_written;
	int64		wal_bytes;
	int64		wal_usage_at_start;
	int			switch_attempts;
	double		lock_wait_ms;
	double		switch_ms;
	TimestampTz rate_sample_time;
	int64		rate_sample_bytes;
	double		rate_mb_s;
	TsmJobState state;
	char		note[TSM_NOTE_LEN];
} TsmJob;

/* job.c */
extern void tsm_check_movable(Relation rel, Oid target_spc);
extern void tsm_check_move_privileges(Oid relid, const char *relname,
									  Oid target_spc, Oid role);
extern TsmWorkerSlot *tsm_find_slot_for_job(int64 job_id);

/* worker.c */
extern TsmWorkerSlot *tsm_my_slot;
extern void tsm_check_for_cancel(TsmJob *job);
extern void tsm_account_write(TsmJob *job, bool throttled);
extern void tsm_publish_progress(TsmJob *job, bool force);
extern void tsm_set_state(TsmJob *job, TsmJobState state);
extern int64 tsm_job_dirty_backlog(TsmJob *job);
extern void tsm_debug_pause(TsmJob *job, const char *phase);
extern void tsm_worker_session_settings(void);

/* copy.c */
extern void tsm_create_new_storage(TsmJob *job);
extern void tsm_drop_storage(TsmRelFileNode node);
extern int64 tsm_copy_pending(TsmJob *job, TsmMember *m, int64 max_blocks,
							  bool include_dirty, bool throttled);
extern void tsm_copy_extra_forks(TsmJob *job);
extern void tsm_sync_new_storage(TsmJob *job);

/* mirror.c */
extern bool tsm_dirty_take_next(TsmDirtySet *set, BlockNumber *blkno);
extern void tsm_mirror_start(TsmJob *job);
extern void tsm_mirror_drain(TsmJob *job);
extern void tsm_mirror_stop(TsmJob *job);

/* switch.c */
extern bool tsm_try_switch(TsmJob *job);
extern void tsm_warm_new_storage(TsmJob *job);

#endif							/* TSM_MOVE_H */
