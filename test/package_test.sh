#!/bin/bash
# The Debian package test:  sudo bash test/package_test.sh
#
# Builds the packages of debian/ (postgresql-<major>-pg-tsmove, one per
# major that postgresql-common here supports) with dpkg-buildpackage from a
# clean copy of the tree, installs them with apt-get, checks that they
# hold every file of the extension, and runs the pg_regress suite against
# the installed files; then removes them.  Prints one line per check and
# "package: N passed, M failed" (N and M count the checks and the
# pg_regress tests), and exits non-zero if anything failed.
#
# Only the package's files are tested: pg_tsmove files that "make install"
# left in the package's directories are removed before the install (dpkg
# would overwrite them silently, and one the package lacks would hide the
# gap), then dpkg --verify shows that the files on disk are the package's.
# The suite is the autopkgtest one, debian/tests/installcheck: pg_buildext
# installcheck, whose "make installcheck" starts pg_regress's own servers
# (test/regress.conf: pg_tsmove preloaded) from the installed major, and
# these load the extension from the package's directories.  pg_regress
# refuses to run as root, so it runs as the postgres user in a copy that
# this user owns.
#
# Afterwards no pg_tsmove file is left in the package's directories: the
# packages are purged, so that the test suite's "make install" (which
# test/run_tests.sh runs first) installs into directories no package owns.
# PACKAGE_TEST_KEEP=1 keeps the build directory (its path is printed).

set -u
if [ "$(id -u)" -ne 0 ]; then
    exec sudo -E bash "$0" "$@"
fi

REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$REPO_DIR/test/install_deps.sh"
export DEBIAN_FRONTEND=noninteractive
STARTED=$SECONDS

passed=0
failed=0
check() {       # check NAME COMMAND...: run a check, count and print its outcome
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "package_test: ok      $name"
    else
        failed=$((failed + 1))
        echo "package_test: FAILED  $name"
    fi
}
finish() {
    echo
    echo "===== package test: $((SECONDS - STARTED)) s ====="
    echo "package: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
    exit $?
}
phase() {
    echo
    echo "===== $* ($((SECONDS - STARTED)) s) ====="
}

# ---- what the build needs ---------------------------------------------------
phase "dependencies"
if ! package_installed postgresql-15; then
    install_deps "$REPO_DIR" || { echo "package_test: installing dependencies failed" >&2; finish; }
fi
install_packaging_deps
check "build dependencies installed" test $? -eq 0

