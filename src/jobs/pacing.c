/*-------------------------------------------------------------------------
 *
 * pacing.c
 *	  Adaptive pacing: a move goes as fast as the other sessions can bear,
 *	  judged by their throughput, not by a byte rate chosen in advance.
 *
 * What the foreground feels is measured where it shows: in how many
 * transactions the regular backends finish per second.  Each backend's
 * PGPROC carries the local id of its current transaction, which grows by
 * one per transaction; sampling those ids every TSM_PACER_SAMPLE_MS and
 * adding up how far they moved counts transactions of every kind (read-only
 * ones too, which write no commit record), without a lock and without
 * asking the sessions anything.
 *
 * What the throughput would be without the move is measured by probes:
 * when other sessions are busy, every TSM_PACER_PROBE_EVERY_MS the move
 * holds still for a moment (TSM_PACER_PROBE_SETTLE_MS for its last writes
 * to drain, then TSM_PACER_PROBE_MEASURE_MS counted, longer the first
 * time); base_tps is the median of the last TSM_PACER_PROBES_KEPT counts,
 * so that one probe spoiled by a stray fsync stall does not make the
 * others' suffering look like their normal (a single short probe read
 * TPC-B a fifth low, and the pace rose while they lost a fifth), nor one
 * lucky count their suffering look like more than it is (the highest of
 * three 600 ms counts read TPC-B about 5 % high, so a 95 % target held
 * the pace at its floor while TPC-B ran at 95-100 %); a count that
 * differs from it by more than 2x replaces them all.
 *
 * The pace (a byte budget, as with fixed pacing) is decided every
 * TSM_PACER_DECISION_MS from the throughput of the last two windows:
 *	- below pg_tsmove.pacing_target percent of base_tps: cut, by more the
 *	  further below (at least x0.7), so a suffering foreground gets relief
 *	  within a second;
 *	- otherwise raise it by a quarter, up to the job's max_rate_mb (or
 *	  unthrottled if it has none), and never far above what the copy
 *	  actually achieves (no wind-up while it is bound elsewhere);
 *	- never below the floor, what the move needs to end:
 *	  pg_tsmove.min_rate_mb, and in pages per second C + A/S + B/T, in
 *	  bytes at what a page has cost the job so far, divided by the share
 *	  of the time the copy runs between probes.  C is the rate at which
 *	  the other sessions change pages the copy must outpace (mirror.c
 *	  counts them: a copied page made dirty, once until it is copied
 *	  again however hot it is); A the rate of their changes ahead of the
 *	  cursor, counted at a share 1/S (TSM_PACER_AHEAD_SHARE); B the
 *	  catch-up's backlog of dirty pages (none during the bulk copy) and
 *	  T is TSM_PACER_CATCHUP_SECONDS.
 *	  While the pace binds, a re-copy that had to be read in (a scattered
 *	  read, not served by readahead) costs TSM_PACER_SCATTERED_READ_COST
 *	  more than its bytes (job_control.c charges it); the floor prices C at
 *	  what re-copies have lately cost, that share of reads included, and
 *	  B/T at the bytes alone, so a cold backlog drains over up to
 *	  T (1 + read cost / page).
 *	  A catch-up at C + B/T pages/s (nothing is ahead of its cursor)
 *	  shrinks its backlog by B/T a second, whatever C is: it ends in a
 *	  few T, and sprints at the ceiling once at most
 *	  TSM_PACER_SPRINT_SECONDS of changes are left.  A fixed multiple of
 *	  C (the floor before) either hovers with a backlog for a minute
 *	  (1.25 C, less the probes' holds) or copies faster than the move
 *	  needs, at the others' cost (2 C).
 *	  The bulk copy ends at any pace; its floor only keeps it from
 *	  crawling while the table is busy.  A page changed ahead of the
 *	  cursor is read later whatever the pace, so those changes count at a
 *	  quarter: counted in full (each change, both pages of an update),
 *	  they held the bulk copy of a TPC-B table at 70-100 MB/s from its
 *	  first second, at the others' cost; not counted, a bulk copy beside
 *	  TPC-B in a test cluster crawled at under 2 MB/s, its pace cut by
 *	  every noisy window.  The floor counts the others' changes, never
 *	  the copy's own re-copies (a floor on those ratcheted up with the
 *	  pace);
 *	- when no other session runs transactions there is nothing to protect:
 *	  the pace is the ceiling at once, unthrottled by default.
 *
 * Only the worker that owns a pacer uses it; it reads other backends'
 * PGPROCs without locks (a torn or stale value costs one sample).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/timestamp.h"

#include "jobs/pacing.h"

#define TSM_PACER_SAMPLE_MS 10
#define TSM_PACER_DECISION_MS 500
/* The first decision comes sooner: an idle server gets the ceiling at once. */
#define TSM_PACER_FIRST_DECISION_MS 100
#define TSM_PACER_PROBE_EVERY_MS 5000
#define TSM_PACER_PROBE_SETTLE_MS 150
#define TSM_PACER_PROBE_MEASURE_MS 600
/* The first probe, with nothing to compare it with, counts longer. */
#define TSM_PACER_FIRST_PROBE_MEASURE_MS 1000
/* Fewer transactions per second than this is an idle server. */
#define TSM_PACER_IDLE_TPS 5.0
/* The pace when other sessions first show up. */
#define TSM_PACER_START_MB 16.0
/* A pace this high is no pace: the copy runs unthrottled. */
#define TSM_PACER_UNTHROTTLED_MB 2048.0
#define TSM_PACER_GROWTH 1.25
/* The floor shrinks a catch-up's backlog by 1/T of it a second. */
#define TSM_PACER_CATCHUP_SECONDS 10.0
/* The bulk copy's floor counts changes ahead of its cursor at 1/this. */
#define TSM_PACER_AHEAD_SHARE 4.0
/* The share of re-copies read in is measured over at least this many. */
#define TSM_PACER_SHARE_MIN_RECOPIES 64
/* A catch-up with this many seconds of the others' changes left sprints. */
#define TSM_PACER_SPRINT_SECONDS 2.0
/* The share of the time the copy runs while the others are busy: probes hold it. */
#define TSM_PACER_COPY_DUTY \
	(1.0 - (double) (TSM_PACER_PROBE_SETTLE_MS + TSM_PACER_PROBE_MEASURE_MS) / \
	 TSM_PACER_PROBE_EVERY_MS)

