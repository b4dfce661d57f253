#!/bin/sh
# Install the packages qkv needs to test and to plot, but only those that are
# missing: Check (unit tests), gnuplot (plots), a CJK font (Chinese labels)
# and numpy (the test that reads qkv's weights from outside). With --ci,
# also what CI needs: clang (and its fuzzer runtime) and valgrind.
# Runs apt-get update once, before the first install. Safe to run repeatedly.
set -eu

missing=""
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists check; then
    missing="$missing check"
fi
command -v gnuplot >/dev/null 2>&1 || missing="$missing gnuplot-nox"
if ! { command -v fc-list >/dev/null 2>&1 &&
        fc-list 2>/dev/null | grep -qi 'wenquanyi zen hei'; }; then
    missing="$missing fonts-wqy-zenhei"
fi

python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" -c 'import numpy' >/dev/null 2>&1 || missing="$missing python3-numpy"
if [ "${1:-}" = "--ci" ]; then
    command -v clang >/dev/null 2>&1 || missing="$missing clang"
    command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind"
fi

if [ -z "$missing" ]; then
    exit 0
fi

echo "deps.sh: installing:$missing" >&2
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
