/*-------------------------------------------------------------------------
 *
 * autopilot.c
 *	  The autopilot's set-up: its policy GUCs (and the checks that refuse a
 *	  bad policy with a clear message), its shared memory, the start of the
 *	  pilot worker.
 *
 * Every policy is a PGC_SIGHUP GUC: only a superuser (or a role granted
 * SET on the parameter) can change it, in postgresql.conf or with ALTER
 * SYSTEM, and the whole cluster follows one policy.  The decision itself is
 * SQL (tsmove.autopilot_step()), which reads the policies with
 * current_setting(); the check hooks here make sure that what it reads
 * parses.  The pilot (pilot.c) reads only pg_tsmove.autopilot and
 * pg_tsmove.autopilot_interval.
 *
 * The pilot is not a static worker: the sampler starts it while the
 * autopilot is not off (tsm_autopilot_ensure_pilot), and it exits once it
 * is off.  A cluster that does not use the autopilot has no process of it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <ctype.h>
#include <limits.h>

#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "autopilot/autopilot_internal.h"

int			tsm_autopilot_mode = TSM_AUTOPILOT_OFF;
int			tsm_autopilot_interval_s = 60;
TsmAutopilotShared *tsm_autopilot = NULL;

/* Read only by SQL, through current_setting(). */
static int	autopilot_evidence_s;
static int	autopilot_hold_s;
static int	autopilot_max_moves_per_day;
static int	autopilot_max_mb_per_day;
static double autopilot_min_benefit;
static double autopilot_min_read_mb;
static double autopilot_max_rate_mb;
static char *autopilot_window;
static char *autopilot_targets;
static char *autopilot_never_move;

static const struct config_enum_entry autopilot_options[] = {
	{"off", TSM_AUTOPILOT_OFF, false},
	{"propose", TSM_AUTOPILOT_PROPOSE, false},
	{"on", TSM_AUTOPILOT_ON, false},
	{NULL, 0, false}
};

/* "HH:MM": minutes since midnight, or -1. */
static int
parse_clock(const char *text, int len)
{
	int			h,
				m;
	char		buf[8];

	if (len != 5 || text[2] != ':' || !isdigit((unsigned char) text[0]) ||
		!isdigit((unsigned char) text[1]) || !isdigit((unsigned char) text[3]) ||
		!isdigit((unsigned char) text[4]))
		return -1;
	memcpy(buf, text, 5);
	buf[5] = '\0';
	if (sscanf(buf, "%2d:%2d", &h, &m) != 2 || h < 0 || h > 24 || m < 0 || m > 59 ||
		(h == 24 && m != 0))
		return -1;
	return h * 60 + m;
}

/* pg_tsmove.autopilot_window: empty, or "HH:MM-HH:MM" (may wrap midnight). */
static bool
check_window(char **newval, void **extra, GucSource source)
{
	const char *v = *newval;
	const char *dash;
	int			from,
				to;

	if (v == NULL || v[0] == '\0')
		return true;
	dash = strchr(v, '-');
	if (dash == NULL ||
		(from = parse_clock(v, dash - v)) < 0 ||
		(to = parse_clock(dash + 1, strlen(dash + 1))) < 0)
	{
		GUC_check_errdetail("The window must be empty (any time) or two times of day, as in \"22:00-06:00\".");
		return false;
	}
	if (from == to)
	{
		GUC_check_errdetail("The window \"%s\" is empty: it starts when it ends.", v);
		GUC_check_errhint("Leave pg_tsmove.autopilot_window empty to let the autopilot act at any time.");
		return false;
	}
	return true;
}

/*
 * Parse one dotted name starting at *p, as SQL writes it: parts separated
 * by dots, each a double-quoted identifier ("" for a quote) or an unquoted
 * one (letters, digits, _ and $), the last one * when allow_star.  Stops at
 * a comma or the end; returns the number of parts, or -1 if malformed.
 * tsmove.autopilot_name_list() reads what this accepts (parse_ident()).
 */
