# pg_tsmove: online relation moves between tablespaces, built with PGXS.
#
# The control file and SQL scripts live in control/; PGXS installs a control
# file only from the top directory when EXTENSION is set, so this Makefile
# installs it itself and points DATA at the extension directory.

EXTVERSION   = 0.4
MODULE_big   = pg_tsmove
OBJS         = src/pg_tsmove.o src/job.o src/tsjobs.o src/jobrecord.o src/jobctl.o \
               src/worker.o src/fileset.o src/copy.o src/mirror.o \
               src/relmove.o src/switch.o src/blockers.o src/backups.o src/barrier.o src/relocate.o src/relocmark.o src/dbcatalog.o \
               src/launcher.o src/resume.o src/pacing.o \
               src/monitor.o src/tsio.o src/relmap.o src/coaccess.o \
               src/history.o src/sampler.o
DATA         = $(wildcard control/pg_tsmove--*.sql)
MODULEDIR    = extension
PG_CPPFLAGS  = -I$(srcdir)/src
PG_CFLAGS    = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

REGRESS      = setup errors move control monitoring drop_extension
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=$(srcdir)/test/regress.conf \
               --inputdir=$(srcdir) --outputdir=tmp_regress

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies: every object depends on every header.
$(OBJS): $(wildcard $(srcdir)/src/*.h)

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
