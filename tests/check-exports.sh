#!/bin/sh
# SPDX-License-Identifier: MIT
# The ABI the build exports: every symbol librig.so exports is in the
# version node lib/librig.map gives it, and the slow paths that the inline
# hot path calls (rig__*) sit in RIG_INLINE_0.1, apart from the API. And
# rig.pc asks of an application only what the public headers include.
set -e
lib=lib/.libs/librig.so
map=${top_srcdir:-.}/lib/librig.map
[ -f "$lib" ] || { echo "SKIP: no shared library (built static?)"; exit 77; }
status=0
# A version that is not the default shows as "(RIG_0.1)": rig_nic_open's
# older one (lib/nic.c).
objdump -T "$lib" | awk '$NF ~ /^rig/ { v = $(NF-1); gsub(/[()]/, "", v); print v, $NF }' |
	sort >exports.actual
# What the map says: "node symbol" for each global.
awk '/^[A-Z_0-9.]+ *\{/ { node = $1 } /;$/ && node != "" && $1 !~ /:/ && $0 !~ /\}/ {
	sub(/;/, "", $1); if ($1 != "*") print node, $1 }' "$map" | sort >exports.expected
if ! cmp -s exports.actual exports.expected; then
	echo "FAIL: exported symbols differ from $map:"
	diff exports.expected exports.actual || true
	status=1
fi
if grep -v '^RIG_INLINE_0.1 ' exports.actual | grep -q ' rig__'; then
	echo "FAIL: a rig__ slow path outside RIG_INLINE_0.1"; status=1
fi
if grep '^RIG_INLINE_0.1 ' exports.actual | grep -vq ' rig__'; then
	echo "FAIL: an API function in RIG_INLINE_0.1"; status=1
fi
[ $status -ne 0 ] || echo "ok: $(wc -l <exports.actual) exports, each in its node"
# The headers include <infiniband/verbs.h> and nothing of liburing or
# librdmacm: rig.pc requires libibverbs alone of an application.
requires=$(PKG_CONFIG_PATH=. pkg-config --print-requires rig)
if [ "$requires" != libibverbs ]; then
	echo "FAIL: rig.pc requires '$requires', not libibverbs alone"; status=1
else
	echo "ok: rig.pc requires libibverbs alone"
fi
if grep -rn -e '#include <liburing' -e '#include <rdma/' "${top_srcdir:-.}"/include/rig; then
	echo "FAIL: a public header includes liburing or librdmacm"; status=1
fi
# No version node is newer than the release: rig_version() and
# RIG_CHECK_VERSION must grant every interface the library exports.
release=${RIG_RELEASE:?RIG_RELEASE (the package version) is not set}
newer=$(awk -v r="$release" 'BEGIN { split(r, v, ".") }
	/^RIG_[A-Z_]*[0-9]+\.[0-9]+ *\{/ { n = $1; sub(/^RIG_([A-Z]+_)?/, "", n); split(n, w, ".")
		if (w[1] + 0 > v[1] + 0 || (w[1] + 0 == v[1] + 0 && w[2] + 0 > v[2] + 0)) print $1 }' "$map")
if [ -n "$newer" ]; then
	echo "FAIL: $map has node(s) newer than the release $release: $newer"; status=1
else
	echo "ok: no version node of $map is newer than the release $release"
fi
rm -f exports.actual exports.expected
exit $status