static int
parse_dotted_name(const char **p, bool allow_star)
{
	const char *c = *p;
	int			parts = 0;

	while (isspace((unsigned char) *c))
		c++;
	for (;;)
	{
		if (*c == '"')
		{
			c++;
			for (;;)
			{
				if (*c == '\0')
					return -1;
				if (*c == '"' && c[1] == '"')
					c += 2;
				else if (*c == '"')
					break;
				else
					c++;
			}
			c++;
		}
		else if (allow_star && *c == '*')
		{
			c++;
			parts++;
			while (isspace((unsigned char) *c))
				c++;
			if (parts < 2 || (*c != ',' && *c != '\0'))
				return -1;		/* * only as the relation part */
			*p = c;
			return parts;
		}
		else
		{
			const char *start = c;

			while (isalnum((unsigned char) *c) || *c == '_' || *c == '$' ||
				   IS_HIGHBIT_SET(*c))
				c++;
			if (c == start || isdigit((unsigned char) *start) || *start == '$')
				return -1;
		}
		parts++;
		if (*c != '.')
			break;
		c++;
	}
	while (isspace((unsigned char) *c))
		c++;
	if (*c != ',' && *c != '\0')
		return -1;
	*p = c;
	return parts;
}

/* A comma-separated list of dotted names of min_parts to max_parts parts. */
static bool
check_name_list(const char *value, int min_parts, int max_parts, bool allow_star,
				const char *what)
{
	const char *p = value;

	if (value == NULL)
		return true;
	while (*p)
	{
		const char *start;
		int			parts;

		while (isspace((unsigned char) *p))
			p++;
		start = p;
		parts = parse_dotted_name(&p, allow_star);

		if (parts < min_parts || parts > max_parts)
		{
			int			len = strcspn(start, ",");

			GUC_check_errdetail("\"%.*s\" is not %s.", len, start, what);
			return false;
		}
		if (*p == ',')
			p++;
	}
	return true;
}

static bool
check_targets(char **newval, void **extra, GucSource source)
{
	return check_name_list(*newval, 1, 1, false, "a tablespace name");
}

static bool
check_never_move(char **newval, void **extra, GucSource source)
{
	return check_name_list(*newval, 2, 3, true,
						   "schema.relation or database.schema.relation (relation may be *)");
}

