/*-------------------------------------------------------------------------
 *
 * durable_file.c
 *	  Write a small file whole and durably (durable_file.h).
 *
 * The content goes to "<path>.tmp", which is fsynced and renamed over
 * path by durable_rename() (which also fsyncs the directory).  Errors are
 * ERRORs, a failed fsync data_sync_elevel(ERROR), as md.c reports them;
 * a short write is reported as a full disk.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "storage/fd.h"

#include "jobs/durable_file.h"

void
tsm_write_file_durably(const char *path, const char *data, int len)
{
	char		tmp[MAXPGPATH];
	int			fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	if (fd < 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", tmp)));
	errno = 0;
	if (write(fd, data, len) != len)
	{
		if (errno == 0)
			errno = ENOSPC;
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", tmp)));
	}
	if (pg_fsync(fd) != 0)
		ereport(data_sync_elevel(ERROR),
				(errcode_for_file_access(),
				 errmsg("could not fsync file \"%s\": %m", tmp)));
	CloseTransientFile(fd);
	(void) durable_rename(tmp, path, ERROR);
}
