#!/bin/sh
# SPDX-License-Identifier: MIT
# The USDT probes of librig.so are those rig(7) PROBES lists: each one
# listed is in the library's ELF notes (readelf -n) with as many arguments
# as the page gives it, at every site, and the library has no other, of
# provider rig or any other. Built with --disable-probes (RIG_PROBES=no),
# it has none. No probe sits in the inline hot path of the public headers,
# which compiles into applications. Run from the build tree (make check).
set -e
top=${top_srcdir:-.}
lib=lib/.libs/librig.so
readelf=${READELF:-readelf}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

command -v "$readelf" >/dev/null || { echo "SKIP: no $readelf (binutils)"; exit 77; }
[ -f "$lib" ] || { echo "FAIL: no $lib: build the library first"; exit 1; }

# The page: "**name**(*a*, *b*)" lines of its PROBES section.
sed -n '/^# PROBES$/,/^# [A-Z]/p' "$top/man/rig.7.md" |
	sed -n 's/^\*\*\([a-z_]*\)\*\*(\(.*\))$/\1 \2/p' |
	awk '{ name = $1; $1 = ""; n = ($0 ~ /[^ ]/) ? split($0, a, ",") : 0; print name, n }' |
	sort >"$tmp/listed"
# The library: each probe site's provider, name and argument count (a
# probe without arguments has an empty Arguments line).
"$readelf" -n "$lib" | awk '
	/Provider:/ { provider = $2 }
	/Name:/ { name = $2 }
	/Arguments:/ { print provider ":" name, NF - 1 }' | sort -u >"$tmp/sites"
if [ "${RIG_PROBES:-yes}" = no ]; then
	if [ -s "$tmp/sites" ]; then
		echo "FAIL: built without probes, $lib has some:"; cat "$tmp/sites"; exit 1
	fi
	echo "PASS: built without probes (--disable-probes or no sys/sdt.h): $lib has none"
	exit 0
fi

[ -s "$tmp/listed" ] || { echo "FAIL: rig(7) PROBES lists no probe"; exit 1; }
while read -r name n; do
	got=$(awk -v p="rig:$name" '$1 == p { print $2 }' "$tmp/sites" | tr '\n' ' ')
	case $got in
	"") echo "FAIL: rig:$name is listed in rig(7) PROBES but not in $lib"; status=1 ;;
	"$n ") echo "PASS: rig:$name, $n arguments" ;;
	*) echo "FAIL: rig:$name has $n arguments in rig(7) PROBES, $got(by site) in $lib"; status=1 ;;
	esac
done <"$tmp/listed"
while read -r probe n; do
	grep -q "^${probe#rig:} " "$tmp/listed" && [ "${probe%%:*}" = rig ] ||
		{ echo "FAIL: $probe ($n arguments) is in $lib but not in rig(7) PROBES"; status=1; }
done <"$tmp/sites"

if grep -n 'RIG_PROBE\|STAP_PROBE\|DTRACE_PROBE\|sys/sdt\.h' "$top"/include/rig/*.h; then
	echo "FAIL: a probe in a public header: the inline hot path carries none"
	status=1
fi
exit $status