void
tsm_autopilot_init(void)
{
	DefineCustomEnumVariable("pg_tsmove.autopilot",
							 "Whether the autopilot moves what the monitoring says: off, propose or on.",
							 "propose: it logs its decisions in tsmove.decisions without acting; "
							 "on: it also starts the moves.",
							 &tsm_autopilot_mode,
							 TSM_AUTOPILOT_OFF, autopilot_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.autopilot_interval",
							"Time between two looks of the autopilot.",
							NULL,
							&tsm_autopilot_interval_s,
							60, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.autopilot_evidence",
							"Window of evidence the autopilot decides on.",
							"Device load is averaged over it, co-access must have been seen in it, "
							"a move is judged on that much history before and after it, "
							"and after a move the autopilot waits that long before the next.",
							&autopilot_evidence_s,
							900, 10, 7 * 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("pg_tsmove.autopilot_window",
							   "Time of day in which the autopilot may start moves, as HH:MM-HH:MM.",
							   "Server local time; may wrap midnight (22:00-06:00). Empty: any time.",
							   &autopilot_window,
							   "",
							   PGC_SIGHUP, 0,
							   check_window, NULL, NULL);

	DefineCustomRealVariable("pg_tsmove.autopilot_min_benefit",
							 "Least predicted benefit worth a move, in points of device utilisation.",
							 "The predicted drop of the busier device's utilisation (source or target), "
							 "at today's load; see tsmove.advise()'s benefit_pct.",
							 &autopilot_min_benefit,
							 10.0, 0.0, 100.0,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomRealVariable("pg_tsmove.autopilot_min_read_mb",
							 "Least evidence, in MB read from outside shared buffers, for the autopilot to consider a move.",
							 "Passed to tsmove.advise_candidates() as min_read_mb.",
							 &autopilot_min_read_mb,
							 64.0, 0.0, 1.0e9,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.autopilot_max_moves_per_day",
							"Most moves the autopilot starts in 24 hours, over all databases.",
							NULL,
							&autopilot_max_moves_per_day,
							10, 0, 10000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.autopilot_max_mb_per_day",
							"Most data the autopilot moves in 24 hours, over all databases (0 = no limit).",
							NULL,
							&autopilot_max_mb_per_day,
							0, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomStringVariable("pg_tsmove.autopilot_targets",
							   "Tablespaces the autopilot may move relations into (empty: any).",
							   "A comma-separated list of tablespace names.",
							   &autopilot_targets,
							   "",
							   PGC_SIGHUP, 0,
							   check_targets, NULL, NULL);

	DefineCustomStringVariable("pg_tsmove.autopilot_never_move",
							   "Relations the autopilot must never move.",
							   "A comma-separated list of schema.relation (any database) or "
							   "database.schema.relation; relation * means every relation of the schema.",
							   &autopilot_never_move,
							   "",
							   PGC_SIGHUP, 0,
							   check_never_move, NULL, NULL);

	DefineCustomRealVariable("pg_tsmove.autopilot_max_rate_mb",
							 "Rate ceiling of the autopilot's moves, in MB per second (0: pg_tsmove.max_rate_mb).",
							 NULL,
							 &autopilot_max_rate_mb,
							 0.0, 0.0, 1.0e6,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("pg_tsmove.autopilot_hold",
							"Time a relation the autopilot moved stays where it put it.",
							"No ping-pong: within it the autopilot neither moves the relation back nor elsewhere.",
							&autopilot_hold_s,
							7 * 86400, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
}

/*
 * tsm_autopilot_ensure_pilot
 *		Start the pilot (a dynamic background worker) while
 *		pg_tsmove.autopilot is not off and none runs; it exits by itself once
 *		the setting is off.  Called by the sampler on each of its passes and
 *		after each reload (monitor/sampler.c), so turning the autopilot on is
 *		enough.  While it is off no pilot process exists at all.
 */
void
tsm_autopilot_ensure_pilot(void)
{
	static BackgroundWorkerHandle *handle = NULL;
	static TimestampTz last_no_slot_log = 0;
	BackgroundWorker worker;
	MemoryContext old;
	pid_t		pid;
	bool		started;

	if (handle != NULL)
	{
		if (GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED)
			return;
		pfree(handle);
		handle = NULL;
	}
	if (tsm_autopilot_mode == TSM_AUTOPILOT_OFF)
		return;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "pg_tsmove", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "tsm_autopilot_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "pg_tsmove autopilot", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "pg_tsmove autopilot", BGW_MAXLEN);
	worker.bgw_notify_pid = MyProcPid;
	old = MemoryContextSwitchTo(TopMemoryContext);
	started = RegisterDynamicBackgroundWorker(&worker, &handle);
	MemoryContextSwitchTo(old);
	if (!started)
	{
		handle = NULL;
		if (TimestampDifferenceExceeds(last_no_slot_log, GetCurrentTimestamp(), 600 * 1000))
		{
			ereport(LOG,
					(errmsg("pg_tsmove autopilot: no background worker slot for its pilot"),
					 errhint("Raise max_worker_processes.")));
			last_no_slot_log = GetCurrentTimestamp();
		}
	}
}

Size
tsm_autopilot_shmem_size(void)
{
	return MAXALIGN(sizeof(TsmAutopilotShared));
}

/* Called with AddinShmemInitLock held. */
void
tsm_autopilot_shmem_init(void)
{
	bool		found;

	tsm_autopilot = ShmemInitStruct("pg_tsmove autopilot", sizeof(TsmAutopilotShared), &found);
	if (!found)
	{
		memset(tsm_autopilot, 0, sizeof(TsmAutopilotShared));
		SpinLockInit(&tsm_autopilot->mutex);
	}
}
