#!/bin/sh
# SPDX-License-Identifier: MIT
# Each public header compiles on its own, as C99 and as C++; version.h
# is configure's, in the build tree (the current directory).
set -e
src=${top_srcdir:-.}/include
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
for name in $({ (cd "$src" && ls rig/*.h); [ ! -f include/rig/version.h ] ||
		echo rig/version.h; } | sort -u); do
	printf '#include <%s>\nint rig_header_check;\n' "$name" >"$tmp/t.c"
	cp "$tmp/t.c" "$tmp/t.cc"
	if ! ${CC:-cc} -std=c99 -Wall -Wextra -Werror -Iinclude -I"$src" $VERBS_CFLAGS $URING_CFLAGS \
		-c "$tmp/t.c" -o "$tmp/t.o"; then
		echo "FAIL: $name as C99"; status=1
	fi
	if ! ${CXX:-c++} -std=c++11 -Wall -Wextra -Werror -Iinclude -I"$src" $VERBS_CFLAGS $URING_CFLAGS \
		-c "$tmp/t.cc" -o "$tmp/t.o"; then
		echo "FAIL: $name as C++"; status=1
	fi
	[ $status -ne 0 ] || echo "ok: $name (C99, C++)"
done
exit $status
