#!/bin/bash
# SPDX-License-Identifier: MIT
# What the docs say of version nodes comes from lib/librig.map, the one
# source: every node the headers, README and man pages name exists there
# (a hypothetical one is marked ", say"), and every "first appeared in rig
# A.B.C, in the version node RIG_A.B" of a man page names a function that
# the map puts in that node, which is that release's.
set -euo pipefail
src=${top_srcdir:-.}
map=$src/lib/librig.map
status=0
fail() { echo "FAIL: $*"; status=1; }

# "node symbol" for each global of the map.
pairs=$(awk '/^[A-Z_0-9.]+ *\{/ { node = $1 } /;$/ && node != "" && $1 !~ /:/ && $0 !~ /\}/ {
	sub(/;/, "", $1); print node, $1 }' "$map")
nodes=$(awk '{ print $1 }' <<<"$pairs" | sort -u)

while IFS=: read -r file line node; do
	grep -qx "$node" <<<"$nodes" || fail "$file:$line names $node, which lib/librig.map has not"
done < <(grep -rnoE 'RIG_([A-Z]+_)?[0-9]+\.[0-9]+' "$src"/include/rig/*.h "$src"/README \
	"$src"/man/*.md | grep -v ', say' |
	while IFS=: read -r f l n; do sed -n "${l}p" "$f" | grep -q ', say' || echo "$f:$l:$n"; done)

# The statements of first appearance: "**f**() first appeared in rig
# A.B.C, in the version node N", "**f**() in rig A.B.C, in N", and "It
# first appeared ..." on the page of the function named first in NAME.
for page in "$src"/man/*.3.md; do
	while read -r fn release node; do
		grep -qx "$node $fn" <<<"$pairs" ||
			fail "${page##*/}: $fn is said to be in $node; lib/librig.map puts it in" \
				"$(awk -v f="$fn" '$2 == f { print $1 }' <<<"$pairs")"
		[[ ${node##*_} == "$release" ]] ||
			fail "${page##*/}: $fn is said to come with rig $release, in $node"
	done < <(perl -0777 -ne '
		my ($first) = /# NAME\s+(\w+)/;
		s/\s+/ /g;
		while (/(?:\*\*(\w+)\*\*\(\)|\b(It)) (?:first appeared )?in rig (\d+)\.(\d+)\.\d+, in (?:the version node )?(RIG_[A-Z_]*\d+\.\d+)/g) {
			my $f = $1 // $first;
			print "$f $3.$4 $5\n";
		}' "$page")
done
((status)) || echo "ok: the version nodes the docs name are lib/librig.map's"
exit $status