/*
 * The pacer starts counting at its first tick, not here: a job can reach
 * its first page after the first window has ended (a relocation beside
 * TPC-B did), and a window that no sample covered counts no transactions,
 * which reads as an idle server and gave the copy its ceiling: that
 * relocation copied 300 MB unthrottled.
 */
void
tsm_pacer_init(TsmPacer *pacer)
{
	memset(pacer, 0, sizeof(*pacer));
	pacer->pace_mb = TSM_PACER_START_MB;
	pacer->base_tps = -1;
	pacer->watched = Min(MaxConnections, TSM_PACER_MAX_BACKENDS);
}

/* Add up how far the regular backends' local transaction ids moved. */
static void
pacer_sample(TsmPacer *pacer)
{
	for (int i = 0; i < pacer->watched; i++)
	{
		volatile PGPROC *proc = GetPGProcByNumber(i);
		int			pid = proc->pid;
		uint32		lxid = TSM_PROC_LXID(proc);

		if (pid != pacer->last_pid[i])
		{
			pacer->last_pid[i] = pid;
			pacer->last_lxid[i] = lxid;
			continue;
		}
		if (pid == 0 || lxid == InvalidLocalTransactionId)
			continue;
		if (pacer->last_lxid[i] != InvalidLocalTransactionId &&
			lxid > pacer->last_lxid[i])
			pacer->transactions += lxid - pacer->last_lxid[i];
		pacer->last_lxid[i] = lxid;
	}
}

static double
seconds_between(TimestampTz start, TimestampTz stop)
{
	return Max(tsm_ms_between(start, stop) / 1000.0, 0.001);
}

static void
start_window(TsmPacer *pacer, TimestampTz now)
{
	pacer->window_start = now;
	pacer->transactions = 0;
	pacer->next_decision = TimestampTzPlusMilliseconds(now, TSM_PACER_DECISION_MS);
}

/* The median of the n (at most TSM_PACER_PROBES_KEPT) probe counts kept. */
static double
probes_median(const double *counts, int n)
{
	double		sorted[TSM_PACER_PROBES_KEPT];

	memcpy(sorted, counts, n * sizeof(double));
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--)
		{
			double		swap = sorted[j];

			sorted[j] = sorted[j - 1];
			sorted[j - 1] = swap;
		}
	return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/* Probe: hold still, then count.  Returns whether the probe goes on. */
