#!/bin/bash
# The quick test command: the tests of what you changed, in a few minutes.
#
#   bash test/quick.sh              # changes since HEAD (work tree, staged, untracked)
#   bash test/quick.sh main~3       # changes since that commit
#   PG_MAJOR=18 PG_CASSERT=1 bash test/quick.sh   # against another server
#
# Builds and installs the extension, checks the layering and the docs, runs
# pg_regress (always: about 10 s), and the pytest modules that cover the
# changed files (the map below), through test/run_tests.sh.  A change that
# maps to no module runs pg_regress alone.  The full suite stays
# `bash test/run_tests.sh`; CI runs it on every major (.ci/run).
set -u
cd "$(dirname "$0")/.." || exit 1
base=${1:-HEAD}
changed=$( { git diff --name-only "$base"; git ls-files --others --exclude-standard; } | sort -u)

# file pattern -> the pytest modules that exercise it
modules_for() {
    case "$1" in
        src/relocation/relocation_standby.c|src/jobs/local_jobs*|src/workers/launcher.c)
                            echo test_standby_relocation test_queue ;;
        src/relocation/*)   echo test_relocation test_relocation_backups test_switch_stalls \
                                 test_standby_relocation ;;
        src/relation/*)     echo test_move_online test_move_failures ;;
        src/engine/*)       echo test_move_online test_relocation ;;
        src/jobs/pacing*)   echo test_steering ;;
        src/jobs/*|src/workers/*|src/api/*)
                            echo test_queue test_steering test_move_failures ;;
        src/monitor/*)      echo test_monitoring ;;
        src/autopilot/*)    echo test_autopilot ;;
        src/compat.h|src/pg_tsmove.[ch])
                            echo test_extension test_move_online ;;
        control/*)          echo test_security test_extension ;;
        test/eval/*)        echo test_eval_smoke ;;
        test/integrity.py)  echo test_crash_matrix ;;
        test/hacluster.py)  echo test_patroni ;;
        test/pgcluster.py|test/conftest.py|test/moves.py)
                            echo test_harness ;;
        test/test_*.py)     basename "$1" .py ;;
    esac
}

modules=()
for f in $changed; do
    for m in $(modules_for "$f"); do
        [[ " ${modules[*]} " == *" $m "* ]] || modules+=("$m")
    done
done
echo "quick: changed since $base: $(echo $changed | wc -w) files"
bash tools/check-docs.sh || exit 1
if [ ${#modules[@]} -eq 0 ]; then
    echo "quick: no pytest module covers these changes; pg_regress only"
    PYTEST_SCOPE=none exec bash test/run_tests.sh
fi
args=()
for m in "${modules[@]}"; do args+=("test/$m.py"); done
echo "quick: pytest ${args[*]}"
# on another major, only the tests marked matrix run (as in CI)
exec bash test/run_tests.sh "${args[@]}"
