#!/bin/bash
# pg_tsmove demo:  sudo bash test/demo.sh [--rows N] [--watch-s S] [--after-s S]
#
# Installs what is missing (test/install_deps.sh), builds and installs the
# extension, then runs test/demo.py: the essay's experiment in a few
# minutes, as a DBA would watch it.  Two tables read together on one
# emulated disk; tsmove.tablespace_io and tsmove.coaccess show the problem;
# tsmove.advise() names the move and its predicted gain; the move runs under
# the load with throughput before, during and after; tsmove.report() says
# whether it helped.  Everything it creates is removed on exit.

set -u
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_DIR/test/install_deps.sh"

install_deps "$REPO_DIR" || exit 1
make -C "$REPO_DIR" PG_CONFIG="$PG_CONFIG" >/dev/null \
    && make -C "$REPO_DIR" install PG_CONFIG="$PG_CONFIG" >/dev/null \
    || { echo "demo: building pg_tsmove failed" >&2; exit 1; }
PG_BIN=$("$PG_CONFIG" --bindir) exec python3 "$REPO_DIR/test/demo.py" "$@"
