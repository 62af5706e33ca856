# pg_tsmove: online relation moves between tablespaces, built with PGXS.
#
# The control file and SQL scripts live in control/; PGXS installs a control
# file only from the top directory when EXTENSION is set, so this Makefile
# installs it itself and points DATA at the extension directory.

EXTVERSION   = 0.8
MODULE_big   = pg_tsmove
OBJS         = src/pg_tsmove.o \
               src/jobs/settings.o src/jobs/queue.o src/jobs/job_record.o \
               src/jobs/job_control.o src/jobs/pacing.o src/jobs/submit.o \
               src/engine/fileset.o src/engine/copy.o src/engine/mirror.o \
               src/engine/reconcile.o \
               src/engine/resume.o src/jobs/durable_file.o src/jobs/local_jobs.o \
               src/engine/relation_storage.o src/engine/switch_blockers.o \
               src/engine/vacuum_look.o \
               src/relation/relation_move.o src/relation/relation_switch.o \
               src/relocation/relocation_files.o src/relocation/relocation_switch.o \
               src/relocation/relocation_finish.o src/relocation/relocation_recovery.o \
               src/relocation/relocation_backups.o src/relocation/relocation_barrier.o \
               src/relocation/relocation_dbcatalog.o src/relocation/relocation_marks.o \
               src/relocation/relocation_guard.o src/relocation/relocation_standby.o \
               src/relocation/relocation_holders.o \
               src/workers/worker.o src/workers/recovery.o src/workers/launcher.o \
               src/api/job_api.o src/api/tablespace_api.o \
               src/monitor/common.o src/monitor/coaccess.o src/monitor/history.o \
               src/monitor/recent_io.o \
               src/monitor/relation_map.o src/monitor/tablespace_io.o \
               src/monitor/sampler.o src/monitor/monitor.o \
               src/autopilot/autopilot.o src/autopilot/pilot.o
DATA         = $(wildcard control/pg_tsmove--*.sql)
MODULEDIR    = extension
PG_CPPFLAGS  = -I$(srcdir)/src
PG_CFLAGS    = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

REGRESS      = setup errors move control monitoring autopilot drop_extension
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=$(srcdir)/test/regress.conf \
               --inputdir=$(srcdir) --outputdir=tmp_regress

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies: every object depends on every header.
$(OBJS): $(wildcard $(srcdir)/src/*.h $(srcdir)/src/*/*.h)

install: install-control
install-control:
	$(MKDIR_P) '$(DESTDIR)$(datadir)/extension'
	$(INSTALL_DATA) $(srcdir)/control/pg_tsmove.control '$(DESTDIR)$(datadir)/extension/'

uninstall: uninstall-control
uninstall-control:
	rm -f '$(DESTDIR)$(datadir)/extension/pg_tsmove.control'

# The refusal without shared_preload_libraries needs an instance of its own.
installcheck: installcheck-nopreload
installcheck-nopreload:
	$(pg_regress_installcheck) --temp-instance=tmp_check_nopreload \
		--temp-config=$(srcdir)/test/regress_nopreload.conf \
		--inputdir=$(srcdir) --outputdir=tmp_regress_nopreload nopreload

EXTRA_CLEAN = tmp_check tmp_regress tmp_check_nopreload tmp_regress_nopreload

.PHONY: install-control uninstall-control installcheck-nopreload
