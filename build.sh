#!/usr/bin/env bash
# ngx-ratelimit: the one entry point.
#
#   ./build.sh          install what is missing, build the core and the module
#   ./build.sh test     build, then run the unit tests (ctest) and the
#                       end-to-end tests against real nginx (prove -r t/);
#                       the Redis tests start their own redis-server
#   ./build.sh test-asan [T...]  the same tests, everything built with
#                       AddressSanitizer and UndefinedBehaviorSanitizer (the
#                       end-to-end files T only, when given)
#   ./build.sh matrix [ENTRY...]  for each ENTRY, build nginx and the module
#                       from source and run the whole t/ against that build:
#                       debian (Debian's packaged nginx), a version whose
#                       source is nginx-VERSION.tar.gz in $NGINX_TARBALLS
#                       (1.30.4), or VERSION-static (compiled in with
#                       --add-module); default: debian and every MATRIX entry
#   ./build.sh deb      build/deb/libnginx-mod-http-ratelimit_<version>_<arch>.deb
#                       and libnginx-mod-stream-ratelimit_<version>_<arch>.deb
#                       for the installed Debian nginx
#   ./build.sh test-deb build the packages, install them into this machine's
#                       nginx, test them (debian/tests/installed), purge them
#   ./build.sh fuzz [SECONDS]  the libFuzzer targets, each for SECONDS (60)
#   ./build.sh stress [ROUNDS] reloads and worker kills under load (100)
#   ./build.sh check-format  the C++ core as clang-format says, the C glue
#                       in nginx's style (tools/nginx-style), and the tree's
#                       shape (tools/check-structure)
#   ./build.sh demo     build, then run nginx with examples/nginx.conf on
#                       127.0.0.1:8080 (PORT=8081 for another port) in the
#                       foreground; Ctrl-C stops it
#   ./build.sh bench    build, then run the benchmarks (bench/README.md);
#                       ./build.sh bench core|state|throughput|density|shaping|redis|redis_concurrency|adaptive|priority|config|stream|bandwidth
#                       runs one of them
#   ./build.sh instructions [--check]  build, then count each benchmark
#                       location's instructions a request under callgrind
#                       (bench/instructions); --check fails when one is more
#                       than 3% over bench/budget
#
# Result: build/ngx_http_ratelimit_module.so, loadable into Debian's nginx.
# The module is built the way any nginx module is (config, config.make):
# Debian's nginx source (nginx-dev) configured with the packaged nginx's
# flags and --add-dynamic-module, then `make modules`.
# NGINX_SRC=/path/to/nginx-source builds against another nginx source tree.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$ROOT/build
NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
NGINX_TARBALLS=${NGINX_TARBALLS:-$ROOT/../shared/nginx}
JOBS=$(nproc 2>/dev/null || echo 2)
# end-to-end files at once (prove -j): they mostly wait, so more than cores
PROVE_JOBS=${PROVE_JOBS:-8}
VERSION=$(cat "$ROOT/VERSION")
# the source package is named after the first; debian/control
DEB_PACKAGES=(libnginx-mod-http-ratelimit libnginx-mod-stream-ratelimit)

# The nginx releases of the matrix besides Debian's own (entry "debian"),
# and one of them again with the module compiled in.
MATRIX=(1.24.0 1.26.3 1.28.3 1.30.4 1.31.4 1.30.4-static)

# -Werror for the C++ core here and in CI only (nginx compiles its C with
# -Werror already): a user's newer compiler may warn about more.
STRICT_CXXFLAGS="-g -Werror"

PACKAGES=(nginx nginx-dev cmake make g++ libgtest-dev libpcre2-dev libssl-dev
          zlib1g-dev perl redis-server gdb)
# what the end-to-end tests need beyond the build: t/dashboard.t opens the
# dashboard in Debian's headless Chromium; t/security_surface.t measures
# nginx -t's memory with /usr/bin/time; t/grpc.t runs a real gRPC server and
# client (python3-grpcio, with Debian's own python3) and looks at the HTTP/2
# answer with curl; t/adaptive.t runs its upstream and load generator with
# python3; t/state_bounds.t runs nginx a day ahead under libfaketime; the
# stream tests (t/stream*.t) load Debian's ngx_stream_module.so
TEST_PACKAGES=(chromium time python3-grpcio curl python3 faketime libnginx-mod-stream)

# bold on a terminal only: CI logs and files get plain text
if [ -t 2 ]; then
    log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }
