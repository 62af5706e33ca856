/*-------------------------------------------------------------------------
 *
 * relocation_barrier.h
 *	  The SMGRRELEASE barrier of a relocation's switch, tried first with a
 *	  bound (relocation_barrier.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_BARRIER_H
#define TSM_RELOCATION_BARRIER_H

/* How long an attempt waits for every process before it takes a lock. */
#define TSM_BARRIER_PROBE_MS 6000

/*
 * Two probes that name the same process are "in a row" when no more than
 * this lies between them (a probe, the backoff, a little copying).
 */
#define TSM_BARRIER_NAMING_GAP_MS (2 * TSM_BARRIER_PROBE_MS + 3000)

/*
 * How long a switch, under its locks, waits for the processes that hold a
 * file of the old location to close them before it gives up the attempt.
 */
#define TSM_HOLDERS_WAIT_MS 200

/* How many of the processes that kept an attempt from switching are kept. */
#define TSM_MAX_HOLDERS_KEPT 8

extern bool tsm_barrier_probe(int timeout_ms, int *laggard);
extern int	tsm_barrier_wait_for_holders(const char *dir, int *held, int *nheld, int max,
										 int timeout_ms);
extern void tsm_barrier_release(bool may_terminate, bool on_standby, const char *holders_dir);
extern bool tsm_terminate_client_writer(int pid);

#endif							/* TSM_RELOCATION_BARRIER_H */
