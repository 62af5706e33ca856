/*-------------------------------------------------------------------------
 *
 * pg_tsmove.h
 *	  Declarations shared by the files of pg_tsmove.
 *
 * A move is a job: a row in tsmove.job (the durable record, see
 * control/pg_tsmove--0.1.sql) plus, while it runs, a worker slot in shared
 * memory (the live record: state, counters, cancel flag, rate).  One
 * dynamic background worker runs one slot; it may run several jobs one after
 * another (a table and then its indexes, for with_indexes).
 *
 * Locking of the shared state: TsmShared->lock guards every slot field.
 * move() takes it exclusively to claim a slot; the worker takes it
 * exclusively to publish counters (a few times a second) and to release
 * the slot; readers (tsmove.jobs, wait, cancel) take it shared, except that
 * cancel and set_rate take it exclusively to write their request.
 *
 *-------------------------------------------------------------------------
 */
#ifndef PG_TSMOVE_H
#define PG_TSMOVE_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "storage/block.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/relcache.h"

#include "compat.h"

/* A table moves with its TOAST table and TOAST index: at most three files. */
#define TSM_MAX_MEMBERS 3

typedef enum TsmJobState
{
	TSM_QUEUED,
	TSM_PREPARING,
	TSM_COPYING,
	TSM_CATCHING_UP,
	TSM_SWITCHING,
	TSM_WARMING,
	TSM_DONE,
	TSM_FAILED,
	TSM_CANCELLED
} TsmJobState;

/* One running worker, in shared memory. */
typedef struct TsmWorkerSlot
{
	bool		in_use;
	Oid			dbid;
	int64		chain_head;		/* job id move() started the worker for */
	int64		job_id;			/* job being run now */
	Oid			relid;			/* its relation (claimed: one job per rel) */
	Oid			user_id;		/* the worker runs as this role */
	TransactionId submit_xid;	/* move()'s transaction; the worker waits
								 * for it to end */
	int			pid;
	Latch	   *latch;
	bool		cancel_requested;
	double		max_rate_mb;	/* byte budget, MB/s, 0 = unthrottled */

	/* counters, published by the worker */
	TsmJobState state;
	int64		blocks_total;
	int64		blocks_copied;
	int64		blocks_recopied;
	int64		dirty_backlog;
	int64		bytes_written;
	int64		wal_bytes;
	double		rate_mb_s;
	int			switch_attempts;
	double		lock_wait_ms;
	double		switch_ms;		/* < 0 until the switch happened */
	char		note[160];		/* why the job waits, if it does */
} TsmWorkerSlot;

typedef struct TsmShared
{
	LWLock	   *lock;
	int			nslots;
	TsmWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} TsmShared;

/* pg_tsmove.c: GUCs, shared memory */
extern double tsm_max_rate_mb;
extern int	tsm_switch_lock_timeout_ms;
extern int	tsm_max_workers;
extern int	tsm_switch_backlog_blocks;
extern bool tsm_yield_to_ddl;
extern char *tsm_debug_pause_at;
extern TsmShared *tsm_shared;

extern void tsm_require_preload(void);
extern const char *tsm_state_name(TsmJobState state);
extern bool tsm_state_is_final(TsmJobState state);
extern TsmJobState tsm_state_from_name(const char *name);

/* job.c: the job table, validation, SQL functions */
extern void tsm_check_movable(Relation rel, Oid target_spc);
extern void tsm_job_update_state(int64 job_id, TsmJobState state,
								 const char *error);
extern void tsm_run_as_superuser_begin(Oid *save_userid, int *save_sec);
extern void tsm_run_as_superuser_end(Oid save_userid, int save_sec);
extern uint64 tsm_job_table_update(const char *sql, int nargs, Oid *argtypes,
								   Datum *values, const char *nulls);

/* launcher.c: start-up recovery of jobs a crash left behind */
extern void tsm_register_launcher(void);
extern PGDLLEXPORT void tsm_launcher_main(Datum main_arg);
extern PGDLLEXPORT void tsm_recovery_main(Datum main_arg);

/* worker.c */
extern PGDLLEXPORT void tsm_worker_main(Datum main_arg);

#endif							/* PG_TSMOVE_H */
