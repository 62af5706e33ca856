# pg_tsmove: online relation moves between tablespaces, built with PGXS.
#
# The control file and SQL scripts live in control/; PGXS installs a control
# file only from the top directory when EXTENSION is set, so this Makefile
# installs it itself and points DATA at the extension directory.

EXTVERSION   = 0.5
MODULE_big   = pg_tsmove
OBJS         = src/pg_tsmove.o \
               src/move/settings.o src/move/queue.o src/move/job_record.o \
               src/move/job_control.o src/move/pacing.o src/move/submit.o \
               src/move/fileset.o src/move/copy.o src/move/mirror.o src/move/resume.o \
               src/move/relation_storage.o src/move/relation_move.o \
               src/move/relation_switch.o src/move/switch_blockers.o \
               src/move/relocation_files.o src/move/relocation_switch.o \
               src/move/relocation_finish.o src/move/relocation_recovery.o \
               src/move/relocation_backups.o src/move/relocation_barrier.o \
               src/move/relocation_dbcatalog.o src/move/relocation_marks.o src/move/durable_file.o \
               src/move/worker.o src/move/recovery.o src/move/launcher.o \
               src/move/job_api.o src/move/tablespace_api.o \
               src/monitor/common.o src/monitor/coaccess.o src/monitor/history.o \
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
