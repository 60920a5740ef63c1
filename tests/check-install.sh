#!/bin/sh
# SPDX-License-Identifier: MIT
# What make install gives a user works: installs build tree BUILD into a
# staging directory (DESTDIR), then, against that install alone, through
# `pkg-config --cflags --libs rig`, builds and runs a C program and a C++
# program (the version macros against rig_version(), the inline hot path
# compiled in), builds examples/rig-hello.c as the README says, checks
# that every man page and alias is installed and readable, and that make
# uninstall removes it all. No device needed; tests/run-all runs it on
# the host.
#
#   tests/check-install.sh BUILD
#
# A staged install rather than make installcheck: that checks an install
# already made at the configured prefix (root's /usr/local), while this
# needs nothing but the build tree and leaves the machine as it was.
set -eu
[ $# -eq 1 ] || { echo "usage: tests/check-install.sh BUILD" >&2; exit 2; }
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rig-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
status=0

make -C "$build" -s --no-print-directory install DESTDIR="$dest" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; echo "FAIL: make install"; exit 1; }
# The staged .pc says the configured prefix; the sysroot points pkg-config
# (and so -I and -L) into the staging directory.
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
PKG_CONFIG_SYSROOT_DIR=$dest
PKG_CONFIG_PATH=$dest$(make -C "$build" -s --no-print-directory print-dir DIR=pkgconfigdir)
libdir=$(make -C "$build" -s --no-print-directory print-dir DIR=libdir)
mandir=$(make -C "$build" -s --no-print-directory print-dir DIR=mandir)
[ -f "$dest$libdir/librig.so.0" ] || { echo "FAIL: no $dest$libdir/librig.so.0"; exit 1; }
flags=$(pkg-config --cflags --libs rig) || { echo "FAIL: pkg-config rig"; exit 1; }
echo "ok: pkg-config --cflags --libs rig: $flags"

# The C program: version macros, rig_version(), an inline function and
# the wire form, against the installed headers and library only.
cat >"$tmp/v.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <rig/rig.h>

#if !RIG_CHECK_VERSION(0, 2, 0)
#error "RIG_CHECK_VERSION(0, 2, 0) is false"
#endif
#if RIG_CHECK_VERSION(RIG_VERSION_MAJOR, RIG_VERSION_MINOR, RIG_VERSION_PATCH + 1)
#error "RIG_CHECK_VERSION is true of a later patch"
#endif
#if RIG_CHECK_VERSION(RIG_VERSION_MAJOR, RIG_VERSION_MINOR + 1, 0)
#error "RIG_CHECK_VERSION is true of a later minor"
#endif

/* An inline function of the hot path, compiled in. */
int (*post)(struct rig_qp *, const struct rig_region *, size_t, size_t) = rig_qp_send;

int main(void)
{
	struct rig_endpoint e = { 0x123456, 0xabcdef, { 1 }, { 2 } }, back;
	uint8_t wire[RIG_ENDPOINT_WIRE];
	char built[32];

	snprintf(built, sizeof(built), "%d.%d.%d", RIG_VERSION_MAJOR,
		 RIG_VERSION_MINOR, RIG_VERSION_PATCH);
	rig_endpoint_pack(&e, wire);
	if (strcmp(rig_version(), RIG_VERSION_STRING) || strcmp(built, RIG_VERSION_STRING) ||
	    rig_endpoint_unpack(wire, sizeof(wire), &back) || back.qp != e.qp ||
	    rig_endpoint_unpack(wire, 29, &back) != -EINVAL || !post) {
		printf("rig_version() %s, headers %s (%s)\n", rig_version(),
		       RIG_VERSION_STRING, built);
		return 1;
	}
	printf("%s\n", rig_version());
	return 0;
}
EOF
cp "$tmp/v.c" "$tmp/v.cc"
# shellcheck disable=SC2086 # $flags is words
for lang in c c++; do
	case $lang in
	c) cc=${CC:-cc}; src=$tmp/v.c; std=-std=c99 ;;
	c++) cc=${CXX:-c++}; src=$tmp/v.cc; std=-std=c++11 ;;
	esac
	if ! $cc $std -Wall -Wextra -Werror -o "$tmp/v" "$src" $flags; then
		echo "FAIL: $lang program against the install"; status=1; continue
	fi
	# Only the staged library: the loader must not find the build tree's.
	if ! got=$(LD_LIBRARY_PATH=$dest$libdir "$tmp/v"); then
		echo "FAIL: $lang program: $got"; status=1
	elif ! LD_LIBRARY_PATH=$dest$libdir ldd "$tmp/v" | grep -q "$dest$libdir/librig.so.0"; then
		echo "FAIL: $lang program does not run on the installed librig.so.0"; status=1
	else
		echo "ok: $lang program, rig $got, RIG_CHECK_VERSION"
	fi
done

# The README's build line for the first program.
cp "$top/examples/rig-hello.c" "$tmp/hello.c"
# shellcheck disable=SC2046
if (cd "$tmp" && ${CC:-cc} -Wall -Werror hello.c $(pkg-config --cflags --libs rig) -o hello); then
	echo "ok: cc hello.c \$(pkg-config --cflags --libs rig)"
else
	echo "FAIL: examples/rig-hello.c out of tree"; status=1
fi

# The man pages: every page and every alias, and each alias's target.
n=0
for md in "$top"/man/*.3.md "$top"/man/*.7.md; do
	page=$(basename "$md" .md)
	sect=${page##*.}
	if [ ! -s "$dest$mandir/man$sect/$page" ]; then
		echo "FAIL: $mandir/man$sect/$page not installed"; status=1
	fi
	n=$((n + 1))
done
while read -r alias target; do
	f=$dest$mandir/man3/$alias
	if [ "$(cat "$f" 2>/dev/null)" != ".so man3/$target" ] ||
	   [ ! -s "$dest$mandir/man3/$target" ]; then
		echo "FAIL: $mandir/man3/$alias is not a stub of an installed $target"; status=1
	fi
	n=$((n + 1))
done <"$top/man/aliases"
# man itself, where installed, finds a page through an alias.
if command -v man >/dev/null &&
   ! MANPATH=$dest$mandir MANWIDTH=80 man rig_qp_read 2>/dev/null | grep -q 'rig_qp_send, rig_qp_read'; then
	echo "FAIL: man rig_qp_read does not show rig_qp_send(3)"; status=1
fi
[ $status -ne 0 ] || echo "ok: $n man pages and aliases installed"

make -C "$build" -s --no-print-directory uninstall DESTDIR="$dest" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log"; echo "FAIL: make uninstall"; exit 1; }
left=$(find "$dest" -type f)
if [ -n "$left" ]; then
	echo "FAIL: make uninstall left:"; echo "$left"; status=1
else
	echo "ok: make uninstall removes it all"
fi
exit $status
