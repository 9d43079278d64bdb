#!/usr/bin/env bash
# ngx-ratelimit: the one entry point.
#
#   ./build.sh          install what is missing, build the core and the module
#   ./build.sh test     build, then run the unit tests (ctest) and the
#                       end-to-end tests against real nginx (prove -r t/);
#                       the Redis tests start their own redis-server
#   ./build.sh test-asan  the same tests, everything built with AddressSanitizer
#                       and UndefinedBehaviorSanitizer
#   ./build.sh fuzz [SECONDS]  the libFuzzer targets, each for SECONDS (60)
#   ./build.sh stress [ROUNDS] reloads and worker kills under load (100)
#   ./build.sh demo     build, then run nginx with examples/nginx.conf on
#                       127.0.0.1:8080 in the foreground
#   ./build.sh bench    build, then run the benchmarks (bench/README.md);
#                       ./build.sh bench core|throughput|density|shaping|redis
#                       runs one of them
#
# Result: build/ngx_http_ratelimit_module.so, loadable into Debian's nginx.
# NGINX_SRC=/path/to/nginx-source builds against another nginx source tree
# (default: Debian's /usr/share/nginx/src from nginx-dev).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BUILD=$ROOT/build
NGINX_SRC=${NGINX_SRC:-/usr/share/nginx/src}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
JOBS=$(nproc 2>/dev/null || echo 2)

PACKAGES=(nginx nginx-dev cmake make g++ libgtest-dev libpcre2-dev libssl-dev
          zlib1g-dev perl redis-server gdb)
# what the end-to-end tests need beyond the build: t/dashboard.t opens the
# dashboard in Debian's headless Chromium
TEST_PACKAGES=(chromium)

log() { printf '\033[1m== %s\033[0m\n' "$*" >&2; }

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

# build_module CORE_LIB OBJDIR OUT [EXTRA_CC [EXTRA_LD]]: configures a copy
# of the nginx source with the distro's own flags (so the module is binary
# compatible with the packaged nginx) and builds the module into OUT.
build_module() {
    local lib=$1 objdir=$2 out=$3 extra_cc=${4:-} extra_ld=${5:-}
    local cc_opt="" ld_opt="" stamp
    if [ -x "$NGINX_BIN" ]; then
        cc_opt=$("$NGINX_BIN" -V 2>&1 | sed -n "s/.*--with-cc-opt='\([^']*\)'.*/\1/p")
        ld_opt=$("$NGINX_BIN" -V 2>&1 | sed -n "s/.*--with-ld-opt='\([^']*\)'.*/\1/p")
    fi
    cc_opt="$cc_opt -fPIC $extra_cc"
    ld_opt="$ld_opt -fPIC $extra_ld"
    stamp=$(printf '%s\n' "$NGINX_SRC" "$lib" "$cc_opt" "$ld_opt" | cat - "$ROOT/config" "$ROOT/config.make" | sha256sum)

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
            RL_CORE_LIB=$lib ./configure "${flags[@]}" --with-cc-opt="$cc_opt" --with-ld-opt="$ld_opt" \
                --add-dynamic-module="$ROOT" >"$objdir/configure.log" 2>&1 \
                || { tail -30 "$objdir/configure.log"; exit 1; }
        )
        echo "$stamp" >"$objdir/.stamp"
    fi

    log "module ($out)"
    # the link does not depend on the core library in nginx's Makefile
    if [ "$lib" -nt "$objdir/objs/ngx_http_ratelimit_module.so" ]; then
        rm -f "$objdir/objs/ngx_http_ratelimit_module.so"
    fi
    make -C "$objdir" -f objs/Makefile -j "$JOBS" modules >"$objdir/make.log" 2>&1 \
        || { cat "$objdir/make.log"; exit 1; }
    # a new file, not rewritten in place: a running nginx may have it mapped
    cp "$objdir/objs/ngx_http_ratelimit_module.so" "$out.tmp"
    mv -f "$out.tmp" "$out"
}

build() {
    ensure_packages "${PACKAGES[@]}"
    mkdir -p "$BUILD"
    build_core "$BUILD/cmake"
    build_module "$BUILD/cmake/libratelimit_core.a" "$BUILD/nginx" "$BUILD/ngx_http_ratelimit_module.so"
    log "built $BUILD/ngx_http_ratelimit_module.so"
}

run_tests() {
    ensure_packages "${TEST_PACKAGES[@]}"
    log "unit tests (ctest)"
    ctest --test-dir "$BUILD/cmake" --output-on-failure -j "$JOBS"
    log "end-to-end tests (prove -r t/)"
    (cd "$ROOT" && prove -r t/)
}