# ---- a clean copy of the tree, and the build --------------------------------
phase "build"
WORK=$(mktemp -d /tmp/pg_tsmove_pkg.XXXXXX)
chmod 755 "$WORK"
installed_packages=()
cleanup() {
    if [ ${#installed_packages[@]} -gt 0 ]; then
        apt-get purge -y -q "${installed_packages[@]}" >/dev/null 2>&1
    fi
    if [ -n "${PACKAGE_TEST_KEEP:-}" ]; then
        echo "package_test: kept $WORK"
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

VERSION=$(cd "$REPO_DIR" && dpkg-parsechangelog -S Version)
SRC=$WORK/pg-tsmove-${VERSION%-*}
mkdir "$SRC"
# The files git knows (tracked, and new ones not ignored) as they are in the
# work tree: no objects, no test leftovers, no .git.
if git -C "$REPO_DIR" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$REPO_DIR" && git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' path; do [ -e "$path" ] && printf '%s\0' "$path"; done \
        | tar --null -T - -cf -) | tar -C "$SRC" -xf -
else
    tar -C "$REPO_DIR" --exclude=.git --exclude='*.o' --exclude='*.so' --exclude='*.bc' \
        --exclude='tmp_*' --exclude=results -cf - . | tar -C "$SRC" -xf -
fi
# the packages follow this machine's postgresql-common (debian/pgversions)
(cd "$SRC" && pg_buildext updatecontrol)
majors=$(cd "$SRC" && pg_buildext supported-versions)
echo "package_test: $VERSION for PostgreSQL $(echo $majors)"
build_started=$SECONDS
(cd "$SRC" && dpkg-buildpackage -us -uc -b) > "$WORK/build.log" 2>&1
build_rc=$?
echo "package_test: dpkg-buildpackage exited with $build_rc after $((SECONDS - build_started)) s"
[ $build_rc -ne 0 ] && tail -40 "$WORK/build.log"
check "dpkg-buildpackage -us -uc -b" test $build_rc -eq 0
debs=()
for major in $majors; do
    deb=$(ls "$WORK"/postgresql-"$major"-pg-tsmove_*.deb 2>/dev/null | head -1)
    check "postgresql-$major-pg-tsmove built" test -n "$deb"
    [ -n "$deb" ] && debs+=("$deb")
done
[ ${#debs[@]} -gt 0 ] || finish

# ---- install ------------------------------------------------------------------
phase "install"
# what is in a package's directories and belongs to no package
unowned_files() {
    local major=$1 path
    for path in /usr/lib/postgresql/"$major"/lib/pg_tsmove.so \
                /usr/lib/postgresql/"$major"/lib/bitcode/pg_tsmove.index.bc \
                /usr/lib/postgresql/"$major"/lib/bitcode/pg_tsmove \
                /usr/share/postgresql/"$major"/extension/pg_tsmove*; do
        [ -e "$path" ] || continue
        if [ -d "$path" ]; then
            find "$path" -type f
        else
            echo "$path"
        fi
    done | while read -r path; do dpkg -S "$path" >/dev/null 2>&1 || echo "$path"; done
}
for major in $majors; do
    # a package left by an interrupted run, then what make install left
    package_installed "postgresql-$major-pg-tsmove" \
        && apt-get purge -y -q "postgresql-$major-pg-tsmove" >/dev/null
    stray=$(unowned_files "$major")
    if [ -n "$stray" ]; then
        echo "package_test: removing $(echo "$stray" | wc -l) files of make install for $major"
        echo "$stray" | xargs rm -f
        rm -rf /usr/lib/postgresql/"$major"/lib/bitcode/pg_tsmove
    fi
done
(cd "$WORK" && apt_install "${debs[@]/#$WORK/.}") > "$WORK/install.log" 2>&1
install_rc=$?
[ $install_rc -ne 0 ] && tail -20 "$WORK/install.log"
check "apt-get install ${debs[*]##*/}" test $install_rc -eq 0
for major in $majors; do
    package_installed "postgresql-$major-pg-tsmove" && installed_packages+=("postgresql-$major-pg-tsmove")
done
[ ${#installed_packages[@]} -gt 0 ] || finish

# ---- the package's files ------------------------------------------------------
phase "files"
package_has() {         # package_has PACKAGE PATH...: dpkg -L lists every PATH
    local package=$1 path missing=0
    shift
    for path in "$@"; do
        if ! dpkg -L "$package" | grep -qxF "$path"; then
            echo "package_test: $package lacks $path"
            missing=1
        fi
    done
    return $missing
}
no_unowned() {
    local stray
    stray=$(unowned_files "$1")
    [ -z "$stray" ] || { echo "package_test: not from the package: $stray"; return 1; }
}
for package in "${installed_packages[@]}"; do
    major=${package#postgresql-}
    major=${major%%-*}
    scripts=()
    for script in "$SRC"/control/pg_tsmove--*.sql; do
        scripts+=("/usr/share/postgresql/$major/extension/${script##*/}")
    done
    check "$package holds pg_tsmove.so" \
        package_has "$package" "/usr/lib/postgresql/$major/lib/pg_tsmove.so"
    check "$package holds pg_tsmove.control" \
        package_has "$package" "/usr/share/postgresql/$major/extension/pg_tsmove.control"
    check "$package holds the ${#scripts[@]} SQL scripts of control/" package_has "$package" "${scripts[@]}"
    check "$package: dpkg --verify (the files on disk are the package's)" dpkg --verify "$package"
    check "$package: no pg_tsmove file from elsewhere" no_unowned "$major"
done

# ---- pg_regress against the installed package ----------------------------------
phase "pg_regress (debian/tests/installcheck)"
CHECK_DIR=$WORK/check
cp -a "$SRC" "$CHECK_DIR"
rm -rf "$CHECK_DIR"/debian/postgresql-*-pg-tsmove "$CHECK_DIR"/debian/.debhelper
chown -R postgres:postgres "$CHECK_DIR"
# pg_virtualenv's server (unused by the suite) takes PGPORT: a free one,
# not 5432, where a server of the machine may listen
PGPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) \
    && export PGPORT
(cd "$CHECK_DIR" && runuser -u postgres -- env HOME="$CHECK_DIR" debian/tests/installcheck) \
    > "$WORK/installcheck.out" 2>&1
regress_rc=$?
cat "$WORK/installcheck.out"
if [ $regress_rc -ne 0 ]; then
    for diffs in "$CHECK_DIR"/tmp_regress*/regression.diffs; do
        [ -f "$diffs" ] && { echo "===== $diffs"; cat "$diffs"; }
    done
fi
read -r total regress_failed < <(pg_regress_counts "$WORK/installcheck.out")
passed=$((passed + total - regress_failed))
failed=$((failed + regress_failed))
echo "package_test: pg_regress: $((total - regress_failed)) passed, $regress_failed failed"
# a failed test is counted above; what is left is a run that failed otherwise
if [ "$regress_failed" -eq 0 ]; then
    check "debian/tests/installcheck ran tests and exited 0" test "$total" -gt 0 -a $regress_rc -eq 0
fi

# ---- remove -------------------------------------------------------------------
phase "remove"
apt-get purge -y -q "${installed_packages[@]}" > "$WORK/purge.log" 2>&1
check "apt-get purge ${installed_packages[*]}" test $? -eq 0
for major in $majors; do
    check "no pg_tsmove file left for $major" \
        test -z "$(ls -d /usr/lib/postgresql/"$major"/lib/pg_tsmove.so \
                         /usr/lib/postgresql/"$major"/lib/bitcode/pg_tsmove* \
                         /usr/share/postgresql/"$major"/extension/pg_tsmove* 2>/dev/null)"
done
installed_packages=()
finish