static bool
pacer_probe(TsmPacer *pacer, TimestampTz now)
{
	TimestampTz settled = TimestampTzPlusMilliseconds(pacer->probe_start,
													  TSM_PACER_PROBE_SETTLE_MS);
	double		tps;

	if (now < settled)
	{
		pacer->transactions = 0;
		pacer->window_start = now;
		return true;
	}
	if (now < TimestampTzPlusMilliseconds(settled, pacer->nprobes == 0 ?
										  TSM_PACER_FIRST_PROBE_MEASURE_MS :
										  TSM_PACER_PROBE_MEASURE_MS))
		return true;
	tps = pacer->transactions / seconds_between(pacer->window_start, now);
	/* the last few probes, unless the foreground changed its mind */
	if (pacer->base_tps < 0 || tps < TSM_PACER_IDLE_TPS ||
		tps > 2 * pacer->base_tps || tps < pacer->base_tps / 2)
		pacer->nprobes = 0;
	pacer->probe_tps[pacer->nprobes % TSM_PACER_PROBES_KEPT] = tps;
	pacer->nprobes++;
	pacer->base_tps = probes_median(pacer->probe_tps,
									Min(pacer->nprobes, TSM_PACER_PROBES_KEPT));
	pacer->probe_start = 0;
	pacer->next_probe = TimestampTzPlusMilliseconds(now, TSM_PACER_PROBE_EVERY_MS);
	pacer->recent_tps[0] = pacer->recent_tps[1] = -1;
	start_window(pacer, now);
	return false;
}

/*
 * Decide the pace from the window that ends now.  Returns true if a probe
 * starts.
 */
static bool
pacer_decide(TsmPacer *pacer, TimestampTz now, double ceiling_mb,
			 const TsmPacerCounts *counts)
{
	double		secs = seconds_between(pacer->window_start, now);
	double		counted_secs = seconds_between(pacer->counters_read, now);
	double		tps = pacer->transactions / secs;
	double		recent;
	double		ceiling = ceiling_mb > 0 ? ceiling_mb : TSM_PACER_UNTHROTTLED_MB;
	double		bytes_per_page;
	double		outpaced_page;
	double		floor_bytes;
	int64		recopied = counts->recopied - pacer->last_recopied;

	/* what a page costs (written, and its compressed image in the WAL) */
	bytes_per_page = counts->pages > 0 ? (double) counts->bytes / counts->pages : 2.0 * BLCKSZ;
	pacer->achieved_mb = (counts->bytes + counts->read_cost - pacer->last_bytes) /
		counted_secs / (1024.0 * 1024.0);
	pacer->dirtying_pages = (counts->dirtied - pacer->last_dirtied) / counted_secs;
	pacer->changing_ahead_pages = (counts->changed_ahead - pacer->last_changed_ahead) /
		counted_secs;
	if (recopied >= TSM_PACER_SHARE_MIN_RECOPIES)
	{
		pacer->scattered_share = (double) (counts->scattered - pacer->last_scattered) /
			recopied;
		pacer->last_recopied = counts->recopied;
		pacer->last_scattered = counts->scattered;
	}
	pacer->counters_read = now;
	pacer->last_bytes = counts->bytes + counts->read_cost;
	pacer->last_dirtied = counts->dirtied;
	pacer->last_changed_ahead = counts->changed_ahead;

	/*
	 * In the catch-up, the pages changed again are re-copied at what they
	 * have lately cost, scattered reads included; the backlog drains at B/T
	 * at the bytes alone, over up to T (1 + read cost / page) if it is all
	 * read in.
	 */
	outpaced_page = bytes_per_page;
	if (counts->catchup_backlog > 0)
		outpaced_page += TSM_PACER_SCATTERED_READ_COST * pacer->scattered_share;
	floor_bytes = pacer->dirtying_pages * outpaced_page +
		pacer->changing_ahead_pages / TSM_PACER_AHEAD_SHARE * bytes_per_page;
	if (counts->catchup_backlog > 0)
		floor_bytes += counts->catchup_backlog / TSM_PACER_CATCHUP_SECONDS * bytes_per_page;
	floor_bytes /= TSM_PACER_COPY_DUTY;
	pacer->floor_mb = Min(Max(tsm_min_rate_mb, floor_bytes / (1024.0 * 1024.0)),
						  ceiling);

	recent = pacer->recent_tps[0] < 0 ? tps : (pacer->recent_tps[0] + tps) / 2;
	pacer->recent_tps[1] = pacer->recent_tps[0];
	pacer->recent_tps[0] = tps;
	start_window(pacer, now);
	pacer->held_at_floor = false;
	pacer->others_idle = (recent < TSM_PACER_IDLE_TPS &&
						  (pacer->base_tps < 0 || pacer->base_tps < TSM_PACER_IDLE_TPS));
	if (pacer->others_idle)
	{
		/* nobody else is working */
		pacer->pace_mb = ceiling;
		return false;
	}
	/*
	 * Probe when due, when there is no baseline yet, and when the others
	 * seem to have stopped (idle, or held up so much by the move?).
	 */
	if (pacer->base_tps < 0 || now >= pacer->next_probe || recent < TSM_PACER_IDLE_TPS)
	{
		pacer->probe_start = now;
		return true;
	}
	if (pacer->base_tps < TSM_PACER_IDLE_TPS ||
		recent >= pacer->base_tps * tsm_pacing_target_pct / 100.0)
	{
		double		raised = pacer->pace_mb * TSM_PACER_GROWTH + 1.0;

		/* no faster than twice what the copy achieves, or start there */
		if (pacer->achieved_mb > 0)
			raised = Min(raised, Max(2 * pacer->achieved_mb, TSM_PACER_START_MB));
		pacer->pace_mb = Max(Min(raised, ceiling), pacer->floor_mb);
	}
	else
	{
		double		ratio = recent / pacer->base_tps;
		double		cut = Max(0.3, Min(0.7, ratio * 0.75));
		double		from = pacer->pace_mb;

		if (from >= TSM_PACER_UNTHROTTLED_MB && pacer->achieved_mb > 0)
			from = pacer->achieved_mb;
		pacer->held_at_floor = (Min(from * cut, ceiling) < pacer->floor_mb);
		pacer->pace_mb = Max(Min(from * cut, ceiling), pacer->floor_mb);
	}
	return false;
}

