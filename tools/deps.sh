#!/bin/sh
# Installs what the build and the test suites need and is missing (Debian).
# Quick and silent when everything is already there. `deps.sh fuzz` also
# installs clang (libFuzzer) for `make fuzz-cron`.
set -e
missing=""
need_pkg() { # need_pkg PACKAGE TEST-COMMAND...
    pkg=$1; shift
    if ! "$@" >/dev/null 2>&1; then missing="$missing $pkg"; fi
}
need_pkg libsqlite3-dev test -f /usr/include/sqlite3.h
need_pkg sqlite3 command -v sqlite3
need_pkg gcc command -v cc
need_pkg g++ command -v c++
need_pkg make command -v make
# the CMake build (make test-ctest), the installed-library consumer test
# (make test-consumer: cmake and pkg-config) and the export check (nm)
need_pkg cmake command -v cmake
need_pkg pkg-config command -v pkg-config
need_pkg binutils command -v nm
# Python binding (bindings/python): Debian's python3 with venv, headers and pip.
need_pkg python3 test -x /usr/bin/python3
need_pkg python3-venv /usr/bin/python3 -c "import ensurepip, venv"
need_pkg python3-dev sh -c 'test -f "$(/usr/bin/python3 -c "import sysconfig; print(sysconfig.get_paths()[\"include\"])")/Python.h"'
# the tocsin CLI's dashboard (cli/): make and CMake build it, so both installs match
need_pkg libmicrohttpd-dev test -f /usr/include/microhttpd.h
# the cron tests run in America/New_York (DST changes)
need_pkg tzdata test -f /usr/share/zoneinfo/America/New_York
if [ "${1:-}" = fuzz ]; then
    need_pkg clang command -v clang
    need_pkg libclang-rt-14-dev sh -c 'ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a'
fi
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq $missing >/dev/null
fi