# Both suites again with the core, its tests, the tools and the module built
# with AddressSanitizer and UBSan.  Debian's nginx is not instrumented: the
# sanitizer runtime is preloaded into it (RL_PRELOAD, only for nginx), leak
# checks are off (nginx does not free its cycle at exit), and any report in
# the error log fails the test that caused it (t/lib/RLTest.pm).
test_asan() {
    local dir=$BUILD/asan
    ensure_packages "${PACKAGES[@]}" "${TEST_PACKAGES[@]}"
    mkdir -p "$dir"
    build_core "$dir/cmake" -DRL_SANITIZE=ON -DRL_BENCH=OFF -DRL_TOOLS_DIR="$dir"
    build_module "$dir/cmake/libratelimit_core.a" "$dir/nginx" "$dir/ngx_http_ratelimit_module.so" \
        "-fsanitize=address,undefined -fno-omit-frame-pointer" "-fsanitize=address,undefined"
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_segv=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    log "unit tests, sanitized (ctest)"
    ctest --test-dir "$dir/cmake" --output-on-failure -j "$JOBS"
    log "end-to-end tests, sanitized (prove -r t/)"
    (cd "$ROOT" && RL_MODULE=$dir/ngx_http_ratelimit_module.so RL_REPLAY=$dir/ratelimit-replay \
        RL_PRELOAD="$(gcc -print-file-name=libasan.so)" prove -r t/)
}

demo() {
    local prefix
    prefix=$(mktemp -d /tmp/ngx-ratelimit-demo.XXXXXX)
    chmod 755 "$prefix"   # nginx's workers run as nobody
    mkdir -p "$prefix/modules" "$prefix/html" "$prefix/logs" "$prefix/tmp"
    cp "$BUILD/ngx_http_ratelimit_module.so" "$prefix/modules/"
    cp "$ROOT/examples/nginx.conf" "$prefix/nginx.conf"
    echo "hello from ngx-ratelimit" >"$prefix/html/index.html"
    cat >&2 <<EOF

nginx is running on http://127.0.0.1:8080 (prefix $prefix). In another terminal:

    curl -i http://127.0.0.1:8080/      # six times: X-RateLimit-Remaining counts
                                        # down 4, 3, 2, 1, 0, then 429 + Retry-After
    tail -f $prefix/logs/access.log    # \$ratelimit_status of each request

Ctrl-C stops it.
EOF
    trap 'rm -rf "$prefix"' EXIT
    "$NGINX_BIN" -p "$prefix/" -c "$prefix/nginx.conf" -e stderr
}

# Figures go to stdout, progress to stderr; bench/README.md explains them.
run_bench() {
    local which=${1:-all}
    ensure_packages wrk libbenchmark-dev util-linux
    build
    if [ "$which" = all ] || [ "$which" = core ]; then
        log "core micro-benchmarks"
        "$BUILD/cmake/core_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
            --benchmark_filter='.*' 2>/dev/null | grep -E 'median|^Run on|^Benchmark'
        "$BUILD/cmake/contention_bench"
    fi
    if [ "$which" = all ] || [ "$which" = summary ]; then
        log "eviction summary"
        "$BUILD/cmake/summary_bench"
    fi
    for b in throughput density shaping redis; do
        if [ "$which" = all ] || [ "$which" = "$b" ]; then
            log "$b"
            perl "$ROOT/bench/$b.pl"
        fi
    done
}

# The libFuzzer targets (clang, with ASan and UBSan), each for SECONDS
# (default 60), starting from the committed seeds in tests/fuzz/corpus.
fuzz() {
    local seconds=${1:-60} dir=$BUILD/fuzz t
    ensure_packages clang libclang-rt-14-dev cmake make
    build_core "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DRL_FUZZ=ON -DRL_TESTS=OFF \
        -DRL_BENCH=OFF -DRL_TOOLS_DIR="$dir"
    for t in rule transition resp; do
        log "fuzz_$t for ${seconds}s"
        mkdir -p "$dir/corpus/$t"
        cp "$ROOT/tests/fuzz/corpus/$t/"* "$dir/corpus/$t/"
        "$dir/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$dir/" \
            "$dir/corpus/$t" 2>&1 | grep -E '^(stat::number_of_executed_units|stat::new_units_added)|ERROR|failed|SUMMARY|Done'
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz_$t failed: see $dir/crash-*" >&2; exit 1; }
    done
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
    test-asan) test_asan ;;
    fuzz) fuzz "${2:-60}" ;;
    demo) build; demo ;;
    bench) run_bench "${2:-all}" ;;
    stress) build; stress "${2:-100}" ;;
    *) echo "usage: $0 [build|test|test-asan|fuzz [SECONDS]|stress [ROUNDS]|demo|bench [core|summary|throughput|density|shaping|redis]]" >&2
       exit 2 ;;
esac
