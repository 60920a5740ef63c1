#!/bin/bash
# SPDX-License-Identifier: MIT
# The library builds without what only the tests need: configure, in a
# tree of its own, sees a pkg-config that has neither Criterion nor
# libuv; the library and examples build, and make check reports the
# suites that need them as skipped, naming the package, never as passed.
#
#   tests/check-optional.sh      # from the top of the checkout
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rig-optional.XXXXXX")
trap '[[ ${KEEP:-} ]] || rm -rf "$tmp"' EXIT
mkdir "$tmp/pc" "$tmp/build"
for d in $(pkg-config --variable pc_path pkg-config | tr : ' '); do
	[[ -d $d ]] && cp -n "$d"/*.pc "$tmp/pc/" 2>/dev/null || true
done
rm -f "$tmp"/pc/criterion*.pc "$tmp"/pc/libuv*.pc
[[ -x configure ]] || ./autogen.sh >/dev/null
cd "$tmp/build"
PKG_CONFIG_LIBDIR=$tmp/pc "$OLDPWD/configure" -q >configure.out 2>&1 ||
	{ cat configure.out; echo "FAIL: configure stops without Criterion and libuv"; exit 1; }
make -j"$(nproc)" -s >/dev/null
make -s check >/dev/null 2>&1 || { cat test-suite.log; echo "FAIL: make check"; exit 1; }
grep -q '^# PASS: *[1-9]' test-suite.log || { echo "FAIL: nothing ran"; exit 1; }
grep -Fq 'SKIP: Criterion was not found at configure' tests/skip-without-criterion.sh.log ||
	{ echo "FAIL: no SKIP names Criterion"; exit 1; }
grep -q '^# SKIP: *1$' test-suite.log || { grep '^#' test-suite.log; echo "FAIL: not one SKIP"; exit 1; }
echo "ok: without Criterion and libuv the library builds, and make check skips the suites, saying why"
