/*-------------------------------------------------------------------------
 *
 * pacing.h
 *	  Adaptive pacing of a move by what the other sessions feel (pacing.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_PACING_H
#define TSM_PACING_H

#include "datatype/timestamp.h"

#include "jobs/jobs.h"

/* Regular backends watched; more are sampled in turn. */
#define TSM_PACER_MAX_BACKENDS 1024
/* The baseline is the median count of this many last probes. */
#define TSM_PACER_PROBES_KEPT 3
/*
 * What a scattered read costs the pace beyond its page's bytes: a changed
 * block re-copied after it left shared buffers (copy.c): two pages.
 */
#define TSM_PACER_SCATTERED_READ_COST (2 * BLCKSZ)

typedef struct TsmPacer
{
	double		pace_mb;		/* the budget now, MB/s; 0 = unthrottled */
	bool		others_idle;	/* the last decision saw no other session working */
	bool		restarting;		/* tsm_pacer_restart(): the next tick starts
								 * afresh */
	bool		held_at_floor;	/* the last decision would have cut the pace
								 * below the floor: the others suffer, and
								 * the floor keeps the copy going */
	TimestampTz next_sample;
	TimestampTz next_decision;

	/* transactions of regular backends, from their local xids */
	int			watched;		/* backends sampled: Min(MaxConnections, max) */
	int			last_pid[TSM_PACER_MAX_BACKENDS];
	uint32		last_lxid[TSM_PACER_MAX_BACKENDS];
	int64		transactions;	/* counted since the window started */
	TimestampTz window_start;
	double		recent_tps[2];	/* the last two decision windows */

	/* the throughput with the move holding still, from probes */
	double		base_tps;		/* < 0 until the first probe */
	double		probe_tps[TSM_PACER_PROBES_KEPT];	/* the last probes' counts */
	int			nprobes;		/* probes since the foreground last changed */
	TimestampTz probe_start;	/* 0: no probe under way */
	TimestampTz next_probe;

	/*
	 * What the copy achieves and makes dirty, for the ceiling and floor:
	 * the counters as they were at counters_read (a probe may lie between
	 * two decisions, so this is not the window's start).
	 */
	TimestampTz counters_read;
	int64		last_bytes;		/* bytes written plus scattered reads' cost */
	int64		last_dirtied;
	int64		last_changed_ahead;
	int64		last_recopied;
	int64		last_scattered;
	double		scattered_share;	/* of the re-copies read in, lately */
	double		achieved_mb;
	double		floor_mb;
	double		dirtying_pages; /* pages/s the others make dirty */
	double		changing_ahead_pages;	/* pages/s they change ahead of the cursor */
} TsmPacer;

/* What a job has done so far (counts since it started), for its pacer. */
typedef struct TsmPacerCounts
{
	int64		bytes;			/* pages written plus the WAL that logs them */
	int64		read_cost;		/* charged for scattered reads, beyond bytes */
	int64		pages;			/* pages written */
	int64		dirtied;		/* the others' changes the copy must outpace */
	int64		changed_ahead;	/* their changes ahead of the cursor */
	int64		recopied;		/* blocks re-copied */
	int64		scattered;		/* of them, read in (scattered reads) */
	int64		catchup_backlog;	/* dirty blocks in a catch-up, else 0 */
} TsmPacerCounts;

extern void tsm_pacer_init(TsmPacer *pacer);
extern bool tsm_pacer_tick(TsmPacer *pacer, TimestampTz now, double ceiling_mb,
						   const TsmPacerCounts *counts);
extern bool tsm_pacer_sprint(TsmPacer *pacer, int64 backlog);
extern void tsm_pacer_restart(TsmPacer *pacer);
extern double tsm_pacer_budget_mb(TsmPacer *pacer);

#endif							/* TSM_PACING_H */
