# Installs what building and testing pg_tsmove needs, skipping what is there.
# Sourced by test/run_tests.sh, test/demo.sh and test/eval/run.sh (as root),
# which then call install_deps.  Debian packages: the PostgreSQL 15 server,
# contrib (amcheck), server headers, a compiler, pg_repack (for the benchmark
# and the evaluation), e2fsprogs (mkfs.ext4 for the evaluation's emulated
# disks), patroni and etcd-server (test_patroni.py's HA cluster; their
# services are not started: the test runs its own, on loopback); Python
# packages from test/requirements.txt.  Also the one
# function the test scripts share: pg_regress_counts.

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PYTHON=${PYTHON:-python3}

package_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        -o Dpkg::Options::=--force-confold "$@"
}

install_deps() {
    local repo_dir=$1 wanted=() pkg need_contrib=false
    if ! package_installed postgresql-common; then
        apt-get update -q || return 1
        apt_install postgresql-common || return 1
        # Do not let the server package create and start a "main" cluster:
        # the tests and the demo make their own.
        sed -ri 's/^#?\s*create_main_cluster\s*=.*/create_main_cluster = false/' \
            /etc/postgresql-common/createcluster.conf
    fi
    for pkg in postgresql-15 postgresql-server-dev-15 build-essential \
               postgresql-15-repack e2fsprogs patroni etcd-server; do
        package_installed "$pkg" || wanted+=("$pkg")
    done
    if ! package_installed postgresql-contrib-15 && ! package_installed postgresql-contrib; then
        need_contrib=true
    fi
    if [ ${#wanted[@]} -gt 0 ] || $need_contrib; then
        apt-get update -q || return 1
        # PGDG ships postgresql-contrib-15; Debian has contrib inside
        # postgresql-15 and a postgresql-contrib metapackage.
        if $need_contrib && apt-cache show postgresql-contrib-15 >/dev/null 2>&1; then
            wanted+=(postgresql-contrib-15)
        elif $need_contrib; then
            wanted+=(postgresql-contrib)
        fi
        echo "install_deps: installing ${wanted[*]}"
        apt_install "${wanted[@]}" || return 1
    fi
    "$PYTHON" -m pip install -q --root-user-action=ignore \
        -r "$repo_dir/test/requirements.txt" || return 1
}

# What building the Debian packages needs (test/package_test.sh, .ci/run).
install_packaging_deps() {
    local wanted=() pkg
    for pkg in build-essential dpkg-dev debhelper fakeroot postgresql-server-dev-all git; do
        package_installed "$pkg" || wanted+=("$pkg")
    done
    [ ${#wanted[@]} -eq 0 ] && return 0
    echo "install_deps: installing ${wanted[*]}"
    apt-get update -q >/dev/null && apt_install "${wanted[@]}" >/dev/null
}

# pg_regress_counts FILE: "TOTAL FAILED" over the output of one or more
# pg_regress runs (each ends with "All N tests passed." or "M of N tests
# failed."; the Makefile runs pg_regress more than once).
pg_regress_counts() {
    grep -oE '(All [0-9]+ tests passed|[0-9]+ of [0-9]+ tests failed)' "$1" | awk '
        /^All/ { total += $2 }
        / of / { failed += $1; total += $3 }
        END    { print total + 0, failed + 0 }'
}
