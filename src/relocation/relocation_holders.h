/*-------------------------------------------------------------------------
 *
 * relocation_holders.h
 *	  The processes that hold a descriptor of a file in a relocation's old
 *	  location (relocation_holders.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef TSM_RELOCATION_HOLDERS_H
#define TSM_RELOCATION_HOLDERS_H

extern bool tsm_old_file_holders_known(void);
extern LocalTransactionId tsm_holder_transaction(int pid);
extern int	tsm_old_file_holders(const char *dir, int *pids, int max);
extern int	tsm_old_file_holders_recheck(const char *dir, int *pids, int n);
extern int	tsm_process_holds_files_under(int pid, const char *dir);

#endif							/* TSM_RELOCATION_HOLDERS_H */
