/*-------------------------------------------------------------------------
 *
 * relocation_holders.c
 *	  Which processes of the cluster hold a descriptor of a file in the old
 *	  location: the only ones a relocation's switch must wait for.
 *
 * After the rename, a process that still has a descriptor of an old file
 * could write a page through it (evicting a buffer) or read a stale page
 * from it; the SMGRRELEASE barrier makes every process close them.  But
 * WaitForProcSignalBarrier() waits for every process, also those that
 * never opened a file of the tablespace and could not, such as the
 * archiver inside a long archive_command, with every lock of the switch
 * held.  What matters is who holds a descriptor, and Linux tells it:
 * /proc/<pid>/fd of each process of the cluster (all have a PGPROC, the
 * auxiliary processes and 18's I/O workers included; the postmaster and
 * the logger never open a relation's file), readable by the server's own
 * user.  Only relation files count: a directory open (pg_database_size())
 * writes no page, and temporary files (pgsql_tmp) are not closed by the
 * barrier; the switch waits for those apart (relocation_finish.c).
 *
 * A process can also get a descriptor while it is looked at: an open(2)
 * that resolved the old path is listed only when it returns.  The switch
 * closes that window with its locks (relocation_switch.c): under its
 * AccessExclusiveLocks no process reads a file of the tablespace, and
 * once every dirty buffer of it has been written (all before the locks,
 * then under them the pages copied and the few dirtied since:
 * FlushRelationsAllBuffers waits for writes in progress too) none has one
 * to write; what remains is
 * the checkpointer's fsync of a file and pg_read_binary_file(), which open,
 * do not write pages, and close.
 *
 * A process that is exiting runs no more code of its own: it counts as
 * holding nothing (once its memory is gone, /proc shows its descriptors
 * only to root).  Where /proc cannot tell (another system, or a live
 * process it will not show us), tsm_old_file_holders() returns -1 and the
 * switch waits for the whole barrier, as before.
 *
 * No locks; reads PGPROC's pid fields without one (a process that exits
 * meanwhile is simply no longer found).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "common/file_utils.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"

#include "compat.h"
#include "relocation/relocation_holders.h"

/*
 * Whether target, a descriptor's path, is a relation's file under dir (a
 * canonical path): <dir>/<database>/<relation file>, a temporary
 * relation's included.  Not a directory (pg_database_size(), pg_ls_dir()
 * open those, and write no page) nor a temporary file (pgsql_tmp).
 */
static bool
is_old_file(const char *target, const char *dir, size_t dirlen)
{
	const char *db = target + dirlen + 1;
	const char *name;
	char		file[MAXPGPATH];
	size_t		len;
	TsmRelFileNumber number;
	ForkNumber	fork;
	unsigned	segno;

	if (strncmp(target, dir, dirlen) != 0 || target[dirlen] != '/')
		return false;
	len = strspn(db, "0123456789");
	if (len == 0 || db[len] != '/')
		return false;
	name = db + len + 1;
	strlcpy(file, name, sizeof(file));
	/* a file removed while open (its copy is what counts now) */
	len = strlen(file);
	if (len > strlen(" (deleted)") &&
		strcmp(file + len - strlen(" (deleted)"), " (deleted)") == 0)
		file[len - strlen(" (deleted)")] = '\0';
	return tsm_parse_relation_file_name(file, &number, &fork, &segno) ||
		looks_like_temp_rel_name(file);
}

/*
 * Whether process pid is exiting or has exited (PF_EXITING, or a zombie):
 * it runs no more code of its own, so it writes through no descriptor.
 * Once its memory is gone, /proc refuses to show its descriptors to
 * anyone but root, so an exiting backend must be told apart this way.
 */
