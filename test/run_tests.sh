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

set -u
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_DIR"
source test/install_deps.sh
export PYTHONDONTWRITEBYTECODE=1

install_deps "$REPO_DIR" || { echo "run_tests: installing dependencies failed" >&2; exit 1; }
make PG_CONFIG="$PG_CONFIG" && make install PG_CONFIG="$PG_CONFIG" \
    || { echo "run_tests: build failed" >&2; exit 1; }

# ---- pg_regress -------------------------------------------------------------
REGRESS_DIR=$(mktemp -d /tmp/pg_tsmove_regress.XXXXXX)
trap 'rm -rf "$REGRESS_DIR"' EXIT
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
# Each pg_regress run ends with "All N tests passed." or "M of N tests
# failed."; the Makefile may run pg_regress more than once, so add them up.
read -r total failed < <(grep -oE '(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests failed)' \
    "$REGRESS_DIR/installcheck.out" | awk '
        /^All/ { total += $2 }
        / of / { failed += $1; total += $3 }
        END    { print total + 0, failed + 0 }')
if [ "$total" -eq 0 ]; then
    regress_summary="pg_regress: 0 passed, 0 failed (no test ran; make exited with $regress_rc)"
    [ $regress_rc -eq 0 ] && regress_rc=1
else
    regress_summary="pg_regress: $((total - failed)) passed, $failed failed"
fi

# ---- pytest -----------------------------------------------------------------
"$PYTHON" -m pytest -v -p no:cacheprovider test/ 2>&1 | tee "$REGRESS_DIR/pytest.out"
pytest_rc=${PIPESTATUS[0]}
pytest_summary="pytest: $(grep -E '^=+ .* in [0-9.]+s' "$REGRESS_DIR/pytest.out" \
                          | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//')"

echo
echo "===== summary ====="
echo "$regress_summary"
echo "$pytest_summary"
if [ $regress_rc -ne 0 ] || [ $pytest_rc -ne 0 ]; then
    exit 1
fi
