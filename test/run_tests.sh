#!/bin/bash
# The test command of pg_tsmove:  sudo bash test/run_tests.sh
#
# Installs what is missing (test/install_deps.sh), builds and installs the
# extension, runs the pg_regress suite (make installcheck, which starts its
# own temporary instance) and the pytest integration suite (test/*.py,
# which start their own clusters).  Prints both summaries, including a line
# "pg_regress: N passed, M failed", and exits non-zero if either fails.
#
# pg_regress --temp-instance refuses to run as root, so it runs as the
# postgres user in a copy of the source tree that this user owns; pytest
# runs as root and starts its servers as postgres itself.
#
# PG_MAJOR (15, the default, 16, 17, 18 or 19) says which PostgreSQL to
# test against; a major other than 15 is installed first, when missing,
# by tools/install-postgres.sh (PG_CASSERT=1: its assert-enabled build).
# PYTEST_SCOPE: "all" (the default on 15) runs every pytest test, "matrix"
# (the default on the others) those marked matrix: moves, relocation,
# backups, crashes and resume.  Arguments, if any, go to pytest in place of
# "test/" (a file, a test, -k ...): test/quick.sh uses them.
# TSM_DEPS_DONE=1: the caller has run install_deps (.ci/run, whose lanes
# must not run apt-get at the same time).

set -u
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_DIR"
source test/install_deps.sh
export PYTHONDONTWRITEBYTECODE=1

if [ -z "${TSM_DEPS_DONE:-}" ]; then
    install_deps "$REPO_DIR" || { echo "run_tests: installing dependencies failed" >&2; exit 1; }
fi
PG_MAJOR=${PG_MAJOR:-15}
if [ "$PG_MAJOR" != 15 ] || [ -n "${PG_CASSERT:-}" ]; then
    prefix=$(bash tools/install-postgres.sh "$PG_MAJOR" | tail -1) && [ -x "$prefix/bin/pg_config" ] \
        || { echo "run_tests: installing PostgreSQL $PG_MAJOR failed" >&2; exit 1; }
    PG_CONFIG=$prefix/bin/pg_config
fi
PG_BIN=$("$PG_CONFIG" --bindir)
export PG_CONFIG PG_BIN
PYTEST_SCOPE=${PYTEST_SCOPE:-$([ "$PG_MAJOR" = 15 ] && echo all || echo matrix)}
echo "run_tests: $("$PG_CONFIG" --version) from $PG_BIN; pytest: $PYTEST_SCOPE"
REGRESS_DIR=$(mktemp -d /tmp/pg_tsmove_regress.XXXXXX)
trap 'rm -rf "$REGRESS_DIR"' EXIT

# ---- build, install, pg_regress ----------------------------------------------
build_and_install() {
    # a clean build: objects of another major must not be linked in
    make clean PG_CONFIG="$PG_CONFIG" >/dev/null
    make PG_CONFIG="$PG_CONFIG" && make install PG_CONFIG="$PG_CONFIG" \
        || { echo "run_tests: build failed" >&2; return 1; }
    # the calls between src/'s folders go one way (read from the objects)
    "$PYTHON" tools/check-layers.py || { echo "run_tests: layering broken" >&2; return 1; }
}

# sets regress_rc and regress_summary
run_pg_regress() {
    local total failed diffs
    tar -C "$REPO_DIR" --exclude=.git --exclude=tmp_check --exclude=tmp_regress \
        -cf - . | tar -C "$REGRESS_DIR" -xf -
    chown -R postgres:postgres "$REGRESS_DIR"
    runuser -u postgres -- make -C "$REGRESS_DIR" installcheck PG_CONFIG="$PG_CONFIG" \
        > "$REGRESS_DIR/installcheck.out" 2>&1
    regress_rc=$?
    cat "$REGRESS_DIR/installcheck.out"
    if [ $regress_rc -ne 0 ]; then
        for diffs in "$REGRESS_DIR"/tmp_regress/regression.diffs "$REGRESS_DIR"/regression.diffs; do
            [ -f "$diffs" ] && { echo "===== $diffs"; cat "$diffs"; }
        done
    fi
    read -r total failed < <(pg_regress_counts "$REGRESS_DIR/installcheck.out")
    if [ "$total" -eq 0 ]; then
        regress_summary="pg_regress: 0 passed, 0 failed (no test ran; make exited with $regress_rc)"
        [ $regress_rc -eq 0 ] && regress_rc=1
    else
        regress_summary="pg_regress: $((total - failed)) passed, $failed failed"
    fi
}

if [ -n "${TSM_PYTEST_ONLY:-}" ]; then
    # .ci/run's second lane of 15: the other lane built, installed and ran
    # pg_regress; installing again would rewrite the .so under its servers
    [ -f "$("$PG_CONFIG" --pkglibdir)/pg_tsmove.so" ] \
        || { echo "run_tests: TSM_PYTEST_ONLY, but pg_tsmove is not installed" >&2; exit 1; }
    regress_rc=0
    regress_summary="pg_regress: not run here (TSM_PYTEST_ONLY)"
else
    build_and_install || exit 1
    run_pg_regress
fi

# ---- pytest -----------------------------------------------------------------
if [ "$PYTEST_SCOPE" = none ]; then
    pytest_args=()      # pg_regress alone (test/quick.sh)
elif [ "$PYTEST_SCOPE" = all ]; then
    pytest_args=()
else
    pytest_args=(-m "$PYTEST_SCOPE")
fi
if [ $# -gt 0 ]; then
    pytest_args+=("$@")
else
    pytest_args+=(test/)
fi
if [ "$PYTEST_SCOPE" = none ]; then
    pytest_rc=0
    pytest_summary="pytest: not run (PYTEST_SCOPE=none)"
else
    "$PYTHON" -m pytest -v -p no:cacheprovider --durations=25 "${pytest_args[@]}" 2>&1 | tee "$REGRESS_DIR/pytest.out"
    pytest_rc=${PIPESTATUS[0]}
    # 5: nothing selected, which only a narrowed run (test/quick.sh on
    # another major: no matrix test in the module) may end with
    [ $pytest_rc -eq 5 ] && [ $# -gt 0 ] && pytest_rc=0
    pytest_summary="pytest: $(grep -E '^=+ .* in [0-9.]+s' "$REGRESS_DIR/pytest.out" \
                              | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')"
fi

echo
echo "===== summary: PostgreSQL $PG_MAJOR$([ -n "${PG_CASSERT:-}" ] && echo ", assertions on") ====="
echo "$regress_summary"
echo "$pytest_summary"
if [ $regress_rc -ne 0 ] || [ $pytest_rc -ne 0 ]; then
    exit 1
fi
