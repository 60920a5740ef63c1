#!/bin/bash
# SPDX-License-Identifier: MIT
# lib/ is built in layers: README ("How it is built") lists its files
# top first, and each file may call only the files below it. This reads
# the list and the library's objects (their defined and undefined
# symbols, nm), and fails on every call upward, printing it, and on a
# file of lib/ the list leaves out. Run from the build tree (make check).
# A lower layer reaches a higher one only through a hook the higher one
# registers (a function pointer), which no symbol shows.
set -euo pipefail
src=${top_srcdir:-.}

mapfile -t layers < <(sed -n 's/^        \([a-z_]*\.c\)  .*/\1/p' "$src/README")
((${#layers[@]})) || { echo "FAIL: README lists no layers of lib/"; exit 1; }
declare -A rank
for i in "${!layers[@]}"; do
	[[ -z ${rank[${layers[$i]}]:-} ]] ||
		{ echo "FAIL: README lists lib/${layers[$i]} twice"; exit 1; }
	rank[${layers[$i]}]=$i
done

status=0
objs=()
for c in "$src"/lib/*.c; do
	f=${c##*/}
	if [[ -z ${rank[$f]:-} ]]; then
		echo "FAIL: lib/$f is in no layer of README's list"
		status=1
		continue
	fi
	o=lib/.libs/librig_la-${f%.c}.o
	[[ -f $o ]] || o=lib/librig_la-${f%.c}.o
	[[ -f $o ]] || { echo "FAIL: no object of lib/$f: build the library first"; exit 1; }
	objs+=("$f=$o")
done

# "FILE SYMBOL" for each symbol a file defines, then each it needs.
defs=$(for e in "${objs[@]}"; do
	nm --defined-only "${e#*=}" | awk -v f="${e%%=*}" '$2 ~ /^[TDBRV]$/ { print f, $3 }'
done)
uses=$(for e in "${objs[@]}"; do
	nm --undefined-only "${e#*=}" | awk -v f="${e%%=*}" '{ print f, $2 }'
done)
ranks=$(for f in "${!rank[@]}"; do echo "$f ${rank[$f]}"; done)

up=$(awk -v ranks="$ranks" -v defs="$defs" '
	BEGIN {
		n = split(ranks, r, "\n")
		for (i = 1; i <= n; i++) { split(r[i], p, " "); rank[p[1]] = p[2] + 0 }
		n = split(defs, d, "\n")
		for (i = 1; i <= n; i++) { split(d[i], p, " "); where[p[2]] = p[1] }
	}
	$2 in where && where[$2] != $1 && rank[where[$2]] < rank[$1] {
		printf "FAIL: lib/%s calls %s of lib/%s, which is above it\n", $1, $2, where[$2]
	}' <<<"$uses")
if [[ -n $up ]]; then
	echo "$up"
	status=1
fi
((status)) || echo "ok: the ${#layers[@]} files of lib/ call only the layers below them"
exit $status