static bool
process_is_exiting(int pid)
{
	char		path[64];
	char		stat[1024];
	FILE	   *f;
	size_t		len;
	char	   *p;
	char		state;
	unsigned long flags;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		return errno == ENOENT || errno == ESRCH;
	len = fread(stat, 1, sizeof(stat) - 1, f);
	fclose(f);
	stat[len] = '\0';
	/* pid (comm) state ppid pgrp session tty_nr tpgid flags ... */
	p = strrchr(stat, ')');
	if (p == NULL ||
		sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
		return false;
	return state == 'Z' || state == 'X' || (flags & 0x4) != 0;	/* PF_EXITING */
}

/*
 * tsm_process_holds_files_under
 *		1 if process pid has a descriptor of a file under dir (canonical,
 *		no trailing slash; temporary files excepted), 0 if not or if it is
 *		gone, -1 if /proc does not say.
 */
int
tsm_process_holds_files_under(int pid, const char *dir)
{
	char		fd_dir[64];
	DIR		   *d;
	struct dirent *de;
	size_t		dirlen = strlen(dir);
	int			found = 0;

	snprintf(fd_dir, sizeof(fd_dir), "/proc/%d/fd", pid);
	d = opendir(fd_dir);
	if (d == NULL)
		return errno == ENOENT || errno == ESRCH || process_is_exiting(pid) ? 0 : -1;
	while (found == 0 && (de = readdir(d)) != NULL)
	{
		char		link[MAXPGPATH + 32];
		char		target[MAXPGPATH + 32];
		ssize_t		len;

		if (de->d_name[0] == '.')
			continue;
		snprintf(link, sizeof(link), "%s/%s", fd_dir, de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len < 0)
		{
			/* closed meanwhile, or the process is gone */
			if (errno == ENOENT || errno == ESRCH)
				continue;
			found = process_is_exiting(pid) ? 0 : -1;
			break;
		}
		if (len >= sizeof(target) - 1)
		{
			/* cut short: only a path that begins with dir cannot be told */
			if (strncmp(target, dir, dirlen) != 0)
				continue;
			found = -1;
			break;
		}
		target[len] = '\0';
		if (is_old_file(target, dir, dirlen))
			found = 1;
	}
	closedir(d);
	return found;
}

/*
 * tsm_old_file_holders
 *		The processes of the cluster, ourselves excepted, that hold a
 *		descriptor of a file under dir (see above).  Returns how many
 *		(their PIDs in pids[], at most max of them), or -1 if /proc does
 *		not tell for one of them.
 */
int
tsm_old_file_holders(const char *dir, int *pids, int max)
{
	int			n = 0;

	for (uint32 i = 0; i < ProcGlobal->allProcCount; i++)
	{
		int			pid = ((volatile PGPROC *) &ProcGlobal->allProcs[i])->pid;
		int			holds;

		if (pid == 0 || pid == MyProcPid)
			continue;
		holds = tsm_process_holds_files_under(pid, dir);
		if (holds < 0)
			return -1;
		if (holds > 0)
		{
			if (n < max)
				pids[n] = pid;
			n++;
		}
	}
	return n;
}

/*
 * tsm_old_file_holders_recheck
 *		Of the n processes in pids[] (tsm_old_file_holders' answer), keep
 *		those that still hold a file under dir.  Returns how many, or -1 if
 *		/proc does not tell.  Under the switch's locks no other process
 *		gets one (see above): a look at every process, readlink() of each
 *		of its descriptors (a few microseconds each), is needed only once.
 */
int
tsm_old_file_holders_recheck(const char *dir, int *pids, int n)
{
	int			kept = 0;

	for (int i = 0; i < n; i++)
	{
		int			holds = tsm_process_holds_files_under(pids[i], dir);

		if (holds < 0)
			return -1;
		if (holds > 0)
			pids[kept++] = pids[i];
	}
	return kept;
}

/*
 * tsm_holder_transaction
 *		The local transaction id that process pid runs now, or
 *		InvalidLocalTransactionId if it is no backend in the proc array (an
 *		auxiliary process) or is gone.
 */
LocalTransactionId
tsm_holder_transaction(int pid)
{
	PGPROC	   *proc;
	LocalTransactionId lxid = InvalidLocalTransactionId;

	LWLockAcquire(ProcArrayLock, LW_SHARED);
	proc = BackendPidGetProcWithLock(pid);
	if (proc != NULL)
		lxid = TSM_PROC_LXID(proc);
	LWLockRelease(ProcArrayLock);
	return lxid;
}

/*
 * tsm_old_file_holders_known
 *		Whether /proc shows this server's processes' descriptors: the
 *		worker's own, and the postmaster's (same user).  Looked up once.
 */
bool
tsm_old_file_holders_known(void)
{
	static int	known = -1;

	if (known < 0)
	{
		char		path[64];
		char		target[MAXPGPATH + 32];
		char	   *data_dir = realpath(DataDir, NULL);
		int			fd = open("PG_VERSION", O_RDONLY | PG_BINARY, 0);
		ssize_t		len = -1;

		known = 0;
		/* a file we opened must show, under its canonical path */
		if (fd >= 0)
		{
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			len = readlink(path, target, sizeof(target) - 1);
			close(fd);
		}
		if (data_dir != NULL && len > 0 && len < sizeof(target) - 1)
		{
			target[len] = '\0';
			snprintf(path, sizeof(path), "/proc/%d/fd", (int) PostmasterPid);
			known = strncmp(target, data_dir, strlen(data_dir)) == 0 &&
				strcmp(target + strlen(data_dir), "/PG_VERSION") == 0 &&
				access(path, R_OK | X_OK) == 0;
		}
		free(data_dir);
	}
	return known == 1;
}
