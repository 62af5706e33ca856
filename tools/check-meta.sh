#!/bin/bash
# Validates META.json, the PGXN distribution metadata:  bash tools/check-meta.sh
#
#  1. against the PGXN Meta Spec's JSON schemas, with pgxn_meta (the PGXN
#     project's validator, a Rust crate whose CLI embeds the schemas of
#     spec v1 and v2); installed once per machine with cargo into
#     $PGXN_META_ROOT (default /opt/pgxn-meta), pinned to one version;
#  2. that its version and the version of the extension it provides are
#     the Makefile's EXTVERSION and the control file's default_version
#     (as SemVer: 0.5 is 0.5.0), and that the file it names exists; and
#     that debian/changelog packages that version.
#
# Prints one line per check and "meta: N passed, M failed"; exits non-zero
# if a check failed or the validator could not be installed.

set -u
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGXN_META_VERSION=0.7.0
PGXN_META_ROOT=${PGXN_META_ROOT:-/opt/pgxn-meta}
VALIDATOR=$PGXN_META_ROOT/bin/pgxn_meta
META=$REPO_DIR/META.json

passed=0
failed=0
check() {       # check NAME COMMAND...
    local name=$1
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "check-meta: ok      $name"
    else
        failed=$((failed + 1))
        echo "check-meta: FAILED  $name"
    fi
}
finish() {
    echo "meta: $passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
    exit $?
}

# ---- the validator, once per machine -------------------------------------------
validator_version() {   # it prints "<the path it was called by> <version>"
    "$VALIDATOR" --version 2>/dev/null | awk '{ print $NF }'
}
if [ "$(validator_version)" != "$PGXN_META_VERSION" ]; then
    cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
    if [ ! -x "$cargo" ]; then
        echo "check-meta: cargo not found: the validator (crate pgxn_meta) is built with it" >&2
        check "pgxn_meta $PGXN_META_VERSION installed" false
        finish
    fi
    echo "check-meta: installing pgxn_meta $PGXN_META_VERSION into $PGXN_META_ROOT (once per machine)"
    started=$SECONDS
    "$cargo" install --quiet --locked --version "$PGXN_META_VERSION" --root "$PGXN_META_ROOT" pgxn_meta
    echo "check-meta: cargo install took $((SECONDS - started)) s"
fi
check "pgxn_meta $PGXN_META_VERSION installed" test "$(validator_version)" = "$PGXN_META_VERSION"
[ -x "$VALIDATOR" ] || finish

# ---- the schemas ------------------------------------------------------------------
check "META.json valid under the PGXN Meta Spec ($(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta-spec"]["version"])' "$META" 2>/dev/null))" \
    "$VALIDATOR" "$META"

# ---- versions and files -------------------------------------------------------
semver() {      # 0.5 -> 0.5.0
    case $1 in
        *.*.*) echo "$1" ;;
        *.*) echo "$1.0" ;;
        *) echo "$1.0.0" ;;
    esac
}
meta_field() {  # meta_field PYTHON-EXPRESSION-ON-m
    python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$META" "$1" 2>/dev/null
}
extversion=$(sed -n 's/^EXTVERSION *= *\([^ ]*\).*/\1/p' "$REPO_DIR/Makefile")
default_version=$(sed -n "s/^default_version *= *'\\([^']*\\)'.*/\\1/p" "$REPO_DIR/control/pg_tsmove.control")
meta_version=$(meta_field 'm["version"]')
provided_version=$(meta_field 'm["provides"]["pg_tsmove"]["version"]')
provided_file=$(meta_field 'm["provides"]["pg_tsmove"]["file"]')
provided_docfile=$(meta_field 'm["provides"]["pg_tsmove"]["docfile"]')
echo "check-meta: Makefile EXTVERSION $extversion, control default_version $default_version," \
     "META.json version $meta_version, provides pg_tsmove $provided_version"
check "META.json version = Makefile EXTVERSION" test -n "$extversion" -a "$meta_version" = "$(semver "$extversion")"
check "META.json version = control default_version" \
    test -n "$default_version" -a "$meta_version" = "$(semver "$default_version")"
check "provides pg_tsmove version = META.json version" test "$provided_version" = "$meta_version"
check "provides file is control/pg_tsmove--$default_version.sql" \
    test "$provided_file" = "control/pg_tsmove--$default_version.sql" -a -f "$REPO_DIR/$provided_file"
check "provides docfile exists" test -n "$provided_docfile" -a -f "$REPO_DIR/$provided_docfile"
# the Debian package's upstream version, from the first line of debian/changelog
package_version=$(sed -n '1s/^[^ ]* (\([^)-]*\)-[^)]*).*/\1/p' "$REPO_DIR/debian/changelog")
check "debian/changelog's version ($package_version) = META.json version" test "$package_version" = "$meta_version"
finish
