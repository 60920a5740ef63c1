#!/bin/sh
# SPDX-License-Identifier: MIT
# Every function a program can name has a man page: each global symbol of
# lib/librig.map and each inline rig_* function of include/rig/*.h is a
# page, man/NAME.3.md, or an alias of one in man/aliases. Every alias
# points at a page. Every page has NAME, SYNOPSIS, DESCRIPTION, RETURN
# VALUE, ERRORS, RULES (the rig(7) tags it keeps) and SEE ALSO, and is one
# the build installs (RIG_MAN_PAGES, the Makefile's dist_man_MANS); so are
# the pages of section 7, rig(7) and rig-wire(7), with NAME, SYNOPSIS,
# DESCRIPTION and SEE ALSO. rig(7)'s
# first program is examples/rig-hello.c.
set -e
top=${top_srcdir:-.}
man=$top/man
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

# The names: the map's globals (every node), the headers' inline functions.
awk '/^[A-Z_0-9.]+ *\{/ { node = 1 } /;$/ && node && $1 !~ /:/ && $0 !~ /\}/ {
	sub(/;/, "", $1); if ($1 != "*") print $1 }' "$top/lib/librig.map" >"$tmp/names"
sed -n 's/^RIG_INLINE [^(]*[ *]\(rig_[a-z0-9_]*\)(.*/\1/p' "$top"/include/rig/*.h >>"$tmp/names"
sort -u "$tmp/names" -o "$tmp/names"
# Fewer than the hot path's five inline functions means the patterns broke.
[ "$(grep -c '^rig_qp_\(room\|send\|read\|receive\|poll\)$' "$tmp/names")" -eq 5 ] ||
	{ echo "FAIL: the inline functions of rig/qp.h were not found"; exit 1; }

# The pages and the aliases.
for f in "$man"/*.3.md; do
	[ -f "$f" ] && basename "$f" .3.md
done | sort >"$tmp/pages"
[ -f "$man/aliases" ] || { echo "FAIL: no $man/aliases"; exit 1; }
while read -r alias target; do
	case $alias/$target in
	*.3/*.3) ;;
	*) echo "FAIL: man/aliases: '$alias $target' is not 'NAME.3 PAGE.3'"; status=1; continue ;;
	esac
	grep -qx "${target%.3}" "$tmp/pages" ||
		{ echo "FAIL: man/aliases: $alias points at $target, which has no page"; status=1; }
	grep -qx "${alias%.3}" "$tmp/pages" &&
		{ echo "FAIL: man/aliases: $alias is a page of its own too"; status=1; }
	echo "${alias%.3}"
done <"$man/aliases" >"$tmp/aliases"
sort "$tmp/pages" "$tmp/aliases" >"$tmp/documented"

while read -r name; do
	grep -qx "$name" "$tmp/documented" ||
		{ echo "FAIL: $name has no man page (man/$name.3.md or a line of man/aliases)"; status=1; }
done <"$tmp/names"

# Each page: its front matter names it, the sections are there, and the
# build installs it.
for p in $(cat "$tmp/pages") rig rig-wire; do
	case $p in rig | rig-*) f=$man/$p.7.md; roff=man/$p.7 ;; *) f=$man/$p.3.md; roff=man/$p.3 ;; esac
	for s in NAME SYNOPSIS DESCRIPTION 'SEE ALSO'; do
		grep -qx "# $s" "$f" || { echo "FAIL: $f has no $s section"; status=1; }
	done
	if [ "$f" = "$man/$p.3.md" ]; then
		for s in 'RETURN VALUE' ERRORS RULES; do
			grep -qx "# $s" "$f" || { echo "FAIL: $f has no $s section"; status=1; }
		done
		up=$(echo "$p" | tr a-z A-Z)
		grep -qx "title: $up" "$f" || { echo "FAIL: $f: front matter title is not $up"; status=1; }
	fi
	if [ -n "${RIG_MAN_PAGES+set}" ]; then
		case " $RIG_MAN_PAGES " in
		*" $roff "*) ;;
		*) echo "FAIL: $roff is not in Makefile.am's dist_man_MANS"; status=1 ;;
		esac
	fi
done
# rig(7) quotes the first program: the quote is the file, from its first
# #include on.
awk '/^# A FIRST PROGRAM$/ { s = 1 } s && /^```$/ { exit } s == 2 { print }
	s && /^```c$/ { s = 2 }' "$man/rig.7.md" >"$tmp/quoted"
sed -n '/^#include <stdio.h>$/,$p' "$top/examples/rig-hello.c" >"$tmp/hello"
if ! [ -s "$tmp/hello" ] || ! cmp -s "$tmp/quoted" "$tmp/hello"; then
	echo "FAIL: A FIRST PROGRAM of man/rig.7.md does not quote examples/rig-hello.c:"
	diff "$tmp/hello" "$tmp/quoted" || true
	status=1
fi

[ $status -ne 0 ] ||
	echo "ok: $(wc -l <"$tmp/names") functions, $(wc -l <"$tmp/pages") pages, $(wc -l <"$tmp/aliases") aliases; rig(7) quotes rig-hello.c"
exit $status