/*
 * Called at every charge of the budget and every slice of its sleeps:
 * sample, and decide when a window ends.  Returns true while the move must
 * hold still (a probe); otherwise pacer->pace_mb is the budget, MB/s, with
 * TSM_PACER_UNTHROTTLED_MB or more meaning none.
 */
bool
tsm_pacer_tick(TsmPacer *pacer, TimestampTz now, double ceiling_mb,
			   const TsmPacerCounts *counts)
{
	if (pacer->next_sample == 0 || pacer->restarting)
	{
		/*
		 * The first tick, or the first after tsm_pacer_restart(): the
		 * backends' ids as they are now, and the clock (what they did
		 * meanwhile is not counted).  After a restart the pace is known:
		 * the first decision is a whole window away.
		 */
		if (pacer->restarting)
		{
			/* a backend idle now would bring the hold's count later */
			for (int i = 0; i < pacer->watched; i++)
				pacer->last_lxid[i] = InvalidLocalTransactionId;
		}
		pacer_sample(pacer);
		pacer->transactions = 0;
		pacer->next_sample = TimestampTzPlusMilliseconds(now, TSM_PACER_SAMPLE_MS);
		pacer->window_start = pacer->counters_read = now;
		pacer->last_bytes = counts->bytes + counts->read_cost;
		pacer->last_dirtied = counts->dirtied;
		pacer->last_changed_ahead = counts->changed_ahead;
		pacer->last_recopied = counts->recopied;
		pacer->last_scattered = counts->scattered;
		pacer->next_decision = TimestampTzPlusMilliseconds(now, pacer->restarting ?
														   TSM_PACER_DECISION_MS :
														   TSM_PACER_FIRST_DECISION_MS);
		pacer->restarting = false;
		return false;
	}
	if (now >= pacer->next_sample)
	{
		pacer_sample(pacer);
		pacer->next_sample = TimestampTzPlusMilliseconds(now, TSM_PACER_SAMPLE_MS);
	}
	if (pacer->probe_start != 0)
		return pacer_probe(pacer, now);
	if (now >= pacer->next_decision)
		return pacer_decide(pacer, now, ceiling_mb, counts);
	return false;
}

/*
 * Whether a catch-up's backlog is small enough to finish at the ceiling:
 * at most TSM_PACER_SPRINT_SECONDS of the others' changes.  Near its end a
 * paced catch-up gains a few pages a second on the changes; a sprint of a
 * fraction of a second ends it instead of tens of seconds of re-copies.
 */
bool
tsm_pacer_sprint(TsmPacer *pacer, int64 backlog)
{
	return backlog <= Max(4 * (double) tsm_switch_backlog_blocks,
						  pacer->dirtying_pages * TSM_PACER_SPRINT_SECONDS);
}

/*
 * After the move held still for reasons of its own (worker.c's hold for a
 * VACUUM): the next tick starts afresh, as the first did, so that neither
 * the others' throughput while it held still nor the copy's standstill is
 * taken for what the copy does to them.  The pace, the baseline and the
 * probes' schedule stay.
 */
void
tsm_pacer_restart(TsmPacer *pacer)
{
	pacer->restarting = true;
	pacer->probe_start = 0;
	pacer->held_at_floor = false;
	pacer->recent_tps[0] = pacer->recent_tps[1] = -1;
}

/* The pace as a byte budget for the throttle: 0 = unthrottled. */
double
tsm_pacer_budget_mb(TsmPacer *pacer)
{
	return pacer->pace_mb >= TSM_PACER_UNTHROTTLED_MB ? 0 : pacer->pace_mb;
}
