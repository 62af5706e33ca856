#!/bin/bash
# The evaluation, end to end:  sudo bash test/eval/run.sh [run_eval.py options]
#
# Installs what is missing (test/install_deps.sh: PostgreSQL 15, pg_repack,
# e2fsprogs, matplotlib, ...), builds and installs pg_tsmove, then runs
# test/eval/run_eval.py, which writes test/eval/latest/report.md,
# series.json and tpm.png (about 20 minutes with the defaults).  Honours
# PG_CONFIG (and PG_BIN, which defaults to PG_CONFIG's bindir).
# `python3 test/eval/run_eval.py --help` lists the options.

set -u
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO_DIR"
source test/install_deps.sh
export PYTHONDONTWRITEBYTECODE=1

install_deps "$REPO_DIR" || { echo "eval: installing dependencies failed" >&2; exit 2; }
make PG_CONFIG="$PG_CONFIG" && make install PG_CONFIG="$PG_CONFIG" \
    || { echo "eval: build failed" >&2; exit 2; }
export PG_BIN=${PG_BIN:-$("$PG_CONFIG" --bindir)}
exec "$PYTHON" test/eval/run_eval.py "$@"