else
    log() { printf '== %s\n' "$*" >&2; }
fi

die() {
    echo "build.sh: $*" >&2
    exit 1
}

# Debian packages only, and only what is missing, so re-runs stay fast.
ensure_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing ${missing[*]}"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# build_core DIR [cmake options...]: the core, its tests and tools in DIR.
build_core() {
    local dir=$1
    shift
    log "core (CMake, $dir)"
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        cmake -S "$ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    fi
    cmake --build "$dir" -j "$JOBS" >&2
}

# config_stamp WORDS...: what a configured nginx tree was made from; it is
# configured again when this changes (a new core source file in
# core/build.conf too).
config_stamp() {
    printf '%s\n' "$@" "$VERSION" \
        | cat - "$ROOT/config" "$ROOT/config.make" "$ROOT/core/build.conf" | sha256sum
}

# build_module OBJDIR OUT [EXTRA_CXX [EXTRA_CC [EXTRA_LD]]]: configures a copy
# of the nginx source with the distro's own flags (so the module is binary
# compatible with the packaged nginx) and --add-dynamic-module, and builds
# the module, its C++ core included (config.make), into OUT.
build_module() {
    local objdir=$1 out=$2 extra_cxx=${3:-} extra_cc=${4:-} extra_ld=${5:-}
    local cc_opt="" ld_opt="" cxxflags stamp
    if [ -x "$NGINX_BIN" ]; then
        cc_opt=$("$NGINX_BIN" -V 2>&1 | sed -n "s/.*--with-cc-opt='\([^']*\)'.*/\1/p")
        ld_opt=$("$NGINX_BIN" -V 2>&1 | sed -n "s/.*--with-ld-opt='\([^']*\)'.*/\1/p")
    fi
    cc_opt="$cc_opt -fPIC $extra_cc"
    ld_opt="$ld_opt -fPIC $extra_ld"
    cxxflags="$STRICT_CXXFLAGS $extra_cxx"
    stamp=$(config_stamp "$NGINX_SRC" "$cc_opt" "$ld_opt" "$cxxflags")

    if [ ! -f "$objdir/objs/Makefile" ] || [ "$(cat "$objdir/.stamp" 2>/dev/null)" != "$stamp" ]; then
        log "configuring nginx from $NGINX_SRC in $objdir"
        rm -rf "$objdir"
        mkdir -p "$objdir"
        cp -a "$NGINX_SRC/." "$objdir/"
        (
            cd "$objdir"
            local flags=(--with-compat)
            if [ -f conf_flags ]; then
                # shellcheck disable=SC1091
                . ./conf_flags
                flags=("${NGX_CONF_FLAGS[@]}")
            fi
            # --with-stream: the stream module's headers (nginx-dev has no
            # source to build --with-stream=dynamic from), so that
            # ngx_stream_ratelimit_module is built beside the HTTP one
            CXXFLAGS=$cxxflags ./configure "${flags[@]}" --with-stream --with-cc-opt="$cc_opt" \
                --with-ld-opt="$ld_opt" --add-dynamic-module="$ROOT" >"$objdir/configure.log" 2>&1 \
                || { tail -30 "$objdir/configure.log"; exit 1; }
        )
        echo "$stamp" >"$objdir/.stamp"
    fi

    log "module ($out)"
    make -C "$objdir" -f objs/Makefile -j "$JOBS" modules >"$objdir/make.log" 2>&1 \
        || { cat "$objdir/make.log"; exit 1; }
    # a new file, not rewritten in place: a running nginx may have it mapped
    cp "$objdir/objs/ngx_http_ratelimit_module.so" "$out.tmp"
    mv -f "$out.tmp" "$out"
    # the stream module beside it: ngx_stream_ratelimit_module.so
    local stream_out=${out%/*}/ngx_stream_ratelimit_module.so
    cp "$objdir/objs/ngx_stream_ratelimit_module.so" "$stream_out.tmp"
    mv -f "$stream_out.tmp" "$stream_out"
}

build() {
    ensure_packages "${PACKAGES[@]}"
    mkdir -p "$BUILD"
    build_core "$BUILD/cmake" -DRL_WERROR=ON -DRL_TOOLS_DIR="$BUILD"
    build_module "$BUILD/nginx" "$BUILD/ngx_http_ratelimit_module.so"
    log "built $BUILD/ngx_http_ratelimit_module.so and $BUILD/ngx_stream_ratelimit_module.so"
}

# prove_t [FILE...]: the end-to-end files (t/ unless FILEs are given),
# PROVE_JOBS at a time: a file mostly waits (for a window, a lease, a
# timeout), and each has its own nginx, ports (RLTest::free_port), Redis
# and temporary directories.  A file that cannot share the machine says so
# near its top, on a line "# prove: serial (WHY)"; those run one after the
# other once the rest are done.  The whole t/ starts with the files that
# took longest the last time (prove's state, in build/).
prove_t() {
    local files=("$@") parallel state=(--state=save --statefile="$BUILD/prove-state")
    if [ ${#files[@]} -eq 0 ]; then
        files=(t/)
        [ -f "$BUILD/prove-state" ] && state+=(--state=slow)
    fi
    # grep -L fails when no file is tagged: every file is then parallel
    parallel=$(cd "$ROOT" && { grep -L '^# prove: serial' t/*.t || true; } | paste -sd, -)
    (cd "$ROOT" && prove --timer -j "$PROVE_JOBS" "${state[@]}" --rules "par={$parallel}" -r "${files[@]}")
}

run_tests() {
    ensure_packages "${TEST_PACKAGES[@]}"
    log "unit tests (ctest)"
    ctest --test-dir "$BUILD/cmake" --output-on-failure -j "$JOBS"
    log "end-to-end tests (prove -r t/)"
    prove_t
}

# Both suites again with the core, its tests, the tools and the module built
# with AddressSanitizer and UBSan.  Debian's nginx is not instrumented: the
# sanitizer runtime is preloaded into it (RL_PRELOAD, only for nginx), leak
# checks are off (nginx does not free its cycle at exit), and any report in
# the error log fails the test that caused it (t/lib/RLTest.pm).
test_asan() {
    local dir=$BUILD/asan san="-fsanitize=address,undefined -fno-omit-frame-pointer"
    ensure_packages "${PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    mkdir -p "$dir"
    build_core "$dir/cmake" -DRL_WERROR=ON -DRL_SANITIZE=ON -DRL_BENCH=OFF -DRL_TOOLS_DIR="$dir"
    build_module "$dir/nginx" "$dir/ngx_http_ratelimit_module.so" \
        "$san -fno-sanitize-recover=undefined" "$san" "-fsanitize=address,undefined"
    # detect_odr_violation=0: the shared glue is linked into both modules,
    # and its zone tag is one global on purpose (the second .so's resolves
    # to the first's, so that both modules' zones are one)
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_segv=1:detect_odr_violation=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    log "unit tests, sanitized (ctest)"
    ctest --test-dir "$dir/cmake" --output-on-failure -j "$JOBS"
    log "end-to-end tests, sanitized (prove -r t/)"
    RL_MODULE=$dir/ngx_http_ratelimit_module.so RL_REPLAY=$dir/ratelimit-replay \
        RL_PRELOAD="$(gcc -print-file-name=libasan.so)" prove_t "$@"
}

# build_release ENTRY DIR: nginx from the source of a release (a tarball of
# the nginx repository's tag: configure is auto/configure there) with the
# module added as README tells a user to, --with-compat
# --add-dynamic-module, or --add-module for VERSION-static; in DIR/src/objs.
build_release() {
    local entry=$1 dir=$2 version=${1%-static} add=--add-dynamic-module tarball stamp
    [ "$entry" = "$version" ] || add=--add-module
    tarball=$NGINX_TARBALLS/nginx-$version.tar.gz
    [ -f "$tarball" ] || die "no $tarball (NGINX_TARBALLS names the folder of the nginx-VERSION.tar.gz)"
    stamp=$(config_stamp "$tarball" "$add" "$STRICT_CXXFLAGS")
    if [ ! -f "$dir/src/objs/Makefile" ] || [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$stamp" ]; then
        log "configuring nginx $version ($add) in $dir"
        rm -rf "$dir"
        mkdir -p "$dir/src"
        tar xzf "$tarball" -C "$dir/src" --strip-components=1
        # realip, stub_status, auth_request and v2 (t/grpc.t's h2c and
        # grpc_pass): the modules t/ uses beyond the default ones
        (cd "$dir/src" && CXXFLAGS=$STRICT_CXXFLAGS auto/configure --prefix="$dir/prefix" --with-compat \
            --with-http_realip_module --with-http_stub_status_module --with-http_auth_request_module \
            --with-http_v2_module --with-stream --with-stream_ssl_preread_module \
            "$add=$ROOT" >"$dir/configure.log" 2>&1) \
            || { tail -30 "$dir/configure.log"; die "configure of nginx $version failed"; }
        echo "$stamp" >"$dir/.stamp"
    fi
    log "nginx $version and the module ($add)"
    make -C "$dir/src" -f objs/Makefile -j "$JOBS" >"$dir/make.log" 2>&1 \
        || { cat "$dir/make.log"; die "make of nginx $version failed"; }
}

# matrix_entry ENTRY: its build, then the whole t/ against it.
matrix_entry() {
    local entry=$1 dir=$BUILD/matrix/$1 nginx module
    if [ "$entry" = debian ]; then
        nginx=$NGINX_BIN
        module=$BUILD/ngx_http_ratelimit_module.so
    else
        build_release "$entry" "$dir"
        nginx=$dir/src/objs/nginx
        module=$dir/src/objs/ngx_http_ratelimit_module.so
        [ "$entry" = "${entry%-static}" ] || module=static
    fi
    log "t/ against $("$nginx" -v 2>&1 | sed 's/.*: //') ($entry)"
    RL_NGINX=$nginx RL_MODULE=$module prove_t
}

matrix() {
    local entries=("$@") entry start failed=()
    [ ${#entries[@]} -gt 0 ] || entries=(debian "${MATRIX[@]}")
    build   # the module for Debian's nginx, and ratelimit-replay for t/replay.t
    ensure_packages "${TEST_PACKAGES[@]}"
    for entry in "${entries[@]}"; do
        start=$SECONDS
        # a subshell: a failed build is reported, and the next entry runs
        if (matrix_entry "$entry"); then
            log "matrix: $entry passed ($((SECONDS - start)) s)"
        else
            log "matrix: $entry FAILED ($((SECONDS - start)) s)"
            failed+=("$entry")
        fi
    done
    [ ${#failed[@]} -eq 0 ] || die "matrix: failed: ${failed[*]}"
    log "matrix: passed: ${entries[*]}"
}

# The Debian package, built the way Debian builds nginx modules (debian/:
# dh with the nginx sequence, dh_nginx, the nginx_mod build system), from a
# copy of the tree in build/deb, so that nothing is written into the source
# tree; debian/changelog is written there from VERSION, the one place the
# version is kept.  Prints the packages' paths last, a line each.
build_deb() {
    local stage=$BUILD/deb/src debs=() p when
    ensure_packages "${PACKAGES[@]}" libnginx-mod-stream dpkg-dev debhelper build-essential
    for p in "${DEB_PACKAGES[@]}"; do
        debs+=("$BUILD/deb/${p}_${VERSION}_$(dpkg --print-architecture).deb")
    done
    log "Debian packages ${debs[*]}"
    rm -rf "$stage"
    mkdir -p "$stage/ngx-ratelimit"
    tar -C "$ROOT" --exclude=./build --exclude=./.git -cf - . | tar -C "$stage/ngx-ratelimit" -xf -
    # the date of the last commit, so that a rebuild makes the same package
    when=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)
    {
        printf '%s (%s) unstable; urgency=medium\n\n' "${DEB_PACKAGES[0]}" "$VERSION"
        printf '  * Version %s: see CHANGELOG.md.\n\n' "$VERSION"
        printf ' -- %s  %s\n' "$(sed -n 's/^Maintainer: //p' "$ROOT/debian/control")" "$(date -R -d "@$when")"
    } >"$stage/ngx-ratelimit/debian/changelog"
    (cd "$stage/ngx-ratelimit" && dpkg-buildpackage -b -us -uc) >"$BUILD/deb/build.log" 2>&1 \
        || { tail -40 "$BUILD/deb/build.log"; die "dpkg-buildpackage failed: see $BUILD/deb/build.log"; }
    for p in "${debs[@]}"; do
        mv -f "$stage/$(basename "$p")" "$p"
        dpkg-deb -f "$p" Package Version Architecture Depends >&2
    done
    printf '%s\n' "${debs[@]}"
}

# the system's nginx (the one of /run/nginx.pid) is running
system_nginx_running() {
    [ -s /run/nginx.pid ] && kill -0 "$(cat /run/nginx.pid)" 2>/dev/null
}

# Installs the package into this machine's nginx as README tells an
# operator to, runs debian/tests/installed against it, purges it, and checks
# that nothing of it is left.  A package installed before is not touched,
# and no system nginx is left running that was not running before.
test_deb() {
    local debs p was_running=no
    mapfile -t debs < <(build_deb | tail -${#DEB_PACKAGES[@]})
    for p in "${DEB_PACKAGES[@]}"; do
        if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
            die "$p is installed already: test-deb would purge it; remove it first"
        fi
    done
    system_nginx_running && was_running=yes
    trap purge_deb EXIT
    log "apt-get install ${debs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o Dpkg::Use-Pty=0 "${debs[@]}" >&2
    log "debian/tests/installed"
    (cd "$ROOT" && prove debian/tests/installed)
    trap - EXIT
    purge_deb
    check_purged
    if [ $was_running = no ] && system_nginx_running; then
        die "the system nginx was left running"
    fi
    log "test-deb: installed, loaded, limited a request and a connection, purged, nothing left"
}

purge_deb() {
    log "apt-get purge ${DEB_PACKAGES[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q -o Dpkg::Use-Pty=0 "${DEB_PACKAGES[@]}" >&2
}

check_purged() {
    local left
    left=$(find /usr/lib/nginx/modules /usr/share/nginx/modules-available /etc/nginx/modules-enabled \
                -name '*ratelimit*' 2>/dev/null || true)
    [ -z "$left" ] || die "left after purge: $left"
    local p
    for p in "${DEB_PACKAGES[@]}"; do
        if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -qv 'not-installed'; then
            die "$p is still known to dpkg after purge"
        fi
    done
}

DEMO_PREFIX=
DEMO_PID=

# Stops the demo's nginx and removes its prefix, however the demo ends.
demo_cleanup() {
    if [ -n "$DEMO_PID" ]; then
        kill -TERM "$DEMO_PID" 2>/dev/null || true
        wait "$DEMO_PID" 2>/dev/null || true
    fi
    if [ -n "$DEMO_PREFIX" ]; then
        rm -rf "$DEMO_PREFIX"
    fi
}

# port_free PORT: nothing listens on 127.0.0.1:PORT (it can be bound)
port_free() {
    perl -MIO::Socket::INET -e 'exit(IO::Socket::INET->new(LocalAddr => "127.0.0.1",
        LocalPort => $ARGV[0], Listen => 1, ReuseAddr => 1) ? 0 : 1)' "$1"
}

demo() {
    local port=${PORT:-8080} rc=0
    case "$port" in
        '' | *[!0-9]*) die "PORT=$port is not a port number" ;;
    esac
    port_free "$port" \
        || die "127.0.0.1:$port is in use: stop what listens there, or pick another port: PORT=8081 ./build.sh demo"
    trap demo_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    DEMO_PREFIX=$(mktemp -d /tmp/ngx-ratelimit-demo.XXXXXX)
    chmod 755 "$DEMO_PREFIX"   # nginx's workers run as nobody
    mkdir -p "$DEMO_PREFIX/modules" "$DEMO_PREFIX/html" "$DEMO_PREFIX/logs" "$DEMO_PREFIX/tmp"
    cp "$BUILD/ngx_http_ratelimit_module.so" "$DEMO_PREFIX/modules/"
    sed "s/127\.0\.0\.1:8080/127.0.0.1:$port/" "$ROOT/examples/nginx.conf" >"$DEMO_PREFIX/nginx.conf"
    echo "hello from ngx-ratelimit" >"$DEMO_PREFIX/html/index.html"
    cat >&2 <<EOF

nginx is running on http://127.0.0.1:$port (prefix $DEMO_PREFIX). In another terminal:

    curl -i http://127.0.0.1:$port/      # six times: X-RateLimit-Remaining counts
                                        # down 4, 3, 2, 1, 0, then 429 + Retry-After
    tail -f $DEMO_PREFIX/logs/access.log    # \$ratelimit_status of each request

Ctrl-C stops it.
EOF
    # in the background and waited for, so that the traps run at Ctrl-C or
    # TERM at once and stop it
    "$NGINX_BIN" -p "$DEMO_PREFIX/" -c "$DEMO_PREFIX/nginx.conf" -e stderr &
    DEMO_PID=$!
    wait "$DEMO_PID" || rc=$?
    DEMO_PID=
    return $rc
}

# Figures go to stdout, progress to stderr; bench/README.md explains them.
run_bench() {
    local which=${1:-all}
    ensure_packages wrk libbenchmark-dev util-linux python3
    build
    if [ "$which" = all ] || [ "$which" = core ]; then
        log "core micro-benchmarks"
        "$BUILD/cmake/core_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
            --benchmark_filter='.*' 2>/dev/null | grep -E 'median|^Run on|^Benchmark'
        "$BUILD/cmake/contention_bench"
    fi
    if [ "$which" = all ] || [ "$which" = state ]; then
        log "state file"
        "$BUILD/cmake/state_bench"
    fi
    if [ "$which" = all ] || [ "$which" = summary ]; then
        log "eviction summary"
        "$BUILD/cmake/summary_bench"
    fi
    for b in throughput density shaping redis redis_concurrency sync adaptive priority config stream bandwidth; do
        if [ "$which" = all ] || [ "$which" = "$b" ]; then
            log "$b"
            # the redis bench's Kong-style peer runs on Debian's lua module
            if [ "$b" = redis ]; then ensure_packages libnginx-mod-http-lua; fi
            # the stream bench's peer is Debian's HAProxy; its client is C
            if [ "$b" = stream ]; then ensure_packages haproxy gcc libnginx-mod-stream; fi
            if [ "$b" = config ]; then perl "$ROOT/bench/config_scale.pl"; else perl "$ROOT/bench/$b.pl"; fi
        fi
    done
}

# Instructions a request by location under callgrind, deterministic
# (bench/instructions, bench/README.md); arguments go to it (--check).
instructions() {
    ensure_packages valgrind gcc
    build
    log "instructions a request (bench/instructions $*)"
    (cd "$ROOT" && perl bench/instructions "$@")
}

# The libFuzzer targets (clang, with ASan and UBSan), each for SECONDS
# (default 60), starting from the committed seeds in tests/fuzz/corpus.
fuzz() {
    local seconds=${1:-60} dir=$BUILD/fuzz t
    ensure_packages clang libclang-rt-14-dev cmake make
    build_core "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DRL_FUZZ=ON -DRL_TESTS=OFF \
        -DRL_BENCH=OFF -DRL_TOOLS_DIR="$dir"
    for t in rule transition resp api overrides state; do
        log "fuzz_$t for ${seconds}s"
        mkdir -p "$dir/corpus/$t"
        cp "$ROOT/tests/fuzz/corpus/$t/"* "$dir/corpus/$t/"
        "$dir/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/" \
            "$dir/corpus/$t" 2>&1 | grep -E '^(stat::number_of_executed_units|stat::new_units_added)|ERROR|failed|SUMMARY|Done'
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz_$t failed: see $dir/crash-*" >&2; exit 1; }
    done
}

# The formatting: clang-format's for the C++ core, its tests, benchmarks
# and tools (.clang-format), nginx's for the C glue, bench/clock.c
# and bench/connect.c (tools/nginx-style).
check_format() {
    ensure_packages clang-format perl
    log "formatting (clang-format, tools/nginx-style)"
    (cd "$ROOT" && clang-format --dry-run --Werror core/src/*/*.cpp core/src/*/*.h core/tools/*.cpp core/tools/*.h \
        tests/*.cc tests/*.h tests/fuzz/*.cc bench/*.cc \
        && tools/nginx-style ngx_module/*.c ngx_module/*/*.[ch] core/include/ratelimit*.h bench/clock.c bench/connect.c \
        && tools/check-structure) \
        || { echo "formatting: see above (clang-format -i FILE for C++)" >&2; exit 1; }
}

# t/stress.t for ROUNDS rounds (default 100) of reload and SIGKILL of a
# worker under load.
stress() {
    log "stress: ${1:-100} rounds"
    (cd "$ROOT" && RL_STRESS_ROUNDS=${1:-100} prove t/stress.t)
}

case "${1:-build}" in
    build) build ;;
    test) build; run_tests ;;
    test-asan) shift; test_asan "$@" ;;
    matrix) shift; matrix "$@" ;;
    deb) build_deb ;;
    test-deb) test_deb ;;
    fuzz) fuzz "${2:-60}" ;;
    demo) build; demo ;;
    bench) run_bench "${2:-all}" ;;
    instructions) shift; instructions "$@" ;;
    stress) build; stress "${2:-100}" ;;
    check-format) check_format ;;
    *) echo "usage: $0 [build|test|test-asan|matrix [ENTRY...]|deb|test-deb|fuzz [SECONDS]|stress [ROUNDS]|check-format|demo|bench [core|summary|state|throughput|density|shaping|redis|redis_concurrency|sync|adaptive|priority|config|stream|bandwidth]|instructions [--check]]" >&2
       exit 2 ;;
esac
